"""LogitPanel: next-token top-k bars per series (e.g. clean / corrupt / patched), side by side, and a metric line.

Traits:
    series  list[{name: str, tokens: list[str], probs: list[float]}]   one bar subplot per entry
    metric  {name: str, values: {label: float}}   shown as text, e.g. {"name": "logit diff",
            "values": {"clean": 3.2, "corrupt": -3.1, "patched": 1.0}}
    title, status, error   str
    link    str   the heatmap whose exact-sweep clicks this panel paints at once (PatchingHeatmap.cell_tops)
    pairs   list[str]  a dataset's pairs, named (a menu chooses what the panel shows); [] = one pair, no menu
    pair    int   the pair shown: its index in `pairs`, or -1 for the mean over all of them

Requests from the frontend (protocol.json; each also carries its `id`) -> callbacks, called with keywords:
    {type:"pair", index}   -> on_pair(fn(index=))   (after `pair` is set; -1 = the mean over the pairs)
"""

from __future__ import annotations

import math
from typing import Any

import torch
import traitlets as t

from ..engine import Engine
from ..metrics import top_k as top_tokens
from ..widgets.base import Converted, Int, LabWidget, plain

__all__ = ["LogitPanel", "Series", "clean_series"]


def clean_series(value: Any) -> list[dict[str, Any]]:
    """Validate/normalise a list of {name, tokens, probs}; tensors accepted, non-finite probs become 0."""
    out = []
    for s in plain(value) or []:
        if not isinstance(s, dict):
            raise t.TraitError(f"each series must be a dict {{name, tokens, probs}}, got {type(s).__name__}")
        tokens = [str(x) for x in plain(s.get("tokens", []))]
        probs = [float(p) for p in plain(s.get("probs", []))]
        if len(tokens) != len(probs):
            raise t.TraitError(
                f"series {s.get('name', '')!r}: {len(tokens)} tokens but {len(probs)} probs (they must match)"
            )
        probs = [p if math.isfinite(p) else 0.0 for p in probs]
        out.append({**s, "name": str(s.get("name", "")), "tokens": tokens, "probs": probs})
    return out


def Series(**kwargs: Any) -> t.TraitType:  # noqa: N802 - reads like a trait type
    """list[{name, tokens, probs}] validated by `clean_series`."""
    return Converted(clean_series, "a list of {name, tokens, probs}", default_value=[], **kwargs)


class LogitPanel(LabWidget):
    _view_kind = t.Unicode("logits").tag(sync=True)
    REQUESTS = {
        "pair": {"index": "int"},
    }

    series = Series().tag(sync=True)
    metric = t.Dict().tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    link = t.Unicode("").tag(sync=True)
    pairs = t.List(t.Unicode()).tag(sync=True)
    pair = t.Int(-1).tag(sync=True)

    def _limits(self):
        return {"pair": {"index": Int(-1, len(self.pairs) - 1)}}

    def _handle_pair(self, index: int) -> None:
        self.pair = index

    def on_pair(self, fn, remove: bool = False):
        """fn(index=) when the menu chooses a pair (-1: the mean over the pairs); ``pair`` is already set."""
        return self._register("pair", fn, remove)

    @t.validate("metric")
    def _v_metric(self, proposal):
        m = dict(proposal["value"] or {})
        if not m:
            return {}
        vals = {}
        for k, v in dict(m.get("values", {})).items():
            f = float(plain(v))
            vals[str(k)] = f if math.isfinite(f) else None
        return {"name": str(m.get("name", "metric")), "values": vals}


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
TOP_K = 8


PROB_DIGITS = 4  # probabilities as views show them (bars print 3 digits); a saved notebook stays small


def top_k(lab: Engine, logits: torch.Tensor, k: int = TOP_K) -> tuple[list[str], list[float]]:
    """Top-k next tokens and probabilities of one row of last-position logits."""
    (ids,), (probs,) = top_tokens(logits[None], k)
    return [lab.tokenizer.decode([t]) for t in ids], [round(float(x), PROB_DIGITS) for x in probs]


def top_k_probs(lab: Engine, probs: torch.Tensor, k: int = TOP_K) -> tuple[list[str], list[float]]:
    """Top-k next tokens of one row of probabilities (e.g. the mean over a dataset's pairs)."""
    p, ids = probs.topk(k)
    return [lab.tokenizer.decode([int(t)]) for t in ids], [round(float(x), PROB_DIGITS) for x in p]

"""LogitPanel: next-token top-k bars per series (e.g. clean / corrupt / patched), side by side, and a metric line.

Traits:
    series  list[{name: str, tokens: list[str], probs: list[float]}]   one bar subplot per entry
    metric  {name: str, values: {label: float}, notes?: [str]}   shown as text, e.g. {"name": "logit diff",
            "values": {"clean": 3.2, "corrupt": -3.1, "patched": 1.0}}; notes (the metric's: an answer without
            its leading space) each on a line below
    title, status, error   str
    link    str   the heatmap whose exact-sweep clicks this panel paints at once (PatchingHeatmap.cell_tops)
    pairs   list[str]  a dataset's pairs, named (a menu chooses what the panel shows); [] = one pair, no menu
    pair    int   the pair shown: its index in `pairs`, or -1 for the mean over all of them

Requests from the frontend (protocol.json; each also carries its `id`) -> callbacks, called with keywords:
    {type:"pair", index}   -> on_pair(fn(index=))   (after `pair` is set; -1 = the mean over the pairs)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import traitlets as t

from ..engine import Engine
from ..metrics import top_k as top_tokens
from ..tokens import token_text
from ..widgets.base import Converted, Int, LabWidget, plain

__all__ = ["LogitPanel", "Series", "clean_series", "Bars"]


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
        out = {"name": str(m.get("name", "metric")), "values": vals}
        if m.get("notes"):
            out["notes"] = [str(n) for n in m["notes"]]
        return out


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
TOP_K = 8


PROB_DIGITS = 4  # probabilities as views show them (bars print 3 digits); a saved notebook stays small


def top_k(engine: Engine, logits: torch.Tensor, k: int = TOP_K) -> tuple[list[str], list[float]]:
    """Top-k next tokens and probabilities of one row of last-position logits."""
    (ids,), (probs,) = top_tokens(logits[None], k)
    return [token_text(engine.tokenizer, t) for t in ids], [round(float(x), PROB_DIGITS) for x in probs]


def top_k_probs(engine: Engine, probs: torch.Tensor, k: int = TOP_K) -> tuple[list[str], list[float]]:
    """Top-k next tokens of one row of probabilities (e.g. the mean over a dataset's pairs)."""
    p, ids = probs.topk(k)
    return [token_text(engine.tokenizer, int(t)) for t in ids], [round(float(x), PROB_DIGITS) for x in p]


@dataclass
class Bars:
    """What a logit panel shows, one series at a time: each series' top-k next tokens and, with a metric, its value
    on the metric line. Every view with next-token bars builds them here (the patching explorer, the feature view,
    the steering panel):

        bars = Bars(engine, metric)                 # metric: bound, last logits [rows, vocab] -> [rows]; or None
        bars.add("clean", run.last_logits)          # row `row` of the logits, or (row=None) the mean over rows
        bars.add("patched: L2 pos 5", logits, key="patched")   # the metric line names it by key
        bars.panel()                                # {"series": [...], "metric": {"name", "values"}} (LogitPanel)
    """

    engine: Engine
    metric: Any = None
    metric_name: str | None = None  # the metric line's name (default: the metric's own)
    row: int | None = 0  # which row of the logits a series shows; None: the mean over the rows (a dataset)
    series: list[dict] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, logits: torch.Tensor, key: str | None = None) -> None:
        """A series from last-position logits [rows, vocab]; its metric value under `key` (default: the name)."""
        if self.row is None:
            tokens, probs = top_k_probs(self.engine, logits.float().softmax(-1).mean(0))
        else:
            tokens, probs = top_k(self.engine, logits[self.row])
        value = None
        if self.metric is not None:
            per_row = self.metric(logits)
            value = float(per_row.mean() if self.row is None else per_row[self.row])
        self.add_top(name, tokens, probs, value, key)

    def add_top(self, name: str, tokens: list[str], probs: list[float], value: float | None = None,
                key: str | None = None) -> None:
        """A series already computed (a sweep's cell holds its top tokens and metric)."""
        self.series.append({"name": name, "tokens": tokens, "probs": [round(float(p), PROB_DIGITS) for p in probs]})
        if value is not None:
            self.values[key or name] = float(value)

    def panel(self) -> dict:
        """The LogitPanel's series and metric traits."""
        name = self.metric_name or getattr(self.metric, "name", None)
        if name is None:
            return {"series": self.series, "metric": {}}
        notes = list(getattr(self.metric, "notes", ()))  # an answer without its leading space: said every time
        metric = {"name": name, "values": self.values, **({"notes": notes} if notes else {})}
        return {"series": self.series, "metric": metric}


# ---- tokens as views label them (interplab.tokens) ---------------------------------------------------------------
def prompt_tokens(engine: Engine, prompt: str) -> list[str]:
    """A prompt's tokens as views label them: lab.to_str_tokens(prompt), byte pieces readable."""
    return engine.to_str_tokens(prompt)

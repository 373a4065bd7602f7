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
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
import traitlets as t

from ..engine import Engine
from ..metrics import top_k as top_tokens
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


# ---- tokens as views label them ------------------------------------------------------------------------------
REPLACEMENT = "\ufffd"  # what decoding a piece of a character gives: "?" in a label, the same for every piece
MAX_RUN = 8  # tokens one character may span (an emoji is four byte tokens in GPT-2's vocabulary)


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (each byte drawn as a printable character in the vocabulary), char -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer, i: int) -> bytes | None:
    """The exact bytes of token `i` where the vocabulary says them: a byte-level BPE piece (GPT-2's 'ð'), or a byte
    fallback token ('<0xF0>', Llama's); None otherwise."""
    piece = tokenizer.convert_ids_to_tokens(int(i))
    if not isinstance(piece, str) or not piece:
        return None
    if m := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece):
        return bytes([int(m[1], 16)])
    table = _byte_decoder()
    return bytes(table[c] for c in piece) if all(c in table for c in piece) else None


def _hex(tokenizer, i: int, k: int, n: int) -> str:
    raw = token_bytes(tokenizer, i)
    return f"<{' '.join(f'{b:02X}' for b in raw)}>" if raw is not None else f"<part {k + 1} of {n}>"


def token_texts(tokenizer, ids) -> list[str]:
    """Each token's text as views label it: decoded alone, except a piece of a character that several tokens make
    (an emoji is four byte tokens in GPT-2's vocabulary, each decoding alone to U+FFFD): each piece then reads as the
    text its run makes and its own bytes, '😀 <F0 9F>' (so four pieces are four labels, none a bare "?"); a piece
    no run completes (a lone byte token, as a top prediction) reads as its bytes, '<F0>'."""
    ids = [int(i) for i in ids]
    texts = [tokenizer.decode([i]) for i in ids]
    i = 0
    while i < len(ids):
        if REPLACEMENT not in texts[i]:
            i += 1
            continue
        # the shortest run from here that decodes whole (no replacement character left)
        end = next((j for j in range(i + 2, min(len(ids), i + MAX_RUN) + 1)
                    if REPLACEMENT not in tokenizer.decode(ids[i:j])), None)
        if end is None:
            texts[i] = _hex(tokenizer, ids[i], 0, 1)
            i += 1
            continue
        whole = tokenizer.decode(ids[i:end])
        for k in range(i, end):
            texts[k] = f"{whole} {_hex(tokenizer, ids[k], k - i, end - i)}"
        i = end
    return texts


def token_text(tokenizer, i: int) -> str:
    """One token's text as views label it (token_texts of one id): a lone byte piece as its bytes."""
    return token_texts(tokenizer, [i])[0]


def prompt_tokens(engine: Engine, prompt: str) -> list[str]:
    """A prompt's tokens as views label them: lab.to_str_tokens(prompt)'s positions, byte pieces readable."""
    return token_texts(engine.tokenizer, engine.tokenizer(prompt)["input_ids"])

"""SteeringPanel: a strength slider that previews the next-token distribution while dragging, plus generation.

Traits (synced, set by Python only; the requests below carry what the user changes, and the widget takes it into
these traits):
    n_layers        int
    sites           list[str]          choices for `site` (e.g. ["resid_pre", "resid_post", "attn_out", "mlp_out"])
    site            str
    layer           int                0..n_layers-1
    alpha           float              slider value
    alpha_min, alpha_max  float        slider range
    positions       "all" | "last" | "prompt"
    prompt          str
    positive, negative  str            newline-separated contrast prompts
    dist            list[{name, tokens, probs}]   e.g. base vs steered next-token top-k
    generated       str
    max_new_tokens  int
    busy            bool               disables Generate / Compute vector
    title, status, error  str

Requests (protocol.json; each also carries its `id`) -> callbacks, called with keywords:
    {type:"preview", alpha, layer, site, positions}                   -> on_preview(fn(alpha=, layer=, site=,
                                                                                       positions=))
        sent while dragging (throttled to one per 40 ms, latest value) and once on release
    {type:"generate", alpha, layer, site, positions, max_new_tokens}  -> on_generate(fn(alpha=, layer=, site=,
                                                                                        positions=, max_new_tokens=))
    {type:"set_vector", positive, negative}                           -> on_set_vector(fn(positive=, negative=))
        positive/negative passed as lists of the non-blank lines (exact text; `self.positive` keeps the raw text)
    {type:"update", prompt?, positive?, negative?, max_new_tokens?}   (no callback: the text boxes and the token
        count the user edited, taken into the traits)
Before the callbacks run, the widget's traits are updated from the request (alpha, layer, ...), so the controller
may read either.
"""

from __future__ import annotations

from typing import Any

import traitlets as t

from .base import MAX_NAME, PROTOCOL, Choice, Float, Int, LabWidget, Str
from .logits import Series

__all__ = ["SteeringPanel", "POSITIONS", "prompt_lines"]

POSITIONS = tuple(PROTOCOL["views"]["steering"]["requests"]["preview"]["positions"])  # "all", "last", "prompt"
MAX_NEW_TOKENS = 1024


def prompt_lines(text: str) -> list[str]:
    """Newline-separated prompts -> the non-blank lines, exact text otherwise."""
    return [line for line in text.splitlines() if line.strip()]


class SteeringPanel(LabWidget):
    _view_kind = t.Unicode("steering").tag(sync=True)

    n_layers = t.Int(1).tag(sync=True)
    sites = t.List(t.Unicode(), default_value=["resid_pre"]).tag(sync=True)
    site = t.Unicode("resid_pre").tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    alpha = t.Float(0.0).tag(sync=True)
    alpha_min = t.Float(-10.0).tag(sync=True)
    alpha_max = t.Float(10.0).tag(sync=True)
    positions = t.Unicode("all").tag(sync=True)
    prompt = t.Unicode("").tag(sync=True)
    positive = t.Unicode("").tag(sync=True)
    negative = t.Unicode("").tag(sync=True)
    dist = Series().tag(sync=True)
    generated = t.Unicode("").tag(sync=True)
    max_new_tokens = t.Int(20).tag(sync=True)
    busy = t.Bool(False).tag(sync=True)
    title = t.Unicode("").tag(sync=True)

    @t.validate("positions")
    def _v_positions(self, proposal):
        if proposal["value"] not in POSITIONS:
            raise t.TraitError(f"positions must be one of {POSITIONS}, got {proposal['value']!r}")
        return proposal["value"]

    @t.validate("n_layers")
    def _v_n_layers(self, proposal):
        if proposal["value"] < 1:
            raise t.TraitError(f"n_layers must be >= 1, got {proposal['value']}")
        return proposal["value"]

    # -- requests --------------------------------------------------------------------------------------------------
    def _limits(self):
        sites = list(self.sites) or [self.site]
        if self.site and self.site not in sites:
            sites.append(self.site)
        lo, hi = sorted((self.alpha_min, self.alpha_max))
        steer = {
            "alpha": Float(lo, hi),
            "layer": Int(0, self.n_layers - 1),
            "site": Choice(sites) if sites else Str(MAX_NAME, min_len=1),
        }
        return {
            "preview": steer,
            "generate": {**steer, "max_new_tokens": Int(1, MAX_NEW_TOKENS)},
            "update": {"max_new_tokens": Int(1, MAX_NEW_TOKENS)},
        }

    def _take(self, **fields: Any) -> None:
        with self.hold_sync():
            for k, v in fields.items():
                if getattr(self, k) != v:
                    setattr(self, k, v)

    def _handle_preview(self, alpha, layer, site, positions):
        self._take(alpha=alpha, layer=layer, site=site, positions=positions)

    def _handle_generate(self, alpha, layer, site, positions, max_new_tokens):
        self._take(alpha=alpha, layer=layer, site=site, positions=positions, max_new_tokens=max_new_tokens)

    def _handle_set_vector(self, positive, negative):
        self._take(positive=positive, negative=negative)

    def _handle_update(self, **fields):
        self._take(**fields)

    def _callback_kwargs(self, kind, fields):
        if kind == "set_vector":
            return {"positive": prompt_lines(fields["positive"]), "negative": prompt_lines(fields["negative"])}
        return fields

    def on_preview(self, fn, remove: bool = False):
        """fn(alpha=, layer=, site=, positions=): recompute `dist` for this strength (called while dragging)."""
        return self._register("preview", fn, remove)

    def on_generate(self, fn, remove: bool = False):
        """fn(alpha=, layer=, site=, positions=, max_new_tokens=): generate from `prompt` and set `generated`."""
        return self._register("generate", fn, remove)

    def on_set_vector(self, fn, remove: bool = False):
        """fn(positive=list[str], negative=list[str]): compute the steering vector from contrast prompts."""
        return self._register("set_vector", fn, remove)

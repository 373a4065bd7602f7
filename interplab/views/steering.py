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

import threading
from typing import Any

import torch
import traitlets as t

from ..analyses.vectors import diff_of_means
from ..edits import steer
from ..engine import Engine, engine_of
from ..widgets.base import (
    MAX_NAME,
    Choice,
    Float,
    Int,
    LabWidget,
    Str,
)
from ..widgets.jobs import job
from .logits import Bars, Series

__all__ = ["SteeringPanel", "POSITIONS", "prompt_lines"]

POSITIONS = ("all", "last", "prompt")  # where the steer applies: every position, the newest one, the prompt only
MAX_NEW_TOKENS = 1024


def prompt_lines(text: str) -> list[str]:
    """Newline-separated prompts -> the non-blank lines, exact text otherwise."""
    return [line for line in text.splitlines() if line.strip()]


class SteeringPanel(LabWidget):
    _view_kind = t.Unicode("steering").tag(sync=True)
    REQUESTS = {
        "preview": {"alpha": "number", "layer": "int", "site": "string", "positions": list(POSITIONS)},
        "generate": {"alpha": "number", "layer": "int", "site": "string", "positions": list(POSITIONS),
                     "max_new_tokens": "int"},
        "set_vector": {"positive": "string", "negative": "string"},
        "update": {"prompt": "string?", "positive": "string?", "negative": "string?", "max_new_tokens": "int?"},
    }

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


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
def steering_preview(lab: Engine, prompt: str, vector: torch.Tensor | None, site: str, layer: int, alpha: float,
                     positions: str) -> list[dict]:
    """Next-token top-k without and with the steer (h + alpha * v) at the chosen positions."""
    engine = engine_of(lab)
    bars = Bars(engine)
    bars.add("base", engine.run(prompt, log=False).last_logits)
    if vector is not None:
        pos = {"all": None, "last": -1, "prompt": None}[positions]
        steered = engine.run(prompt, edits=[steer(site, layer, vector, alpha=alpha, pos=pos)], log=False)
        bars.add(f"steered (alpha {alpha:g})", steered.last_logits)
    return bars.series


def steering_vector(lab: Engine, positive: list[str], negative: list[str], site: str, layer: int) -> torch.Tensor:
    """The steering vector mean(positive) - mean(negative) at (site, layer) (analyses.vectors.diff_of_means)."""
    engine = engine_of(lab)
    return diff_of_means(engine, positive, negative, site, layer)


def steering_generate(lab: Engine, prompt: str, vector: torch.Tensor | None, site: str, layer: int, alpha: float,
                      positions: str, max_new_tokens: int, cancel=None) -> str:
    engine = engine_of(lab)
    edits = []
    if vector is not None:
        pos = {"all": None, "last": "newest", "prompt": "prompt"}[positions]
        edits.append(steer(site, layer, vector, alpha=alpha, pos=pos))
    return engine.generate(prompt, edits, max_new_tokens=max_new_tokens, cancel=cancel).text


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
class SteeringController:
    """Drives a SteeringPanel: the vector from contrast prompts, a live preview while dragging, generation."""

    def __init__(self, lab: Engine, prompt: str, positive: list[str], negative: list[str], site: str = "resid_post",
                 layer: int | None = None, alpha_range: tuple[float, float] = (-4.0, 4.0), *, part: bool = False):
        self.engine = engine = engine_of(lab)
        self.worker = engine.worker
        sites = [s for s in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
                 if "unavailable" not in engine.sites.describe()[s]]
        self.panel = SteeringPanel(n_layers=engine.n_layers, sites=sites, site=site,
                                   layer=engine.n_layers // 2 if layer is None else layer, alpha=0.0,
                                   alpha_min=alpha_range[0], alpha_max=alpha_range[1], prompt=prompt,
                                   positive="\n".join(positive), negative="\n".join(negative),
                                   title="steering: h + alpha * (mean positive - mean negative)", part=part)
        self.vector, self._vector_at = None, None
        # preview and generate read the request's fields from the panel's traits (the panel took them first)
        self.panel.on_set_vector(lambda positive, negative: self.set_vector(positive, negative))
        self.panel.on_preview(lambda **_: self.preview())
        self.panel.on_generate(lambda **_: self.generate())
        self.set_vector(positive, negative)

    def set_vector(self, positive, negative) -> None:
        p = self.panel

        where = (p.site, p.layer)

        def run():
            return steering_vector(self.engine, positive, negative, *where)

        def show(v):
            self.vector, self._vector_at = v, where
            p.status = f"vector from {len(positive)} vs {len(negative)} prompts at {p.site} L{p.layer}, "\
                       f"norm {float(v.norm()):.2f}"
            self.preview()

        job(self.worker, p, f"vector:{id(self)}", run, show)

    def preview(self) -> None:
        p = self.panel
        if self.vector is not None and self._vector_at != (p.site, p.layer):  # layer/site moved: new vector
            self.set_vector([s for s in p.positive.splitlines() if s.strip()],
                            [s for s in p.negative.splitlines() if s.strip()])
            return
        args = (p.prompt, self.vector, p.site, p.layer, p.alpha, p.positions)

        def show(dist):
            p.dist = dist

        job(self.worker, p, f"preview:{id(self)}", lambda: steering_preview(self.engine, *args), show)

    def generate(self) -> None:
        p = self.panel
        p.busy = True
        args = (p.prompt, self.vector, p.site, p.layer, p.alpha, p.positions, p.max_new_tokens)

        def show(text):
            p.generated = text
            p.busy = False

        def error(e):
            p.busy = False
            p.error = f"{type(e).__name__}: {e}"

        stop = threading.Event()  # set by the worker at interpreter exit: generation ends at the next token
        job(self.worker, p, f"generate:{id(self)}", lambda: steering_generate(self.engine, *args, cancel=stop), show,
            error=error, cancel=stop)


def steering_panel(lab: Engine, prompt: str, positive: list[str], negative: list[str], site: str = "resid_post",
                   layer: int | None = None, alpha_range: tuple[float, float] = (-4.0, 4.0)) -> SteeringPanel:
    """A SteeringPanel wired to the lab (its controller stays reachable as panel.controller)."""
    engine = engine_of(lab)
    ctrl = SteeringController(engine, prompt, positive, negative, site, layer, alpha_range)
    ctrl.panel.controller = ctrl
    return ctrl.panel

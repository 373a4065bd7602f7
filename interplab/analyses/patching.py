"""Patching sweeps: every (layer, position) or (layer, head) cell of an activation-patching heatmap.

The exact method does what a hook loop does - patch one cell, run forward, read the metric - but
  * runs many patched variants as one batch (chunked to max_batch rows),
  * resumes each variant from the cached residual at the patched layer (the layers below see nothing new),
  * unembeds only the final position, which is all the metric reads,
  * skips cells whose activation is identical in both runs (the patched run is the base run): every position
    before the first token where clean and corrupt differ, at every layer, since attention is causal,
  * computes only the positions from the first one where the patch changes something: earlier positions are the
    base run's, so their keys and values come from its cache.
The attribution method estimates every cell at once from one forward and one backward pass:
  effect(cell) ~ (source - base activation) . d metric / d activation.

Values are normalised so that 1 = clean behaviour, 0 = corrupted behaviour: (patched - corrupt) / (clean - corrupt),
for denoising (clean patched into corrupt) and noising (corrupt patched into clean) alike.

An ablation sweep (corrupt=None, baseline="zero" | "mean") is the same sweep with no corrupt run: the base run is the
prompt and each cell's "source" activation is the baseline (0, or the mean over reference prompts). There is nothing
to normalise by, so its values are the metric's change, ablated - clean (0 = no change).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from .. import display
from .. import edits as ed
from ..engine import Engine, as_prompts, default_budget, default_max_rows, engine_of, halving
from ..errors import EmptyPromptError, InterplabError, LengthMismatchError, NumberError, UnsupportedSiteError
from ..metrics import Custom, Metric, as_metric
from ..sae import SAE
from ..sites import HEADED, LAYERED

HEAD_SITES = ("z", "q", "k", "v", "rot_q", "rot_k", "pattern")  # per head (k, v, rot_k: the key-value heads)
SWEEP_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", *HEAD_SITES)
AXES = {
    ("layer", "pos"): SWEEP_SITES,
    ("layer",): SWEEP_SITES,
    ("layer", "head"): HEAD_SITES,
    ("layer", "head", "pos"): HEAD_SITES,
    ("feature", "pos"): (),  # an SAE's features (rows) x positions: site=sae (interplab.sae.SAE)
}
FEATURE_SWEEP_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z")


class SweepCancelled(InterplabError):
    """The sweep was cancelled (from a widget or code) before every cell was computed: `done` of `total` cells."""

    def __init__(self, message: str, done: int = 0, total: int = 0):
        super().__init__(message)
        self.done, self.total = done, total


BASELINES = ("zero", "mean")


@dataclass(frozen=True)
class Ablation:
    """What an ablation sweep writes into each cell in place of a corrupt run's activation: 0, or the mean of the
    site's activation (an SAE feature's activation) over `reference` prompts, per position when every reference
    prompt has the prompt's token length (a template dataset: the IOI papers' mean-ablation over the ABC set),
    otherwise over every token of the reference."""

    baseline: str  # "zero" or "mean"
    reference: tuple[str, ...] = ()
    per_position: bool = False

    def describe(self, what: str = "activation") -> str:
        """How each cell is ablated, in words (the result's describe() and the heatmap's title)."""
        if self.baseline == "zero":
            return f"zero-ablated (each cell's {what} set to 0)"
        how = "at each position" if self.per_position else "over every token"
        n = len(self.reference)
        return f"mean-ablated (each cell's {what} set to its mean {how} of {n} reference prompt{'s' * (n != 1)})"


@dataclass(frozen=True)
class Cells:
    """The cells of a sweep and what each stands for: the one place a heatmap cell (row, col) becomes a
    (layer, position, head). Rows are layers; columns are positions, heads, or (head, position) head-major, or one
    column for the whole layer. In a sweep of an SAE's features, by ("feature", "pos"), rows are features: `layers`
    then holds the feature indices and meaning() gives (feature, position, None)."""

    by: tuple[str, ...]
    layers: tuple[int, ...]
    tokens: tuple[str, ...]  # the clean prompt's tokens (position labels)
    n_heads: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of values/raw: [layers] + one axis per entry of `by` after 'layer'."""
        size = {"pos": len(self.tokens), "head": self.n_heads}
        return (len(self.layers), *(size[a] for a in self.by[1:]))

    @property
    def n_cols(self) -> int:
        return math.prod(self.shape[1:])

    def index(self, row: int, col: int) -> tuple[int, ...]:
        """The index of heatmap cell (row, col) in values/raw."""
        if self.by == ("layer",):
            return (row,)
        if len(self.by) == 3:
            return (row, *divmod(col, len(self.tokens)))
        return (row, col)

    def meaning(self, row: int, col: int) -> tuple[int, int | None, int | None]:
        """(layer, position or None = all, head or None = all) of heatmap cell (row, col)."""
        index = dict(zip(self.by[1:], self.index(row, col)[1:]))
        return self.layers[row], index.get("pos"), index.get("head")

    def in_layer(self) -> list[tuple[tuple[int, ...], tuple[int | None, int | None]]]:
        """Every cell of one row: (index within the row, (position, head)), in values order."""
        out = []
        for col in range(self.n_cols):
            _, pos, head = self.meaning(0, col)
            out.append((self.index(0, col)[1:], (pos, head)))
        return out

    def grid(self, values: torch.Tensor) -> torch.Tensor:
        """values as the heatmap's rows x cols (a 3-D (layer, head, pos) sweep is laid out head-major)."""
        return values.reshape(values.shape[0], -1) if values.dim() != 1 else values[:, None]

    def col_labels(self, short: bool = False) -> list[str]:
        if self.by == ("layer",):
            return ["all positions" if not short else "all"]
        if self.by[1:] == ("pos",):  # layers or an SAE's features by position
            return [f"{i}: {t}" for i, t in enumerate(self.tokens)] if short else list(self.tokens)
        if self.by == ("layer", "head"):
            return [f"H{h}" for h in range(self.n_heads)]
        if short:
            return [f"H{h} p{p}" for h in range(self.n_heads) for p in range(len(self.tokens))]
        return [f"H{h}:{t}" for h in range(self.n_heads) for t in self.tokens]

    def key_cols(self, positions) -> list[int]:
        """The columns that stand for the given token positions (in every head's block of a head x position sweep):
        the labels a long axis always shows."""
        n = len(self.tokens)
        pos = sorted({int(p) for p in positions if 0 <= int(p) < n})
        if self.by[1:] == ("pos",):
            return pos
        if self.by == ("layer", "head", "pos"):
            return [h * n + p for h in range(self.n_heads) for p in pos]
        return []

    def col_title(self) -> str:
        return {("layer",): "", ("layer", "pos"): "position", ("layer", "head"): "head",
                ("layer", "head", "pos"): "head : position", ("feature", "pos"): "position"}[self.by]


@dataclass
class SweepResult:
    values: torch.Tensor  # normalised: 1 = clean restored, 0 = corrupted (an ablation sweep: ablated - clean)
    raw: torch.Tensor  # the metric per cell
    by: tuple[str, ...]
    labels: dict[str, list]  # axis name -> tick labels (layer numbers, token strings, head numbers)
    site: str
    metric_name: str
    direction: str
    method: str
    clean_value: float
    corrupt_value: float
    clean: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    engine: Engine | None = field(default=None, repr=False)  # for show(): clicking a cell re-runs on this lab
    metric: Metric | None = field(default=None, repr=False)
    # exact sweeps: the patched run's top next tokens (first pair) per cell index, for the heatmap's hover
    top_tokens: dict = field(default_factory=dict, repr=False)
    # exact sweeps: patched forwards actually run (cells whose activation is equal in both runs need none)
    cells_run: int = 0
    # exact sweeps: the first pair's patched run per cell index: (top CELL_TOP_K token ids, their probabilities,
    # the metric); a click on a cell of this heatmap shows these numbers without running the forward again
    cell_runs: dict = field(default_factory=dict, repr=False)
    sae: SAE | None = field(default=None, repr=False)  # by ("feature", "pos"): the SAE whose features are the rows
    # an ablation sweep (no corrupt run): what each cell was set to; None for a patching sweep
    ablation: Ablation | None = None
    # a mean ablation: the means the cells were set to, {(site, layer): [pos, width] or [width]} in the hooks'
    # layout, or for an SAE {feature: [pos] or []}; a click's edit writes the same value
    baseline_means: dict = field(default_factory=dict, repr=False)

    @property
    def shape(self):
        return tuple(self.values.shape)

    @property
    def value_title(self) -> str:
        """What a cell's value is, in a few words (the colour bar's title)."""
        return f"change in {self.metric_name}" if self.ablation is not None else "restored"

    @property
    def cells(self) -> Cells:
        return Cells(tuple(self.by), tuple(self.labels[self.by[0]]), tuple(self.labels["pos"]),
                     len(self.labels["head"]))

    def describe(self) -> str:
        site = self.site if self.sae is None else f"{self.sae.describe()}'s features"
        if self.ablation is not None:
            what = self.ablation.describe("feature" if self.sae is not None else "activation")
            return (f"{site} {what}, by {' x '.join(self.by)}, {self.method}; {self.metric_name}: clean "
                    f"{self.clean_value:.3f}; values = {self.metric_name} ablated - clean (0 = no change)")
        what = "clean into corrupt (denoising)" if self.direction == "denoise" else "corrupt into clean (noising)"
        return (f"{site} patched {what}, by {' x '.join(self.by)}, {self.method}; "
                f"{self.metric_name}: clean {self.clean_value:.3f}, corrupt {self.corrupt_value:.3f}; "
                f"1 = clean behaviour, 0 = corrupted")

    def figure(self):
        """A static plotly heatmap (RdBu centred at 0), for reports and when widgets are unavailable."""
        import plotly.graph_objects as go

        v = self.cells.grid(self.values)
        ylab = [f"{'F' if self.by[0] == 'feature' else 'L'}{x}" for x in self.labels[self.by[0]]]
        xlab = self.cells.col_labels(short=True)
        # an ablation's change: a scale symmetric around 0 (no change), whichever sign is larger
        span = (float(v.nan_to_num(0.0).abs().max()) or 1.0) if self.ablation is not None else None
        fig = go.Figure(go.Heatmap(z=v.tolist(), x=list(range(len(xlab))), y=list(range(len(ylab))),
                                   colorscale="RdBu", zmid=0, zmin=-span if span else None, zmax=span,
                                   colorbar={"title": self.value_title}))
        fig.update_layout(title=self.describe(), xaxis={"tickvals": list(range(len(xlab))), "ticktext": xlab},
                          yaxis={"tickvals": list(range(len(ylab))), "ticktext": ylab, "autorange": "reversed"})
        return fig

    def show(self, lab=None):
        """The clickable heatmap with its logit panel (a static plotly figure if widgets cannot load); lab: a Lab or
        an Engine (default: the sweep's own)."""
        shown = display.view(self, lab=lab or self.engine)
        return self.figure() if shown is None else shown


EVERY_HEAD_SITE = ("z", "q", "k", "v", "pattern")  # TransformerLens's "every": output, query, key, value, pattern


@dataclass
class HeadSweeps:
    """One sweep per part of every head (output z, query, key, value, pattern), on the same pair and metric."""

    results: dict[str, SweepResult]

    def __getitem__(self, site: str) -> SweepResult:
        return self.results[site]

    def figure(self):
        """The sweeps side by side as one static plotly figure (RdBu, 1 = clean restored)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        sites = list(self.results)
        first = next(iter(self.results.values()))
        # patching: 1 = clean restored; an ablation: the metric's change, on one scale symmetric around 0
        span = 1.0 if first.ablation is None else max(
            float(r.values.nan_to_num(0.0).abs().max()) for r in self.results.values()) or 1.0
        fig = make_subplots(rows=1, cols=len(sites), subplot_titles=sites, shared_yaxes=True)
        for i, site in enumerate(sites, start=1):
            res = self.results[site]
            v = res.cells.grid(res.values)
            fig.add_trace(go.Heatmap(z=v.tolist(), colorscale="RdBu", zmid=0, zmin=-span, zmax=span,
                                     showscale=i == len(sites), x=res.cells.col_labels(short=True),
                                     y=[f"L{x}" for x in res.labels["layer"]]), row=1, col=i)
        fig.update_yaxes(autorange="reversed")
        how = "" if first.ablation is None else f"{first.ablation.describe()}, change in "
        fig.update_layout(title=f"every part of every head, {how}{first.metric_name}, {first.method}")
        return fig

    def show(self, lab=None):
        """The five heatmaps as one view (a static plotly figure where no widget viewer is registered)."""
        shown = display.view(self, lab=lab)
        return self.figure() if shown is None else shown


def patch_sweep_heads(lab: Engine, clean, corrupt, metric, by=("layer", "head"), direction: str | None = None,
                      method: str = "exact", sites=EVERY_HEAD_SITE, **kw) -> HeadSweeps:
    """patch_sweep of each part of every head, by (layer, head) or (layer, head, pos): one call for what
    TransformerLens's `get_act_patch_attn_head_*_every` gives (k and v by key-value head). corrupt=None with
    baseline="zero" (or "mean", reference=...): each part of every head ablated instead (see patch_sweep)."""
    engine = engine_of(lab)
    unknown = [s for s in sites if s not in HEAD_SITES]
    if unknown or not sites:
        raise InterplabError(f"sites={sites!r}: choose among {', '.join(HEAD_SITES)}.")
    return HeadSweeps({site: patch_sweep(engine, clean, corrupt, site, by, metric, direction, method, **kw)
                       for site in sites})


# ---- the sweep ------------------------------------------------------------------------------------------

class _Recorded(NamedTuple):
    """A backend's forward as the sweep reads it: last-position logits and the recorded sites."""

    last_logits: torch.Tensor
    cache: dict


@dataclass
class _Pairs:
    base: list[str]
    source: list[str]
    base_ids: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]


def patch_sweep(lab: Engine, clean, corrupt=None, site: str = "resid_pre", by=("layer", "pos"), metric=None,
                direction: str | None = None, method: str = "exact", *, baseline: str | None = None,
                reference=None, max_batch: int | None = None,
                progress: bool | Callable[[int, int], None] = True, cancel: threading.Event | None = None,
                on_partial: Callable[[SweepResult], None] | None = None, layers=None, qk_fix: bool = False,
                grad_drop: bool = False, order: torch.Tensor | None = None,
                memory_budget: int | str | None = None, features=None, backend: str | None = "hf") -> SweepResult:
    """Patch every cell of (site, by) from source into base and measure the metric; see the module docstring.

    clean / corrupt: a prompt each, or lists of N pairs (the metric is averaged over pairs, as the IOI papers do).
    metric: ilab.logit_diff(" Mary", " John") (per pair: lists of answers), prob, logprob, or a callable on
            [rows, vocab] last-position logits. direction: "denoise" (clean into corrupt, the default) or "noise".
    baseline: an ablation sweep instead, with corrupt=None (exactly one of corrupt and baseline is given): the base
           run is `clean` (a prompt or a list of prompts) and each cell's activation is replaced by
             "zero": 0 (for an SAE's feature: the feature set to 0, the site's value minus f * its decoder
                     direction; the error term kept);
             "mean": its mean over `reference` (a list of prompts): at each position when every reference prompt has
                     the prompt's token length (a template dataset, as the IOI papers mean-ablate over the ABC set),
                     otherwise over every token of the reference (result.describe() says which). For an SAE's
                     feature: the feature's mean activation, likewise.
           The values are the metric's change, ablated - clean (0 = no change; no corrupt run to normalise by);
           method="attribution" estimates it as (baseline - activation) . gradient. Every site and layout below
           takes a baseline; pattern takes "mean" only at each position (its width is the prompt's length), and
           qk_fix applies to patching only.
    order: exact sweeps only, a priority per cell (the result's shape, e.g. |attribution estimate|): chunks run
           highest first, across layers (each chunk still one layer's), so on_partial fills the promising cells first.
    memory_budget: exact sweeps, the memory one batched forward may use: bytes, or a string such as "600MiB" or
           "2GiB"; each chunk takes as many rows (up to max_batch) as fit (an estimate from the model's sizes and the
           positions the chunk computes). Default: a quarter of the device's free memory, at most 1 GiB on CUDA
           and 128 MiB elsewhere (interplab.engine.default_budget).
    site=sae (an interplab.sae.SAE), by=("feature", "pos"): each cell patches one feature at one position (the
           site's value becomes base + (f_source - f_base) * the feature's decoder direction there, as
           ilab.patch(sae, feature=i, pos=p, source=...) does); rows are `features` (default: all). Attribution
           estimates (f_source - f_base) * d metric / d f for every feature x position from one backward.
    backend: what runs the forwards (interplab.engine.backends): 'hf', the Hugging Face model; 'vllm', the lab's
           vLLM engine (each cell a request: residual sites, attn_out, mlp_out, z; exact sweeps); None, vLLM when
           the lab has one and it can run this sweep.
    """
    engine = engine_of(lab)
    _check_source(corrupt, baseline, reference, direction)
    direction = direction or "denoise"
    if not isinstance(by, (str, list, tuple)):
        raise InterplabError(f"by={by!r} is not a sweep layout: choose one of {', '.join(map(str, AXES))}.")
    by = tuple([by] if isinstance(by, str) else by)
    if by not in AXES:
        raise InterplabError(f"by={by!r} is not a sweep layout: choose one of {', '.join(map(str, AXES))}.")
    sae = site if isinstance(site, SAE) else None
    if sae is not None:
        if by != ("feature", "pos"):
            raise InterplabError(f"an SAE is swept by ('feature', 'pos') (its features x positions), not {by}.")
        if sae.site not in FEATURE_SWEEP_SITES:
            raise UnsupportedSiteError(f"{sae.describe()}: a sweep patches features at layered sites "
                                       f"({', '.join(FEATURE_SWEEP_SITES)}), not {sae.site!r}; use lab.run with "
                                       f"ilab.patch(sae, feature=..., source=...) there.")
        sae.check_fits(engine)
        rows = sae.features_of(features)
        if grad_drop:
            raise InterplabError("grad_drop is not available for feature sweeps: use method='attribution' alone.")
        site, layers = sae.site, sae.layer
    elif by == ("feature", "pos") or features is not None:
        raise InterplabError("by=('feature', 'pos') and features= sweep an SAE's features: pass site=sae "
                             "(ilab.SAE.load(...)).")
    elif site not in AXES[by]:
        raise InterplabError(f"site {site!r} cannot be swept by {by}: allowed sites {', '.join(AXES[by])}.")
    if direction not in ("denoise", "noise"):
        raise InterplabError(f"direction={direction!r}: use 'denoise' (clean into corrupt) or 'noise'.")
    if method not in ("exact", "attribution"):
        raise InterplabError(f"method={method!r}: use 'exact' or 'attribution'.")
    for name, flag in (("qk_fix", qk_fix), ("grad_drop", grad_drop)):
        if not isinstance(flag, bool):
            raise InterplabError(f"{name}={flag!r}: True or False.")
        if flag and method != "attribution":
            raise InterplabError(f"{name}=True is an option of method='attribution' (AtP*); exact sweeps need none.")
    if qk_fix and site not in QK_SITES:
        raise InterplabError(f"qk_fix=True applies to sweeps of queries and keys ({', '.join(QK_SITES)}), whose "
                             f"effect goes through the attention pattern; site {site!r} has none to fix.")
    if qk_fix and baseline is not None:
        raise InterplabError("qk_fix=True recomputes patterns from a corrupt run's queries and keys: it applies to "
                             "patching sweeps; an ablation sweep's attribution takes method='attribution' alone.")
    if metric is None:
        raise InterplabError("metric= is required, e.g. ilab.logit_diff(' Mary', ' John').")
    if max_batch is None:
        max_batch = default_max_rows(engine.device)
    elif isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InterplabError(f"max_batch={max_batch!r}: the most patched rows per forward, an int >= 1 (default: 64 "
                             f"on a CPU, 512 on a GPU, fewer where memory_budget allows fewer).")
    budget = _budget_bytes(memory_budget, engine.device)
    if not (isinstance(progress, bool) or callable(progress)):
        raise InterplabError(f"progress={progress!r}: use True (a progress bar), False, or a function (done, total).")
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise InterplabError(f"cancel={cancel!r}: use a threading.Event (set it to stop the sweep) or None.")
    if on_partial is not None and not callable(on_partial):
        raise InterplabError(f"on_partial={on_partial!r}: use a function (SweepResult) -> None, or None.")
    # the backend that runs it, and whether it can (before any forward): attribution needs gradients
    runner = engine.backend(backend, [ed.zero(site)], what="patch_sweep",
                         **({"method": method} if method != "exact" else {}))
    if engine.sites.arch is None:
        raise InterplabError("patch_sweep needs a known architecture (see ilab.sites.ARCHS); use lab.run with "
                             "raw-path edits on this model.")
    clean = as_prompts(clean)
    if baseline is None:
        corrupt = as_prompts(corrupt)
        if len(clean) != len(corrupt):
            raise LengthMismatchError(f"{len(clean)} clean prompts but {len(corrupt)} corrupt: give them in pairs.")
    as_metric(metric).check_pairs(len(clean))  # per-pair answers: one per pair, before any forward
    if baseline is None:
        engine.check_pair(clean, corrupt)
    metric = as_metric(metric).bind(engine.token_id)
    pairs = _pairs(engine, clean, corrupt, direction, by) if baseline is None else _prompts(engine, clean, by)
    ablation = None if baseline is None else _ablation(engine, baseline, reference, pairs, site)
    if baseline is not None:
        direction, corrupt = "ablate", []
    layer_list = engine.sites.layers_of(layers)

    n_heads = engine.resolve(site, layer_list[0]).n_heads or engine.n_heads  # k, v, rot_k: the key-value heads
    pair_idx = torch.arange(len(clean))
    row_ids = layer_list if sae is None else rows  # what the rows are: layers, or the SAE's features
    # an ablation: what each cell's activation (an SAE: each feature) becomes, in place of a source run's
    ablate = None if ablation is None else _Baseline(engine, runner, ablation, site, layer_list, sae,
                                                     rows if sae is not None else None)
    if method == "attribution" and sae is not None:
        estimate, source_value, base_value = _feature_attribution(engine, pairs, sae, rows, metric, ablate)
    elif method == "attribution":  # its two runs (source with cache, base with gradient) give both metric values
        cells = Cells(by, tuple(layer_list), tuple(engine.to_str_tokens(clean[0])), n_heads)
        estimate, source_value, base_value = _attribution(engine, pairs, site, by, metric, layer_list, cells, n_heads,
                                                          qk_fix, grad_drop, ablate)
    else:  # the site at every layer, in both runs: cells where they are equal need no forward (see _first_changes)
        keys = [(site, l) for l in layer_list]
        # the base run also keeps the residual every patched forward resumes from: one forward serves all chunks
        resume = [_resume_key(engine, site, l) for l in layer_list]
        base_run = _Recorded(*runner.forward(engine, pairs.base, record=list(dict.fromkeys(keys + resume))))
        base_value = _metric_mean(metric, base_run.last_logits, pair_idx)
        source_run, source_value = None, math.nan
        if ablate is None:
            source_run = _Recorded(*runner.forward(engine, pairs.source, record=keys))
            source_value = _metric_mean(metric, source_run.last_logits, pair_idx)
    if ablation is not None:  # one run, the prompt's: its value is the clean one, and no corrupt one exists
        clean_value, corrupt_value = base_value, math.nan
    else:
        clean_value, corrupt_value = ((source_value, base_value) if direction == "denoise"
                                      else (base_value, source_value))
        if abs(clean_value - corrupt_value) < 1e-6:
            raise InterplabError(
                f"clean and corrupt give the same {metric.name} ({clean_value:.4f}): there is nothing to restore, so "
                f"the normalised values would divide by zero. Pick a corrupt prompt that changes the answer."
            )
    labels = {"layer": layer_list, "pos": engine.to_str_tokens(clean[0]), "head": list(range(n_heads))}
    if sae is not None:
        labels["feature"] = rows
    shape = Cells(by, tuple(row_ids), tuple(labels["pos"]), n_heads).shape
    raw = torch.full(shape, float("nan"))
    result = SweepResult(raw.clone(), raw, by, labels, site, metric.name, direction, method, clean_value,
                         corrupt_value, clean, corrupt, engine, metric, sae=sae, ablation=ablation,
                         baseline_means={} if ablate is None else ablate.edit_means())

    def finish():
        if ablation is not None:  # the metric's change: nothing to normalise by
            result.values = result.raw - clean_value
        else:
            result.values = (result.raw - corrupt_value) / (clean_value - corrupt_value)
        return result

    if method == "attribution":
        result.raw = estimate.reshape(shape)
        return finish()

    if order is not None and tuple(torch.as_tensor(order).shape) != tuple(shape):
        raise InterplabError(f"order: one priority per cell, shape {tuple(shape)}; got "
                             f"{tuple(torch.as_tensor(order).shape)}.")
    layer_cells = result.cells.in_layer()
    jobs = [(li, layer, layer_cells) for li, layer in enumerate(layer_list)] if sae is None else [
        (ri, sae.layer, layer_cells) for ri in range(len(rows))]
    feature_source = _feature_sources(engine, sae, rows, base_run, source_run, ablate) if sae is not None else None
    total = sum(len(cells) for _, _, cells in jobs)
    bar = _progress_bar(total, progress)
    done = 0
    base_cell = _read_chunks([_cell_tops(base_run.last_logits[:1], metric)])[0][2]
    names: dict[int, str] = {}

    def token(i: int) -> str:  # decoded once per sweep (hovers repeat the same few tokens)
        if i not in names:
            names[i] = engine.tokenizer.decode([i])
        return names[i]
    base_top = _hover_top(base_cell)
    pending = []  # (priority, layer index, layer, source act, chunks): run after every layer's skipped cells
    fits = None  # first changed position -> cells per chunk within the budget (once some cell needs a forward)
    try:
        for li, layer, all_cells in jobs:
            key = (site, layer)
            base_act = engine.as_hooked(site, base_run.cache[key])
            if feature_source is not None:  # row li: the base activation with only its feature patched
                source_act = feature_source(li, base_act)
            elif ablate is not None:  # the baseline: 0, or the reference's mean
                source_act = ablate(key, base_act)
            else:
                source_act = engine.as_hooked(site, source_run.cache[key])
            cells = []
            firsts = _first_changes(base_act, source_act, [sel for _, sel in all_cells], n_heads)
            for (index, selector), first in zip(all_cells, firsts):
                if first is None:
                    result.raw[(li, *index)] = base_value
                    result.top_tokens[(li, *index)] = [(token(i), p) for i, p in base_top]
                    result.cell_runs[(li, *index)] = base_cell
                else:
                    cells.append((index, selector, first))
            if len(cells) < len(all_cells):  # the skipped cells are done too
                done += len(all_cells) - len(cells)
                _advance(bar, progress, done, total, len(all_cells) - len(cells))
            result.cells_run += len(cells)
            if not cells:
                continue
            per_chunk = max(1, max_batch // len(pairs.base))
            if cells and fits is None:
                fits = runner.sweep_fits(engine, site, pairs.base, pairs.base_ids, pairs.mask, budget)
            if order is None:
                pending.append((0.0, li, layer, source_act, _chunks(cells, per_chunk, fits)))
                continue
            prio = torch.as_tensor(order, dtype=torch.float64)[li].nan_to_num(0.0)
            cells.sort(key=lambda c: -float(prio[c[0]]))  # highest first; each chunk then by first change
            pending += [(float(prio[c[0][0]]), li, layer, source_act, _chunks(c, per_chunk, fits))
                        for c in (cells[i:i + per_chunk] for i in range(0, len(cells), per_chunk))]
        if order is not None:
            pending.sort(key=lambda job: -job[0])
        unread = []  # (layer index, cells, their results still on the model's device)

        def read():
            """Copy the unread chunks' results to the host in one transfer. Each copy waits for the device to finish
            what it was given, so a sweep makes one at the end (one per chunk for on_partial), not one per cell."""
            got = iter(_read_chunks([out for _, _, out in unread]))
            for li_, part, _ in unread:
                for (cell_index, _, _), (v, top, run) in zip(part, got):
                    result.raw[(li_, *cell_index)] = v
                    result.top_tokens[(li_, *cell_index)] = [(token(i), p) for i, p in top]
                    result.cell_runs[(li_, *cell_index)] = run
            unread.clear()

        for _, li, layer, source_act, chunks in pending:
            for chunk in chunks:
                if cancel is not None and cancel.is_set():
                    raise SweepCancelled(f"sweep cancelled after {done} of {total} cells; no result returned.",
                                         done, total)
                hidden = base_run.cache[_resume_key(engine, site, layer)]

                def run_part(part, layer=layer, hidden=hidden, src=source_act):
                    return [(part, _run_cells(engine, site, layer, part, pairs, metric, hidden, src, n_heads, runner))]
                unread += [(li, part, out) for part, out in halving(run_part, chunk)]
                done += len(chunk)
                _advance(bar, progress, done, total, len(chunk))
                if on_partial is not None:
                    read()
                    on_partial(finish())
        read()
    finally:
        if bar is not None:
            bar.close()
    return finish()


def _check_source(corrupt, baseline, reference, direction) -> None:
    """Exactly one of a corrupt run (patching) and a baseline (ablation), with the arguments each takes."""
    if baseline is None:
        if corrupt is None:
            raise InterplabError("patch_sweep needs corrupt= (a patching sweep: the corrupt prompt, or one per clean "
                                 "prompt) or baseline='zero' / 'mean' with corrupt=None (an ablation sweep): pass "
                                 "one of them.")
        if reference is not None:
            raise InterplabError("reference= is the prompts a mean ablation averages over: use it with "
                                 "baseline='mean' and corrupt=None.")
        return
    if corrupt is not None:
        raise InterplabError(f"corrupt= and baseline={baseline!r} both given: a sweep patches from a corrupt run or "
                             f"ablates to a baseline, not both. Pass corrupt=None for an ablation sweep, or drop "
                             f"baseline= for a patching sweep.")
    if not isinstance(baseline, str) or baseline not in BASELINES:
        raise InterplabError(f"baseline={baseline!r}: use 'zero' (each cell set to 0) or 'mean' (each cell set to its "
                             f"mean over reference=[prompts]).")
    if direction is not None:
        raise InterplabError(f"direction={direction!r} says which run a patching sweep patches into which; an "
                             f"ablation sweep (baseline={baseline!r}) has one run, the prompt's: drop direction=.")
    if baseline == "mean" and reference is None:
        raise InterplabError("baseline='mean' needs reference=: the prompts whose mean activation each cell takes, "
                             "e.g. reference=abc_prompts (of the prompt's token length: a mean at each position; "
                             "otherwise the mean over every token).")
    if baseline == "zero" and reference is not None:
        raise InterplabError("reference= is for baseline='mean'; a zero ablation takes none: drop reference=.")


def _prompts(engine: Engine, prompts: list[str], by) -> _Pairs:
    """An ablation sweep's one run: the prompts are the base; there is no source run."""
    ids, mask, lengths = engine.encode(prompts)
    if "pos" in by and len(set(lengths)) > 1:
        raise LengthMismatchError(
            f"a sweep by position needs every prompt to have the same token length; got lengths "
            f"{sorted(set(lengths))}. Sweep by ('layer',) or ('layer', 'head'), or use one template.")
    return _Pairs(prompts, [], ids, mask, lengths)


def _ablation(engine: Engine, baseline: str, reference, pairs: _Pairs, site: str) -> Ablation:
    """The ablation asked for, with the mean's kind decided: at each position when every reference prompt has the
    prompts' token length, else over every token."""
    if baseline == "zero":
        return Ablation("zero")
    try:
        ref = as_prompts(reference)
    except EmptyPromptError as e:
        raise EmptyPromptError(f"reference= holds no prompts ({e}): give the prompts whose mean each cell takes.") \
            from None
    lengths = engine.encode(ref)[2]
    per_position = len(set(pairs.lengths)) == 1 and set(lengths) == set(pairs.lengths)
    if site == "pattern" and not per_position:
        raise UnsupportedSiteError(
            f"a mean of the attention pattern is taken at each position, whose rows are as long as the prompt "
            f"({sorted(set(pairs.lengths))} tokens): give reference prompts of that token length (got "
            f"{sorted(set(lengths))}), or use baseline='zero'.")
    return Ablation("mean", tuple(ref), per_position)


class _Baseline:
    """An ablation sweep's baseline: what each cell's activation (in the hooks' layout), or for an SAE each of its
    features, becomes. A mean is taken once, from forwards of the reference prompts (a few at a time)."""

    CHUNK = 16  # reference prompts per forward

    def __init__(self, engine: Engine, runner, ablation: Ablation, site: str, layers: list[int],
                 sae: SAE | None = None, rows: list[int] | None = None):
        self.ablation, self.sae, self.rows = ablation, sae, rows
        self.means: dict = {}  # (site, layer) -> [pos, width] or [width]; an SAE: [pos, rows] or [rows]
        if ablation.baseline == "mean":
            keys = [(site, layer) for layer in ([sae.layer] if sae is not None else layers)]
            self.means = self._reference_means(engine, runner, site, keys)

    def _reference_means(self, engine: Engine, runner, site: str, keys) -> dict:
        """Sums over forwards of prompts of one token length each (no padding to leave out, and what a backend that
        records one length per request batch, vLLM's, runs), divided by the prompts (per position) or tokens."""
        ablation, sums, count = self.ablation, {}, 0
        by_length: dict[int, list[str]] = {}
        for prompt, n in zip(ablation.reference, engine.encode(list(ablation.reference))[2]):
            by_length.setdefault(n, []).append(prompt)
        for n, prompts in by_length.items():
            for i in range(0, len(prompts), self.CHUNK):
                part = prompts[i:i + self.CHUNK]
                cache = runner.forward(engine, part, record=keys)[1]
                for key in keys:
                    a = engine.as_hooked(site, cache[key]).float()  # [prompts, n, width]
                    if self.sae is not None:
                        a = self.sae.encode(a)[..., self.rows]
                    got = a.sum(0) if ablation.per_position else a.sum((0, 1))
                    sums[key] = got if key not in sums else sums[key] + got
                count += len(part) * (1 if ablation.per_position else n)
        return {key: (total / count).cpu() for key, total in sums.items()}

    def __call__(self, key, base: torch.Tensor) -> torch.Tensor:
        """The baseline of (site, layer) shaped like its base activation [pairs, pos, width]."""
        if self.ablation.baseline == "zero":
            return torch.zeros_like(base)
        return self.means[key].to(device=base.device, dtype=base.dtype).expand_as(base)

    def features(self, f_base: torch.Tensor) -> torch.Tensor:
        """The swept features' baseline shaped like their base activations [pairs, pos, rows]."""
        if self.ablation.baseline == "zero":
            return torch.zeros_like(f_base)
        (mean,) = self.means.values()
        return mean.to(device=f_base.device, dtype=f_base.dtype).expand_as(f_base)

    def edit_means(self) -> dict:
        """The means as a click's edit writes them: {(site, layer): mean}, or for an SAE {feature: mean}."""
        if self.sae is None or not self.means:
            return dict(self.means)
        (mean,) = self.means.values()
        return {feature: mean[..., r] for r, feature in enumerate(self.rows)}


def ablation_edit(ablation: Ablation, site: str, layer: int, pos: int | None, head: int | None, *,
                  n_heads: int | None = None, sae: SAE | None = None, means: dict | None = None,
                  label: str | None = None) -> ed.Edit:
    """The edit that ablates one cell as an ablation sweep did (a heatmap click runs it): ilab.zero there; a mean
    at each position, ilab.mean_ablate with the reference prompts (the engine takes their mean itself); a mean over
    every token, ilab.set_value with that mean (`means`, the sweep's result.baseline_means). On an SAE (`layer` is
    then the feature): ilab.zero(sae, feature=...), or ilab.set_value(sae, mean, feature=...)."""
    if sae is not None:
        feature = layer
        if ablation.baseline == "zero":
            return ed.zero(sae, feature=feature, pos=pos, label=label)
        mean = means[feature]
        value = mean[pos] if ablation.per_position and pos is not None else mean
        return ed.set_value(sae, float(value), feature=feature, pos=pos, label=label)
    if ablation.baseline == "zero":
        return ed.zero(site, layer, pos=pos, head=head, label=label)
    if ablation.per_position:
        return ed.mean_ablate(site, layer, pos=pos, head=head, reference=ed.SourceRef(ablation.reference),
                              label=label)
    value = means[(site, layer)]
    if head is not None:
        value = value.view(n_heads, -1)[head]
    return ed.set_value(site, layer, value=value, pos=pos, head=head, label=label)


def ablation_means(engine: Engine, ablation: Ablation, site: str, layers: list[int], sae: SAE | None = None) -> dict:
    """The means a mean ablation writes, as result.baseline_means holds them (for a click before its sweep ended)."""
    if ablation.baseline != "mean":
        return {}
    rows = list(range(sae.d_sae)) if sae is not None else None
    return _Baseline(engine, engine.backends["hf"], ablation, site, layers, sae, rows).edit_means()


def _pairs(engine: Engine, clean, corrupt, direction, by) -> _Pairs:
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    ids, mask, lengths = engine.encode(base)
    if "pos" in by and len(set(lengths)) > 1:
        raise LengthMismatchError(
            f"a sweep by position needs every prompt pair to have the same token length; got lengths "
            f"{sorted(set(lengths))}. Sweep by ('layer',) or ('layer', 'head'), or use one template."
        )
    return _Pairs(base, source, ids, mask, lengths)


_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def budget_bytes(memory_budget, device) -> int:
    """memory_budget (bytes, '600MiB', None = the device's default) as bytes, checked: what an analysis that
    sizes its batches as sweeps do takes."""
    return _budget_bytes(memory_budget, device)


def _budget_bytes(memory_budget, device) -> int:
    """memory_budget as bytes: None -> the device's default (interplab.engine.default_budget)."""
    if memory_budget is None:
        return default_budget(device)
    value = memory_budget
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]+)\s*", value)
        unit = _UNITS.get(match[2].lower()) if match else None
        value = float(match[1]) * unit if unit else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise NumberError(f"memory_budget={memory_budget!r}: the memory one batched forward of the sweep may use, as "
                          f"bytes (a number >= 1) or a string such as '600MiB' or '2GiB' (units B, KiB, MiB, GiB); "
                          f"or None for the default (a quarter of the device's free memory, at most 1 GiB on CUDA "
                          f"and 128 MiB elsewhere).")
    return int(value)


def _chunks(cells, per_chunk: int, fits: Callable[[int], int] | None = None) -> list[list]:
    """Cells (index, selector, first changed position) in chunks, sorted by that position: a chunk computes only the
    positions from its earliest change on (the earlier ones are the base run's, their keys and values come from its
    cache), so chunks of neighbouring positions keep that saving. A chunk holds at most `per_chunk` cells and at
    most fits(its first position) (the memory budget: chunks that start later compute fewer positions, so more
    cells fit). Within a budget a chunk spans few positions of a long prompt, so its forward computes little more
    than its cells' own positions (the 256-token sweep of benchmarks/bench_long_sweep.py: 9% more at 256 MiB)."""
    cells = sorted(cells, key=lambda c: c[2])
    chunks, i = [], 0
    while i < len(cells):
        size = min(per_chunk, fits(cells[i][2])) if fits is not None else per_chunk
        chunks.append(cells[i:i + size])
        i += size
    return chunks


def _resume_key(engine: Engine, site: str, layer: int) -> tuple[str, int]:
    """The cached residual a patched forward of (site, layer) starts from (resid_post patches start one higher)."""
    start = layer + 1 if site == "resid_post" else layer
    return ("resid_pre", start) if start < engine.n_layers else ("resid_post", engine.n_layers - 1)


def _run_cells(engine: Engine, site: str, layer: int, chunk, pairs: _Pairs, metric: Metric, base_hidden: torch.Tensor,
               src: torch.Tensor, n_heads: int, runner) -> _ChunkOut:
    """A chunk of cells of one layer run by the backend (`runner.sweep_cells`: on the Hugging Face model one
    batched forward resumed from `base_hidden`, the base run's residual at the start layer), with `src` (the source
    run's activation at the site) patched in. Its results stay on the model's device (see _read_chunks)."""
    n_pairs = pairs.base_ids.shape[0]
    n_cells = len(chunk)
    logits = runner.sweep_cells(engine, site, layer, [(sel, first) for _, sel, first in chunk], pairs.base,
                                ids=pairs.base_ids, mask=pairs.mask, lengths=pairs.lengths, hidden=base_hidden,
                                source=src, n_heads=n_heads)
    if isinstance(metric, Custom):
        values = torch.stack([metric(logits[c * n_pairs:(c + 1) * n_pairs].float()).mean() for c in range(n_cells)])
    else:
        pair_idx = torch.arange(n_pairs, device=logits.device).repeat(n_cells)
        values = metric(logits.float(), pair_idx).reshape(n_cells, n_pairs).mean(1)
    return _cell_tops(logits[::n_pairs], metric)._replace(values=values)


CELL_TOP_K = 8  # next tokens kept per cell for the logit panel (interplab.views.logits.TOP_K)


class _ChunkOut(NamedTuple):
    """A chunk's results where the model ran them, per cell: the mean metric over pairs, and the first pair's
    CELL_TOP_K most probable next tokens, their probabilities and its own metric."""

    values: torch.Tensor  # [cells]
    ids: torch.Tensor  # [cells, CELL_TOP_K]
    probs: torch.Tensor  # [cells, CELL_TOP_K]
    first: torch.Tensor  # [cells]


def _cell_tops(logits: torch.Tensor, metric: Metric) -> _ChunkOut:
    """Per row of first-pair logits, on their device (values: the row's own metric, until _run_cells sets the
    mean over pairs)."""
    probs, ids = logits.float().softmax(-1).topk(CELL_TOP_K)
    first = (torch.stack([metric(row[None].float()).reshape(-1)[0] for row in logits]) if isinstance(metric, Custom)
             else metric(logits.float(), torch.zeros(len(logits), dtype=torch.long, device=logits.device)))
    return _ChunkOut(first, ids, probs, first)


def _read_chunks(outs: list[_ChunkOut]) -> list[tuple]:
    """Every cell of `outs`, in order, as (value, hover top-3 (token id, probability), cell run: (top ids,
    probabilities, first pair's metric)), from one copy to the host (float64: exact for every token id)."""
    if not outs:
        return []
    packed = torch.cat([torch.cat([o.values[:, None].double(), o.first[:, None].double(), o.probs.double(),
                                   o.ids.double()], 1) for o in outs]).cpu().tolist()
    k = CELL_TOP_K
    cells = []
    for row in packed:
        run = ([int(i) for i in row[2 + k:]], row[2:2 + k], row[1])
        cells.append((row[0], _hover_top(run), run))
    return cells


def _hover_top(cell_run: tuple, n: int = 3) -> list[tuple[int, float]]:
    """The first n (token id, probability) pairs of a cell run, for the heatmap's hover."""
    return list(zip(cell_run[0][:n], cell_run[1][:n]))


def _first_changes(base: torch.Tensor, source: torch.Tensor, selectors, n_heads: int) -> list[int | None]:
    """Per cell's (position, head) selector: the first position where its activation differs between the runs (in
    any pair), or None when it is equal everywhere: then patching changes nothing and the patched run IS the base
    run. Exact, and common: positions before the first token where clean and corrupt differ are equal at every layer
    (attention is causal), and at layer 0 so is every position with equal tokens. One small [positions(, heads)]
    table is read to the host per layer, not one comparison per cell: each read waits for the device."""
    headed = any(head is not None for _, head in selectors)
    diff = base != source  # [pairs, pos, width] (per-head sites: width = heads x head size)
    diff = diff.reshape(*diff.shape[:2], n_heads, -1) if headed else diff.reshape(*diff.shape[:2], -1)
    differs = diff.any(-1).any(0).cpu()  # [pos, heads] or [pos]
    out = []
    for pos, head in selectors:
        col = differs[:, head] if head is not None else (differs.any(-1) if headed else differs)
        if pos is not None:
            out.append(pos if bool(col[pos]) else None)
        else:
            changed = col.nonzero()
            out.append(int(changed[0]) if len(changed) else None)
    return out


def _metric_mean(metric: Metric, logits: torch.Tensor, pair_idx: torch.Tensor) -> float:
    return float(metric(logits.float(), pair_idx).mean())


# ---- attribution patching -------------------------------------------------------------------------------

QK_SITES = ("q", "k", "rot_q", "rot_k")  # where AtP*'s QK fix applies: they reach the metric through the pattern


def _attribution(engine: Engine, pairs: _Pairs, site: str, by, metric: Metric, layer_list, cells: Cells,
                 n_heads: int, qk_fix: bool = False, grad_drop: bool = False, ablate: _Baseline | None = None) -> tuple:
    """(source - base) . grad of the metric at base, summed within each cell; added to the base metric. An
    ablation (`ablate`): the source is the baseline, (baseline - base) . grad, and there is no source run (its
    metric is NaN).

    AtP* (Kramar et al. 2024) options: qk_fix (q/k sites) computes each cell's attention pattern exactly and
    takes only the pattern's gradient, where the linear step through the softmax would miss saturation;
    grad_drop re-estimates with the gradient through each layer's outputs stopped in turn and takes the mean
    size over those, which catches effects that cancel; the sign is the plain estimate's.

    Returns (estimated metric per cell, source metric, base metric): one forward of the source, one forward and one
    backward of the base (one more of each per layer with grad_drop)."""
    keys = [(site, l) for l in layer_list]
    qk = qk_fix and site in QK_SITES
    rotary = engine.sites.arch.rotary
    rq, rk = ("rot_q", "rot_k") if rotary else ("q", "k")
    angles = [(name, l) for name in (rq, rk) for l in layer_list] if qk else []
    src_run = engine.run(pairs.source, cache=keys + angles, log=False) if ablate is None else None
    base_angles = engine.run(pairs.base, cache=angles, log=False) if qk else None
    pair_idx = torch.arange(len(pairs.base))

    def estimate(stop_layer: int | None) -> tuple[torch.Tensor, float]:
        edits = [] if stop_layer is None else [ed.stop_grad(part, stop_layer) for part in ("attn_out", "mlp_out")]
        grad_keys = [("pattern", l) for l in layer_list] if qk else keys
        base_run = engine.run(pairs.base, edits=edits, cache=grad_keys, grad=True, log=False)
        value = metric(base_run.last_logits.float(), pair_idx).sum()  # per-pair contributions add up
        acts = [base_run.cache[k] for k in grad_keys]
        grads = torch.autograd.grad(value, acts, allow_unused=True)  # param .grad is never touched
        out = torch.zeros(cells.shape)
        for li, (k, a, g) in enumerate(zip(keys, acts, grads)):
            if g is None:
                continue
            if qk:
                out[li] = _qk_fixed(engine, site, k[1], a.detach(), g, base_angles, src_run, (rq, rk), pairs, cells)
            else:
                # pattern: [pairs, query, head*key]
                a, g = engine.as_hooked(site, a.detach()), engine.as_hooked(site, g)
                src = ablate(k, a) if ablate is not None else engine.as_hooked(site, src_run.cache[k]).to(a.device)
                delta = (src - a) * g  # [pairs, pos, width]
                out[li] = _per_cell(delta * pairs.mask.bool()[..., None].to(delta.device), site, by, n_heads)
        engine.model.zero_grad(set_to_none=True)
        return out, float(metric(base_run.last_logits.detach().float(), pair_idx).mean())

    out, base_value = estimate(None)
    if grad_drop:
        n = engine.n_layers
        size = sum(estimate(layer)[0].abs() for layer in range(n)) / max(1, n - 1)
        out = torch.where(out < 0, -size, size)
    source_value = math.nan if src_run is None else float(metric(src_run.last_logits.float(), pair_idx).mean())
    return base_value + out, source_value, base_value


def _feature_sources(engine: Engine, sae: SAE, rows: list[int], base_run, source_run,
                     ablate: _Baseline | None = None) -> Callable:
    """row -> the site's value with only that row's feature taken from the source run (an ablation: set to its
    baseline): base + (f_source - f_base) * the feature's decoder direction (times the SAE's run-time output scale),
    which is base itself where the feature's activation is equal in both (so those cells are skipped as
    unchanged)."""
    key = (sae.site, sae.layer)
    base = engine.as_hooked(sae.site, base_run.cache[key]).float()
    f_base = sae.encode(base)[..., rows]
    f_source = (ablate.features(f_base) if ablate is not None
                else sae.encode(engine.as_hooked(sae.site, source_run.cache[key]).float())[..., rows])
    df = f_source - f_base
    scale = sae.out_scale(base)
    directions = sae.direction(rows).float().to(df.device)  # (the SAE's weights may sit elsewhere than the run)

    def source(row: int, base_act: torch.Tensor) -> torch.Tensor:
        delta = df[..., row:row + 1] * directions[row] * scale
        return base_act + delta.to(base_act.dtype)
    return source


def _feature_attribution(engine: Engine, pairs: _Pairs, sae: SAE, rows: list[int], metric: Metric,
                         ablate: _Baseline | None = None) -> tuple:
    """(f_source - f_base) * d metric / d f at the base run for every feature in `rows` x position, from one forward
    of the source and one forward and backward of the base; d metric / d f_i = grad_x . (out scale * W_dec[i]).
    An ablation: f_source is the baseline (0 or the reference's mean), no source run. Returns (estimated metric
    [rows, pos], source metric, base metric), as _attribution."""
    key = (sae.site, sae.layer)
    pair_idx = torch.arange(len(pairs.base))
    src_run = engine.run(pairs.source, cache=[key], log=False) if ablate is None else None
    base_run = engine.run(pairs.base, cache=[key], grad=True, log=False)
    value = metric(base_run.last_logits.float(), pair_idx).sum()  # per-pair contributions add up
    act = base_run.cache[key]
    (grad,) = torch.autograd.grad(value, [act])
    engine.model.zero_grad(set_to_none=True)
    with torch.no_grad():
        x = act.detach().float()
        f_base = sae.encode(x)[..., rows]
        df = (ablate.features(f_base) if ablate is not None
              else sae.encode(src_run.cache[key].to(x.device).float())[..., rows]) - f_base
        grad_f = (grad.float() * sae.out_scale(x)) @ sae.direction(rows).float().to(x.device).T  # [pairs, pos, n]
        delta = df * grad_f * pairs.mask.bool()[..., None].to(x.device)
        estimate = (delta.sum(0).T / len(pairs.base)).cpu()  # [rows, pos]
    base_value = float(metric(base_run.last_logits.detach().float(), pair_idx).mean())
    source_value = math.nan if src_run is None else float(metric(src_run.last_logits.float(), pair_idx).mean())
    return base_value + estimate, source_value, base_value


def _per_cell(delta: torch.Tensor, site: str, by, n_heads: int) -> torch.Tensor:
    """[pairs, pos, width] contributions summed within each cell of the layout, averaged over pairs."""
    if site in HEADED:
        delta = delta.view(*delta.shape[:2], n_heads, -1).sum(-1)  # [pairs, pos, heads]
    else:
        delta = delta.sum(-1)  # [pairs, pos]
    n = delta.shape[0]
    if by == ("layer",):
        return delta.sum() / n
    if by == ("layer", "pos"):
        return delta.sum(0).cpu() / n
    if by == ("layer", "head"):
        return delta.sum((0, 1)).cpu() / n
    return delta.sum(0).T.cpu() / n  # [heads, pos]


def _qk_fixed(engine: Engine, site: str, layer: int, pattern: torch.Tensor, grad: torch.Tensor, base_run, src_run,
              names: tuple[str, str], pairs: _Pairs, cells: Cells) -> torch.Tensor:
    """AtP*'s QK fix for one layer: per cell, the attention pattern with that cell's queries or keys taken from
    the source, computed exactly from the rotated queries and keys, then grad . (pattern' - pattern)."""
    rq, rk = names
    H = engine.n_heads

    def heads_of(run, name, n):  # [pairs, pos, n * d] -> [pairs, pos, n, d]
        value = run.cache[name, layer]
        return value.view(*value.shape[:2], n, -1)

    base_q, src_q = (heads_of(run, rq, H) for run in (base_run, src_run))
    base_k, src_k = (heads_of(run, rk, engine.sites.n_kv_heads) for run in (base_run, src_run))
    group = H // engine.sites.n_kv_heads
    attn = engine.model.get_submodule(f"{engine.sites.arch.layers}.{layer}.{engine.sites.arch.attn}")
    scaling = float(getattr(attn, "scaling", base_q.shape[-1] ** -0.5))
    cap = getattr(engine.model.config, "attn_logit_softcapping", None)
    T = pattern.shape[-1]
    dev = pattern.device  # the model's (the runs' caches stay there): every tensor below is made there too
    allowed = (torch.ones(T, T, dtype=torch.bool, device=dev).tril()[None]
               & pairs.mask.bool().to(dev)[:, None, :])  # [pairs, q, k]

    def capped(q, k, heads):  # q [pairs, T, H, d], k [pairs, T, Hkv, d] -> scores [pairs, len(heads), T, T]
        k = k.repeat_interleave(group, dim=2) if group > 1 else k
        scores = torch.einsum("bqhd,bkhd->bhqk", q[:, :, heads].double(), k[:, :, heads].double()) * scaling
        return torch.tanh(scores / cap) * cap if cap else scores

    def softmax(scores):
        return scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)

    every = list(range(H))
    old, g = pattern.double(), grad.double()
    base_scores = capped(base_q, base_k, every)
    if (softmax(base_scores) - old).abs().max() > 1e-3:
        raise UnsupportedSiteError(
            f"qk_fix could not recompute layer {layer}'s attention pattern from its queries and keys (a sliding "
            f"window or other attention variant?): use method='attribution' without qk_fix on this model.")
    on_q = site in ("q", "rot_q")
    n_pairs = pattern.shape[0]
    # One position's query or key changed: per (query head, position), in closed form for every position at once.
    if on_q:  # a query changes its own row of the pattern only
        new = softmax(capped(src_q, base_k, every))
        one_pos = (g * (new - old)).sum(-1).sum(0)  # [H, T]: the query of head h at position t
    else:  # a key changes one column: every row renormalises (softmax with one score moved by `shift`)
        shift = (capped(base_q, src_k, every) - base_scores).masked_fill(~allowed[:, None], 0.0).clamp(max=60)
        a, grown = old, old * shift.exp()
        z = 1 - a + grown
        weighted = (g * a).sum(-1, keepdim=True)
        change = (1 / z - 1) * (weighted - g * a) + g * (grown / z - a)  # [pairs, H, query, key]
        one_pos = change.sum(2).sum(0)  # [H, T]: the key at position s, as seen by query head h
    out = torch.zeros(cells.shape[1:])
    for index, (pos, head) in cells.in_layer():
        # the query heads this cell reaches: its head, or every head reading its key-value head
        heads = every if head is None else [head] if on_q else list(range(head * group, (head + 1) * group))
        if pos is not None:
            out[index] = float(one_pos[heads, pos].sum() / n_pairs)
            continue
        head_sel = slice(None) if head is None else slice(head, head + 1)
        if on_q:
            q = base_q.clone()
            q[:, :, head_sel] = src_q[:, :, head_sel]
            new = softmax(capped(q, base_k, heads))
        else:
            k = base_k.clone()
            k[:, :, head_sel] = src_k[:, :, head_sel]
            new = softmax(capped(base_q, k, heads))
        out[index] = float((g[:, heads] * (new - old[:, heads])).sum() / n_pairs)
    return out


# ---- progress --------------------------------------------------------------------------------------------

def _progress_bar(total: int, progress):
    if progress is True and total > 1:
        from tqdm.auto import tqdm
        from tqdm.notebook import tqdm_notebook

        # a script whose stderr is no terminal (a log, a pipe) gets no bar: its \r frames would be left half drawn;
        # a notebook's output is no terminal either, but draws the bar as a widget
        in_notebook = issubclass(tqdm, tqdm_notebook)
        return tqdm(total=total, desc="patch sweep", unit="cell", leave=False, disable=False if in_notebook else None)
    return None


def _advance(bar, progress, done, total, n):
    if bar is not None:
        bar.update(n)
    if callable(progress):
        progress(done, total)


__all__ = ["patch_sweep", "patch_sweep_heads", "HeadSweeps", "SweepResult", "SweepCancelled", "Cells", "LAYERED",
           "Ablation", "ablation_edit", "ablation_means"]

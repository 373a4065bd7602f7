"""The patching explorer: a sweep's heatmap and the logit panel its clicks drive (PatchSession: the numbers;
PatchExplorer: the wiring), and the head sweeps side by side. res.show() of a SweepResult opens it; an ablation sweep
(no corrupt run) opens the same explorer, whose clicks run the cell's ablation."""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

import torch

from .. import display
from ..analyses.patching import (
    Ablation,
    Cells,
    HeadSweeps,
    SweepCancelled,
    SweepResult,
    ablation_edit,
    ablation_means,
    patch_sweep,
)
from ..edits import Edit, SourceRef, patch
from ..engine import Engine, engine_of
from ..errors import InterplabError
from ..metrics import as_metric, logit_diff
from ..tokens import token_text
from ..widgets.composite import Composite
from ..widgets.jobs import job, settle_in_batch
from .heatmap import PatchingHeatmap
from .logits import PROB_DIGITS, TOP_K, Bars, LogitPanel, prompt_tokens


@dataclass
class PatchSession:
    """A clean/corrupt pair (or a dataset of pairs, as tuples of prompts), a metric, and the edits a user has clicked
    on. With pairs, the logit panel shows the mean over them (`pair=None`) or pair number `pair`. An ablation
    session (`ablation`, corrupt None): the prompt(s) alone, each cell ablated to the baseline."""

    engine: Engine
    clean: str | tuple[str, ...]
    corrupt: str | tuple[str, ...]
    answer: str | int | None
    wrong: str | int | None
    site: str = "resid_pre"
    by: tuple = ("layer", "pos")
    direction: str = "denoise"
    result: SweepResult | None = None
    metric: object = None  # any ilab metric; default logit_diff(answer, wrong)
    pair: int | None = None  # a dataset's pair the logit panel shows; None: the mean over the pairs
    sae: object = None  # a sweep of an SAE's features (by ("feature", "pos")): rows are its features, not layers
    ablation: Ablation | None = None  # an ablation sweep: what each cell is set to (there is no corrupt prompt)
    _tokens: list[str] | None = field(default=None, repr=False)
    _means: dict | None = field(default=None, repr=False)  # a mean ablation's means, when no sweep gave them

    def __post_init__(self):
        self.engine = engine_of(self.engine)
        if self.ablation is None:
            self.engine.check_pair(self._as_run(self.clean), self._as_run(self.corrupt))
        else:
            self.direction = "ablate"
        self.metric = as_metric(self.metric or logit_diff(self.answer, self.wrong)).bind(self.engine.token_id)

    @property
    def base(self) -> str:
        return self.corrupt if self.direction == "denoise" and self.ablation is None else self.clean

    @property
    def source(self) -> str:
        return self.clean if self.direction == "denoise" else self.corrupt

    @property
    def n_pairs(self) -> int:
        return 1 if isinstance(self.clean, str) else len(self.clean)

    @staticmethod
    def _first(prompts) -> str:
        return prompts if isinstance(prompts, str) else prompts[0]

    def tokens(self) -> list[str]:
        """The (first) clean prompt's tokens: a dataset's pairs share their positions (check_pair)."""
        if self._tokens is None:  # the tokenizer once, not per click
            self._tokens = prompt_tokens(self.engine, self._first(self.clean))  # (byte pieces readable)
        return self._tokens

    def pair_names(self) -> list[str]:
        """A dataset's pairs as a menu names them ([] for one pair): number, the base prompt's end."""
        if self.n_pairs == 1:
            return []
        return [f"pair {i}: ...{p[-40:]}" for i, p in enumerate(self.as_prompts(self.base))]

    def describe_pairs(self) -> str:
        """What the logit panel shows, in words: the pair, or the mean over the dataset's pairs."""
        if self.n_pairs == 1:
            return f"next token after: {self._first(self.base)[-60:]!r}"
        if self.pair is None:
            return f"mean over {self.n_pairs} pairs (next token after each prompt; pair 0: "\
                   f"{self._first(self.base)[-40:]!r})"
        return f"pair {self.pair} of {self.n_pairs}: next token after {self.base[self.pair][-60:]!r}"

    def metric_label(self) -> str:
        """The metric line's name: the metric's own, or, for one pair of a dataset, that pair's (its answers): the
        mean's name ("logit diff over 8 pairs") never labels one pair's values."""
        name = self.metric.name
        if self.n_pairs == 1 or self.pair is None:
            return f"mean {name}" if self.n_pairs > 1 and not name.startswith("mean") else name
        k = self.pair

        def token(tokens) -> str:  # that pair's answer (one answer for all, or one per pair), as text
            t = tokens[k if len(tokens) > 1 else 0] if isinstance(tokens, (list, tuple)) else tokens
            return repr(t if isinstance(t, str) else self.engine.tokenizer.decode([int(t)]))

        answer, wrong = getattr(self.metric, "answer", None), getattr(self.metric, "wrong", None)
        if answer is not None and wrong is not None:  # a logit difference
            what = f"logit diff {token(answer)} - {token(wrong)}"
        elif getattr(self.metric, "token", None) is not None:  # a probability
            what = f"{'logprob' if getattr(self.metric, 'log', False) else 'prob'} {token(self.metric.token)}"
        else:
            what = name
        return f"{what}, pair {k} of {self.n_pairs}"

    # ---- the sweep -------------------------------------------------------------------------------------------
    def _sweep_args(self) -> tuple[tuple, dict]:
        """patch_sweep's arguments for this session: its pair and direction, or its prompt and baseline."""
        target = self.sae or self.site
        if self.ablation is None:
            return (self.engine, self.clean, self.corrupt, target, self.by, self.metric, self.direction), {}
        a = self.ablation
        return ((self.engine, self._as_run(self.clean), None, target, self.by, self.metric),
                {"baseline": a.baseline, "reference": list(a.reference) if a.baseline == "mean" else None})

    def sweep(self, **kw) -> SweepResult:
        args, more = self._sweep_args()
        self.result = patch_sweep(*args, **more, **kw)
        return self.result

    def estimate(self, **kw) -> SweepResult:
        """The attribution estimate of this session's sweep (two runs): what a progressive sweep shows first."""
        args, more = self._sweep_args()
        return patch_sweep(*args, **more, method="attribution", progress=False, **kw)

    @staticmethod
    def priority(estimate: SweepResult) -> torch.Tensor:
        """Which exact cells to run first: the largest |estimated effect|."""
        return estimate.values.abs().nan_to_num(0.0)

    def merged(self, exact: SweepResult, estimate: SweepResult) -> dict:
        """Heatmap traits of a partial exact sweep: its cells where computed, the estimate's elsewhere (their hover
        says so); `n_exact` of `n_cells` computed."""
        grid = self.grid(exact)
        done = ~torch.isnan(exact.cells.grid(exact.raw))
        values = torch.where(done, exact.cells.grid(exact.values), estimate.cells.grid(estimate.values))
        grid["values"] = values.tolist()
        exact_hover, est_hover = self.hover(exact), self.estimate_hover(estimate)
        grid["hover"] = [[exact_hover[r][c] if done[r, c] else est_hover[r][c] for c in range(len(row))]
                         for r, row in enumerate(grid["values"])]
        grid["n_exact"], grid["n_cells"] = int(done.sum()), int(done.numel())
        return grid

    def estimate_hover(self, estimate: SweepResult) -> list[list[str]]:
        return [["attribution estimate (not computed exactly)\n" + h for h in row] for row in self.hover(estimate)]

    @property
    def cells(self):
        """What each heatmap cell stands for: the sweep's own, or (before any sweep) every layer of this model."""
        if self.result is not None:
            return self.result.cells
        return Cells(tuple(self.by), tuple(range(self.engine.n_layers)), tuple(self.tokens()), self.engine.n_heads)

    def grid(self, result: SweepResult | None = None) -> dict:
        """Heatmap traits for a result: values as rows x cols, axis labels and titles."""
        res = result or self.result
        cells = res.cells
        if len(cells.tokens) == len(self.tokens()):  # the position labels as views show tokens (byte pieces readable)
            cells = replace(cells, tokens=tuple(self.tokens()))
        return {"values": cells.grid(res.values).tolist(), "x_labels": cells.col_labels(),
                "y_labels": [f"{self.row_prefix}{r}" for r in res.labels[res.by[0]]],
                "x_title": cells.col_title(), "y_title": "feature" if self.sae else "layer",
                "direction": self.direction_text(res.direction),
                "key_cols": cells.key_cols(self.key_positions()),
                "metric_name": self.value_name(res.metric_name),
                "title": f"{res.site if self.sae is None else self.sae.describe()}: {self.doing(res.direction)} "
                         f"({res.method})"}

    def value_name(self, metric_name: str) -> str:
        """What a cell's value is: the normalised metric, or (an ablation) the metric's change."""
        return f"normalised {metric_name}" if self.ablation is None else f"change in {metric_name}"

    def doing(self, direction: str) -> str:
        """The sweep in the title: denoise / noise, or what an ablation set each cell to."""
        if self.ablation is None:
            return direction
        return self.ablation.describe("feature" if self.sae is not None else "activation")

    def direction_text(self, direction: str) -> str:
        """The heatmap's direction trait: 'denoise' / 'noise' (the page words them); '' for an ablation, whose
        title says what it did and whose values are named "change in <metric>"."""
        return direction if self.ablation is None else ""

    def empty_grid(self) -> dict | None:
        """The heatmap's frame before any cell is known (axes, labels, titles; every value None), the same as the
        sweep's own grid will have: the page lays plotly out once, when it is shown, and the sweep's estimate, cells
        and final grid only repaint cells (a relayout of the frame was a 100-300 ms task at a sweep's start). None
        where the rows are not the model's layers (an SAE's features)."""
        if self.sae is not None or self.result is not None:
            return None
        cells = self.cells
        rows, cols = cells.shape[0], cells.n_cols
        return {"values": [[None] * cols for _ in range(rows)], "x_labels": cells.col_labels(),
                "y_labels": [f"{self.row_prefix}{r}" for r in cells.layers], "x_title": cells.col_title(),
                "y_title": "layer", "direction": self.direction_text(self.direction),
                "key_cols": cells.key_cols(self.key_positions()), "metric_name": self.value_name(self.metric.name),
                "title": f"{self.site}: {self.doing(self.direction)}"}

    def key_positions(self) -> list[int]:
        """Where the effect is: the positions at which the pair's tokens differ, and the last one."""
        if self.ablation is not None:  # one prompt: its last position
            return [len(self.tokens()) - 1]
        clean, corrupt = self.tokens(), prompt_tokens(self.engine, self._first(self.corrupt))
        return [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b] + [len(clean) - 1]

    # ---- clicked cells -> edits ------------------------------------------------------------------------------
    @property
    def row_prefix(self) -> str:
        """How a row is named: L<layer>, or F<feature> in a sweep of an SAE's features."""
        return "F" if self.sae is not None else "L"

    def _patch(self, row: int, col: int, source) -> Edit:
        """The patch a heatmap cell stands for, from `source` (a run, or its prompts by name)."""
        where, pos, head = self.cells.meaning(row, col)
        label = self.cell_label(row, col)
        if self.sae is not None:  # a row is one feature: only it takes the source's value, at that position
            return patch(self.sae, feature=where, pos=pos, source=source, label=label)
        return patch(self.site, where, pos=pos, head=head, source=source, label=label)

    def _ablate(self, row: int, col: int) -> Edit:
        """The ablation a heatmap cell of an ablation sweep stands for (interplab.analyses.patching.ablation_edit)."""
        where, pos, head = self.cells.meaning(row, col)
        return ablation_edit(self.ablation, self.site, where, pos, head, n_heads=self.cells.n_heads, sae=self.sae,
                             means=self.means(), label=self.cell_label(row, col))

    def means(self) -> dict:
        """A mean ablation's means, as its sweep wrote them (computed here, once, where no sweep has run yet)."""
        if self.result is not None and self.result.ablation == self.ablation and self.result.baseline_means:
            return self.result.baseline_means
        if self._means is None:
            site = self.sae.site if self.sae is not None else self.site
            self._means = ablation_means(self.engine, self.ablation, site, list(self.cells.layers), self.sae)
        return self._means

    def cell_edit(self, row: int, col: int) -> Edit:
        """The patch a heatmap cell stands for (source -> base at that layer / position / head, or of that
        feature at that position); in an ablation sweep, that cell's ablation."""
        if self.ablation is not None:
            return self._ablate(row, col)
        # the source run caches the whole site once, so no click re-runs it
        site = (self.sae.site, self.sae.layer) if self.sae is not None else self.site
        source = self.engine.run(self._as_run(self.source), cache=[site], log=False)
        return self._patch(row, col, source)

    def cell_ref(self, row: int, col: int) -> Edit:
        """cell_edit's patch with its source named by prompt, built without a forward: what the log records when a
        click arrives (serialised exactly as cell_edit's, whose source is the run of that prompt)."""
        if self.ablation is not None:
            return self._ablate(row, col)
        return self._patch(row, col, SourceRef(self.as_prompts(self.source)))

    def cell_label(self, row: int, col: int) -> str:
        """The label of a cell's patch, known without building it (a widget lists a clicked cell at once)."""
        where, pos, head = self.cells.meaning(row, col)
        site = f"F{where} of {self.sae.describe()}" if self.sae is not None else f"{self.site} L{where}"
        op = "patch" if self.ablation is None else f"{self.ablation.baseline}-ablate"
        return f"{op} {site}" + (f" H{head}" if head is not None else "") + (
            f" pos {pos} {self.tokens()[pos]!r}" if pos is not None else "")

    @staticmethod
    def cell_id(row: int, col: int) -> str:
        return f"r{row}c{col}"

    # ---- the logit panel ---------------------------------------------------------------------------------------
    def logits_view(self, edits: list[Edit], cells: list[tuple[int, int]] | None = None, log: bool = True) -> dict:
        """Top-k bars for clean / corrupt / patched and the metric values (patched = base with the edits).

        cells: the heatmap cells (row, col) the edits stand for; one cell of this session's exact sweep is read
        from the sweep, which ran that very patched forward (see cell_run). log=False: the patched run is not
        recorded in lab.log (the explorer records each click when it arrives)."""
        engine = self.engine
        # one pair's top tokens and metric, or (a dataset, pair None) the mean probabilities and mean metric
        bars = Bars(engine, self.metric, self.metric_label(), row=self.pair)
        bars.add("clean", engine.run(self._as_run(self.clean), log=False).last_logits)
        if self.ablation is None:
            bars.add("corrupt", engine.run(self._as_run(self.corrupt), log=False).last_logits)
        key = self.edited  # "patched", or "ablated": the metric line's name for the clicked run
        if edits:
            run = self.cell_run(cells[0]) if cells is not None and len(cells) == len(edits) == 1 else None
            name = f"{key}: {_short(edits)}"
            if run is not None:
                ids, p, value = run
                if log:
                    engine.log.record(list(self.as_prompts(self.base)), edits, [])  # as if the forward had run
                bars.add_top(name, [token_text(engine.tokenizer, i) for i in ids], list(p), value, key)
            else:
                bars.add(name, engine.last_logits(self._as_run(self.base), edits, log=log), key)
            values = bars.values
            if self.ablation is not None:  # no corrupt run: the change from the clean value
                values["change"] = values["ablated"] - values["clean"]
            elif abs(denom := values["clean"] - values["corrupt"]) > 1e-9:
                values["normalised"] = (values["patched"] - values["corrupt"]) / denom
        return bars.panel()

    @property
    def edited(self) -> str:
        """What a clicked cell's run is called: 'patched', or 'ablated' in an ablation sweep."""
        return "patched" if self.ablation is None else "ablated"

    @staticmethod
    def _as_run(prompts):
        return prompts if isinstance(prompts, str) else list(prompts)

    @staticmethod
    def as_prompts(prompts) -> tuple[str, ...]:
        """A prompt or a dataset's prompts, as a tuple (what the log records, a SourceRef names)."""
        return (prompts,) if isinstance(prompts, str) else tuple(prompts)

    def _own_exact(self, res: SweepResult | None) -> bool:
        """Whether res is this session's exact sweep (same pair or prompt and ablation, site, cells, direction,
        metric) with its runs."""
        if res is None or res.method != "exact" or self.n_pairs != 1 or len(res.clean) != 1 or not res.cell_runs:
            return False
        same_source = res.ablation == self.ablation and (
            self.ablation is not None or (len(res.corrupt) == 1 and res.corrupt[0] == self.corrupt))
        return not (res.clean[0] != self.clean or not same_source
                    or res.site != self.site or tuple(res.by) != tuple(self.by)
                    or res.direction != self.direction
                    or res.metric is not None and res.metric.name != self.metric.name)

    def cell_run(self, cell: tuple[int, int]) -> tuple | None:
        """(top token ids, probabilities, metric) of the patched run behind heatmap cell (row, col), as the exact
        sweep computed it; None where the sweep is not this session's (another pair, site, metric; several
        pairs; attribution) or lacks the cell. Equal to a fresh forward up to float rounding (tested)."""
        res = self.result
        if not self._own_exact(res):
            return None
        run = res.cell_runs.get(res.cells.index(*cell))
        return run if run is not None and len(run[0]) >= TOP_K else None

    def cell_tops(self, result: SweepResult | None = None) -> dict:
        """What a click on each cell of this session's exact sweep shows, for the page to paint at once:
        {"metric": name, "cells": [[row, col, metric, series name, tokens, probs], ...]}, the same numbers
        logits_view reads from the sweep (tokens decoded once per cell); {} for any other sweep."""
        res = result or self.result
        if not self._own_exact(res):
            return {}
        cells, out = res.cells, []
        decode = lambda ids: [token_text(self.engine.tokenizer, i) for i in ids]  # noqa: E731
        rows, cols = cells.grid(res.raw).shape
        for row in range(rows):
            for col in range(cols):
                run = res.cell_runs.get(cells.index(row, col))
                if run is None or len(run[0]) < TOP_K:
                    continue
                ids, p, value = run
                layer, pos, head = cells.meaning(row, col)
                name = f"{self.edited}: " + " ".join(x for x in (f"{self.row_prefix}{layer}",
                                                          "" if head is None else f"H{head}",
                                                          "" if pos is None else f"pos {pos}") if x)
                out.append([row, col, float(value), name, decode(ids),
                            [round(float(x), PROB_DIGITS) for x in p]])
        return {"metric": self.metric.name, "cells": out}

    def warm(self) -> None:
        """Precompute what clicks reuse (the base prompt's cached residuals and keys/values)."""
        self.engine.warm(self._as_run(self.base))

    def hover(self, result: SweepResult | None = None) -> list[list[str]]:
        res = result or self.result
        return [[self._hover_text(res, li, c, x) for c, x in enumerate(r)]
                for li, r in enumerate(res.cells.grid(res.raw).tolist())]

    @staticmethod
    def _hover_text(res: SweepResult, row: int, col: int, x: float) -> str:
        text = "not computed" if x != x else f"{res.metric_name}: {x:.3f}"
        top = res.top_tokens.get(res.cells.index(row, col))
        shown = [(t, p) for t, p in (top or []) if p >= 0.005]  # (what rounds to 0.00 says nothing)
        if shown:
            text += "\nnext: " + ", ".join(f"{t!r} {p:.2f}" for t, p in shown)
        return text

    def new_cells(self, result: SweepResult, sent: set) -> list[list]:
        """[[row, col, value, hover], ...] of the cells computed and not in `sent` (which this adds them to): what a
        progress update sends, instead of the whole grid."""
        values = result.cells.grid(result.values).tolist()
        raw = result.cells.grid(result.raw).tolist()
        out = []
        for row, line in enumerate(raw):
            for col, x in enumerate(line):
                if x != x or (row, col) in sent:
                    continue
                sent.add((row, col))
                v = values[row][col]
                out.append([row, col, v if math.isfinite(v) else None, self._hover_text(result, row, col, x)])
        return out


def _short(edits: list[Edit]) -> str:
    """A title short enough for a bar chart: 'L3 pos 13', 'L2 H1', or '3 edits'."""
    if len(edits) > 1:
        return f"{len(edits)} edits"
    e = edits[0]
    feature = getattr(e, "feature", None)
    where = f"F{feature}" if getattr(e, "sae", None) is not None and isinstance(feature, int) else f"L{e.layer}"
    return " ".join(x for x in (where, "" if e.head is None else f"H{e.head}",
                                "" if e.pos is None else f"pos {e.pos}") if x)


class PatchExplorer(Composite):
    """The patching heatmap and the logit panel it drives, one anywidget (a Composite: every frontend, marimo too,
    hosts it). `explorer.heatmap.selected`, `.active_edits` and `explorer.edits` are the shared state between clicks
    and code: set them from Python and the view follows. part=True: held by a dashboard, which shows its views."""

    def __init__(self, session: PatchSession, result=None, *, part: bool = False, logits: LogitPanel | None = None):
        self.session = session
        self.engine = session.engine
        self.worker = self.engine.worker
        self._edits: dict = {}  # cell id -> its patch, built on the worker (a forward caches the source's site)
        self._building = threading.Lock()  # one build per cell, whichever thread asks first
        self._cancel = threading.Event()
        self.partial = False  # a progressive sweep cancelled: exact cells done, the estimate elsewhere
        self.first_paint_s = None  # a progressive sweep: seconds from its start to the estimate shown
        # the page paints exact-sweep clicks on this panel at once (`logits`: a panel shared with other explorers)
        link = logits.link if logits is not None and logits.link else f"explorer-{uuid.uuid4().hex}"
        self.heatmap = PatchingHeatmap(link=link, part=True)
        if session.ablation is not None:
            self.heatmap.hint = "Click a cell to ablate it; shift-click to add cells."
        self.logits = logits or LogitPanel(title=session.describe_pairs(), link=link, part=True)
        super().__init__({"heatmap": self.heatmap, "logits": self.logits}, part=part)
        if result is not None:
            session.result = result
            self._show_result(result)
        self.heatmap.observe(self._on_selected, "selected")
        self.heatmap.observe(self._on_active, "active_edits")
        self.heatmap.on_toggle(self._on_toggle)
        self.heatmap.on_remove(self._on_remove)
        self.heatmap.on_cancel(self._cancel.set)
        if logits is None:  # its own panel: a dataset's menu of pairs (a shared panel's owner wires its own)
            self.logits.pairs = session.pair_names()
            self.logits.on_pair(self.show_pair)
        self._refresh_logits()
        # after the first paint's job: precompute what clicks reuse, so the first click is as fast as the rest
        job(self.worker, self.logits, f"warm:{id(self)}", self.session.warm)
        if not part:  # run by nbclient: the first logit panel is in the saved notebook (a composite waits itself)
            settle_in_batch(self.worker)

    @property
    def queue(self):
        """The lab's worker, under the name notebooks and benchmarks use (`explorer.queue.join()`)."""
        return self.worker

    # ---- the shared state ---------------------------------------------------------------------------------
    @property
    def edits(self) -> list:
        """The ilab edits behind the enabled entries of the active set, in order (read from code: a cell whose job
        has not run yet has its edit built here)."""
        return self._edits_for(self.heatmap.active_edits)[0]

    def _edits_for(self, entries) -> tuple[list, list | None]:
        """(edits, cells) of the enabled entries; cells: the heatmap cells behind them, None where an edit set from
        code has none (then the logit panel runs the forward). Builds missing cell edits: call it off the comm
        thread (a job, or user code)."""
        edits, cells = [], []
        for e in entries:
            if not e.get("enabled", True):
                continue
            edit = self._edits.get(e["id"])
            if edit is None and e.get("row") is not None:
                with self._building:
                    edit = self._edits.get(e["id"]) or self.session.cell_edit(e["row"], e["col"])
                    self._edits[e["id"]] = edit
            if edit is None:
                continue
            edits.append(edit)
            if e.get("row") is not None:
                cells.append((e["row"], e["col"]))
        return edits, (cells if len(cells) == len(edits) else None)

    def _log_request(self, entries) -> None:
        """Record the patched run a click (toggle, remove, selection set from code) asks for in the lab's log, now,
        on the thread that got it: the worker computes only the latest request, the log keeps every one, in order.
        A cell's patch names its source by prompt (session.cell_ref): no model work here."""
        edits = []
        for e in entries:
            if not e.get("enabled", True):
                continue
            edit = self._edits.get(e["id"])
            if edit is None and e.get("row") is not None:
                edit = self.session.cell_ref(e["row"], e["col"])
            if edit is not None:
                edits.append(edit)
        if edits:
            self.engine.log.record(list(self.session.as_prompts(self.session.base)), edits, [])

    def _on_selected(self, change) -> None:
        # comm thread: list the cells; their edits are built in the logit job (the first one runs a forward)
        old = {e["id"]: e for e in self.heatmap.active_edits}
        entries = []
        for row, col in self.heatmap.selected:
            cid = PatchSession.cell_id(row, col)
            edit = self._edits.get(cid)
            entries.append({"id": cid, "label": edit.describe() if edit else self.session.cell_label(row, col),
                            "row": row, "col": col, "enabled": old.get(cid, {}).get("enabled", True)})
        self.heatmap.active_edits = entries

    def show_pair(self, index: int | None) -> None:
        """What the logit panel shows for a dataset: pair `index`, or (None or -1) the mean over the pairs."""
        index = None if index is None or index < 0 else int(index)
        if index is not None and not 0 <= index < self.session.n_pairs:
            raise InterplabError(f"pair {index} out of range: this sweep has {self.session.n_pairs} pair(s) "
                                 f"(0..{self.session.n_pairs - 1}); None shows their mean")
        self.session.pair = index
        self.logits.pair = -1 if index is None else index
        self.logits.title = self.session.describe_pairs()
        self._refresh_logits()

    def _on_active(self, change) -> None:
        self._refresh_logits()  # entries set from code get their edits built in the job too

    def _on_toggle(self, edit_id: str, enabled: bool) -> None:
        self.heatmap.active_edits = [{**e, "enabled": enabled} if e["id"] == edit_id else e
                                     for e in self.heatmap.active_edits]

    def _on_remove(self, edit_id: str) -> None:
        entry = next((e for e in self.heatmap.active_edits if e["id"] == edit_id), None)
        if entry is not None and [entry.get("row"), entry.get("col")] in self.heatmap.selected:
            self.heatmap.selected = [c for c in self.heatmap.selected if c != [entry["row"], entry["col"]]]
        else:
            self.heatmap.active_edits = [e for e in self.heatmap.active_edits if e["id"] != edit_id]

    def _refresh_logits(self) -> None:
        entries = [dict(e) for e in self.heatmap.active_edits]  # this request's state, as of now
        t0 = time.perf_counter()
        self._log_request(entries)

        def run():  # latest request wins: a burst of clicks computes only the last one's panel
            return self.session.logits_view(*self._edits_for(entries), log=False)

        def show(view):
            self.logits.series = view["series"]
            self.logits.metric = view["metric"]
            self.logits.status = f"computed in {1000 * (time.perf_counter() - t0):.0f} ms"

        job(self.worker, self.logits, f"logits:{id(self)}", run, show)

    # ---- the sweep ------------------------------------------------------------------------------------------
    def _show_result(self, result, final: bool = True) -> None:
        with self.heatmap.hold_sync():  # one message
            for k, v in self.session.grid(result).items():
                setattr(self.heatmap, k, v)
            self.heatmap.hover = self.session.hover(result)
            if final:
                self.heatmap.cell_tops = self.session.cell_tops(result)

    def _frame(self, kw: dict) -> bool:
        """Before a sweep of every layer, an empty heatmap gets its frame (see PatchSession.empty_grid); True when
        it did (the sweep's cells then travel as new cells from the first)."""
        frame = None if "layers" in kw or self.heatmap.values else self.session.empty_grid()
        if frame is None:
            return False
        frame["title"] += f" ({kw.get('method', 'exact')})"
        with self.heatmap.hold_sync():
            for k, v in frame.items():
                setattr(self.heatmap, k, v)
        return True

    def sweep(self, wait: bool = False, progressive: bool = False, **kw) -> None:
        """Run the sweep on the lab's worker; the heatmap fills in as cells finish, Cancel (or exit) stops it.
        progressive=True: the attribution estimate first (two runs, the whole grid at once), then the exact cells,
        largest |estimate| first, each replacing its estimate as its chunk finishes; Cancel keeps the exact cells
        done (the rest stay estimates, the view says partial)."""
        framed = self._frame(kw)
        if progressive:
            return self._sweep_progressive(wait, **kw)
        self._cancel.clear()
        self.heatmap.progress = 0.0
        self.heatmap.status = "sweeping..."

        def progress(done, total):
            self.heatmap.progress = done / total if done < total else 0.0

        sent = set() if framed else None  # cells the page has (None: not even the grid's shape)
        last = {}

        def partial(res):
            # the first update sets the grid (shape, labels, titles); later ones send only the new cells
            nonlocal sent
            last["res"] = res
            if sent is None:
                sent = set()
                self.session.new_cells(res, sent)
                self.heatmap.cell_tops = {}
                self._show_result(res, final=False)
            else:
                self.heatmap.add_cells(self.session.new_cells(res, sent))

        def run():
            return self.session.sweep(progress=progress, cancel=self._cancel, on_partial=partial, **kw)

        def done(res):
            self._show_result(res)
            self.heatmap.progress = 0.0
            self.heatmap.status = res.describe()

        def error(e):
            self.heatmap.progress = 0.0
            if isinstance(e, SweepCancelled):  # asked for: the cells computed stay, and clicks patch any cell
                if "res" in last:  # (in the traits too: a saved notebook or a second display shows them)
                    self._show_result(last["res"], final=False)
                self.heatmap.status = f"cancelled after {e.done} of {e.total} cells (the grey cells were not "\
                                      f"computed; a click still patches any cell)"
                return
            self.heatmap.status = ""
            self.heatmap.error = f"{type(e).__name__}: {e}"

        job(self.worker, self.heatmap, f"sweep:{id(self)}", run, done, error=error, cancel=self._cancel)
        if wait:
            self.worker.join(timeout=600)
        else:  # run by nbclient (nbconvert --execute): the sweep ends in this cell, so its notebook saves it whole
            settle_in_batch(self.worker)

    def _sweep_progressive(self, wait: bool = False, **kw) -> None:
        """PatchExplorer.sweep(progressive=True): see there."""
        self._cancel.clear()
        self.partial = False
        heat = self.heatmap
        heat.error = ""
        heat.status = "estimating every cell (attribution)..."
        heat.progress = 0.01  # the Cancel button shows from the start
        sent: set = set()
        total = [0]
        last: dict = {}

        def progress(done, n):
            total[0] = n
            heat.progress = min(max(done / n, 0.01), 0.99) if done < n else 0.0

        def partial(res):  # the worker thread: only the new exact cells travel
            last["res"] = res
            heat.add_cells(self.session.new_cells(res, sent))
            heat.status = f"exact: {len(sent)} of {total[0] or '?'} cells, largest |estimate| first (the others: "\
                          f"attribution estimates)"

        def run():
            t0 = time.perf_counter()
            est = self.session.estimate()
            with heat.hold_sync():  # the estimate, at once
                for k, v in self.session.grid(est).items():
                    setattr(heat, k, v)
                heat.title = f"{heat.title}: exact cells replace the estimate as they finish"
                heat.hover = self.session.estimate_hover(est)
                heat.cell_tops = {}
                heat.status = "estimate shown; exact cells follow, largest |estimate| first"
            self.first_paint_s = time.perf_counter() - t0  # the estimate on the page: time to a first heatmap
            try:
                res = self.session.sweep(progress=progress, cancel=self._cancel, on_partial=partial,
                                         order=self.session.priority(est), **kw)
                return res, est, False
            except SweepCancelled:
                if "res" not in last:
                    raise
                self.session.result = last["res"]
                return last["res"], est, True

        def done(out):
            res, est, cancelled = out
            heat.progress = 0.0
            if not cancelled:
                self._show_result(res)
                heat.status = res.describe()
                return
            view = self.session.merged(res, est)
            self.partial = True
            with heat.hold_sync():
                for k in ("values", "hover", "x_labels", "y_labels", "x_title", "y_title", "metric_name", "direction"):
                    setattr(heat, k, view[k])
                heat.title = f"{view['title']}: partial, {view['n_exact']} of {view['n_cells']} cells exact"
                heat.cell_tops = self.session.cell_tops(res)
                heat.status = (f"cancelled: partial, {view['n_exact']} of {view['n_cells']} cells exact (the others "
                               f"are attribution estimates)")

        def error(e):
            heat.progress = 0.0
            heat.status = ""
            heat.error = f"{type(e).__name__}: {e}"

        job(self.worker, heat, f"sweep:{id(self)}", run, done, error=error, cancel=self._cancel)
        if wait:
            self.worker.join(timeout=600)
        else:  # run by nbclient (nbconvert --execute): the sweep ends in this cell, so its notebook saves it whole
            settle_in_batch(self.worker)


def _session_of(result, engine: Engine, answer=None, wrong=None) -> PatchSession:
    metric = getattr(result, "metric", None)
    answer = answer if answer is not None else getattr(metric, "answer", None)
    wrong = wrong if wrong is not None else getattr(metric, "wrong", None)
    # a dataset's sweep: a session of all its pairs (the logit panel shows their mean, or one pair)
    ablation = getattr(result, "ablation", None)
    one = len(result.clean) == 1
    clean = result.clean[0] if one else tuple(result.clean)
    corrupt = None if ablation is not None else result.corrupt[0] if one else tuple(result.corrupt)
    return PatchSession(engine, clean, corrupt, answer, wrong, result.site, result.by,
                        result.direction, metric=metric if answer is None else None, sae=getattr(result, "sae", None),
                        ablation=ablation)


def heatmap_for(result, lab: Engine | None = None, answer=None, wrong=None):
    """The explorer for a finished sweep (res.show())."""
    engine = engine_of(lab or getattr(result, "engine", None))
    if engine is None:
        return PatchingHeatmap(values=result.values.reshape(result.values.shape[0], -1).tolist())
    return PatchExplorer(_session_of(result, engine, answer, wrong), result)


SITE_ROLES = {"z": "output: what each head writes", "q": "query: the position a head looks from",
              "k": "key: the positions it looks at", "v": "value: what it reads there",
              "pattern": "pattern: where it looks"}


class HeadSweepsView(Composite):
    """lab.patch_sweep_heads(...).show(): the output, query, key, value and pattern sweeps side by side, one explorer
    each (a click patches that cell, the logit panel below shows it), sharing one logit panel: a plain click in one
    heatmap clears the others' selections first, so the panel shows the cells of one heatmap at a time."""

    def __init__(self, sweeps, lab: Engine | None = None):
        results = dict(sweeps.results)
        first = next(iter(results.values()))
        engine = engine_of(lab) if lab is not None else first.engine
        if engine is None:
            raise ValueError("the head sweeps' lab is unknown: pass it, sweeps.show(lab)")
        sessions = {site: _session_of(res, engine) for site, res in results.items()}
        self.logits = LogitPanel(title=sessions[next(iter(sessions))].describe_pairs(),
                                 link=f"heads-{uuid.uuid4().hex}", part=True)
        self.explorers = {site: PatchExplorer(sessions[site], res, part=True, logits=self.logits)
                          for site, res in results.items()}
        self.logits.pairs = sessions[next(iter(sessions))].pair_names()
        self.logits.on_pair(self.show_pair)
        for site, ex in self.explorers.items():
            ex.heatmap.title = f"{site}: every head"
            ex.heatmap.zmin, ex.heatmap.zmax = -1.0, 1.0  # one colour scale for the five
            ex.heatmap.direction = ""  # a narrow pane: the direction is stated once, in the status line
            ex.heatmap.metric_name = "normalised"
            ex.heatmap.hint = SITE_ROLES.get(site, "")  # what each panel patches (the status line says how to click)

        parts = {site: ex.heatmap for site, ex in self.explorers.items()}
        super().__init__({**parts, "logits": self.logits}, panes=[{"row": list(parts)}, {"part": "logits"}])
        if first.ablation is not None:  # one colour scale for the five, symmetric around 0 (no change)
            span = max(float(r.values.nan_to_num(0.0).abs().max()) for r in results.values()) or 1.0
            for ex in self.explorers.values():
                ex.heatmap.zmin, ex.heatmap.zmax = -span, span
                ex.heatmap.metric_name = f"change in {first.metric_name}"
            self.status = f"{first.metric_name}, {first.method}, {first.ablation.describe()}: values = ablated - "\
                          f"clean, 0 = no change; click a cell to ablate it, shift-click to add cells"
        else:
            kept = "clean restored" if first.direction == "denoise" else "clean behaviour kept"
            doing = {"denoise": "denoising", "noise": "noising"}[first.direction]
            self.status = f"{first.metric_name}, {first.method}, {doing}: 1 = {kept}, 0 = corrupted; click a cell "\
                          f"to patch it, shift-click to add cells"
        settle_in_batch(engine.worker)  # run by nbclient: the views' jobs end in this cell

    def show_pair(self, index: int | None) -> None:
        """The shared logit panel shows pair `index` of the dataset, or (None or -1) the mean over the pairs: every
        explorer's session follows, the one whose cells are selected (else the first) repaints the panel."""
        shown = next((ex for ex in self.explorers.values() if ex.heatmap.selected), next(iter(self.explorers.values())))
        for ex in self.explorers.values():
            if ex is not shown:
                ex.session.pair = None if index is None or index < 0 else int(index)
        shown.show_pair(index)

    def _on_frontend_msg(self, widget, content, buffers=None) -> None:
        name = content.get("part") if isinstance(content, dict) else None
        if name in self.explorers and content.get("type") == "click":
            heat = self.explorers[name].heatmap
            try:
                _, fields = heat._validate({k: v for k, v in content.items() if k != "part"})
            except Exception:  # noqa: BLE001 - the part answers it with its error
                fields = None
            if fields is not None and not fields["shift"]:
                for other, ex in self.explorers.items():
                    if other != name and ex.heatmap.selected:
                        ex.heatmap.selected = []
        super()._on_frontend_msg(widget, content, buffers)


display.register(SweepResult, heatmap_for)  # res.show() reaches the heatmap through the registry


display.register(HeadSweeps, lambda sweeps, lab=None: HeadSweepsView(sweeps, lab))

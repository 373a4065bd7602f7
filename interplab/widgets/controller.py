"""Wires the views to a Lab: clicks and drags become jobs on the lab's worker; results come back as traits.

The views (heatmap.py, logits.py, ...) know nothing of models; interplab.session computes plain numbers; this module
connects the two through the lab's worker (interplab.worker). Every frontend request and trait observer here only
reads and sets traits and submits a job: nothing touches the model on the kernel's message thread, which returns at
once. (The widget builders below compute their first picture in the caller's thread: that is the user's own cell.)
"""

from __future__ import annotations

import threading
import time
import uuid

from .. import display
from ..engine import Engine, engine_of
from ..errors import InterplabError
from ..session import (
    PatchSession,
    SweepCancelled,
    attention_view,
    circuit_view,
    dla_view,
    edge_exact,
    edge_graph,
    lens_view,
    node_exact,
    path_strongest,
    path_view,
    steering_generate,
    steering_preview,
    steering_vector,
)
from .attention import AttentionView
from .circuit import CircuitGraph
from .composite import Composite
from .heatmap import PatchingHeatmap
from .lens import LensView
from .logits import LogitPanel
from .steering import SteeringPanel
from .values import ValueBars


class PatchExplorer(Composite):
    """The patching heatmap and the logit panel it drives, one anywidget (a Composite: every frontend, marimo too,
    hosts it). `explorer.heatmap.selected`, `.active_edits` and `explorer.edits` are the shared state between clicks
    and code: set them from Python and the view follows. part=True: held by a dashboard, which shows its views."""

    def __init__(self, session: PatchSession, result=None, *, part: bool = False, logits: LogitPanel | None = None):
        self.session = session
        self.lab = session.lab
        self.worker = self.lab.worker
        self._edits: dict = {}  # cell id -> its patch, built on the worker (a forward caches the source's site)
        self._building = threading.Lock()  # one build per cell, whichever thread asks first
        self._cancel = threading.Event()
        self.partial = False  # a progressive sweep cancelled: exact cells done, the estimate elsewhere
        self.first_paint_s = None  # a progressive sweep: seconds from its start to the estimate shown
        # the page paints exact-sweep clicks on this panel at once (`logits`: a panel shared with other explorers)
        link = logits.link if logits is not None and logits.link else f"explorer-{uuid.uuid4().hex}"
        self.heatmap = PatchingHeatmap(link=link, part=True)
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
        self.worker.submit(f"warm:{id(self)}", self.session.warm, widget=self.logits)

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
            self.lab.log.record(list(self.session.as_prompts(self.session.base)), edits, [])

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

        def done(view):
            with self.logits.hold_sync():  # one message to the frontend, one repaint
                self.logits.series = view["series"]
                self.logits.metric = view["metric"]
                self.logits.status = f"computed in {1000 * (time.perf_counter() - t0):.0f} ms"
                self.logits.error = ""

        self.worker.submit(f"logits:{id(self)}", run, done, widget=self.logits)

    # ---- the sweep ------------------------------------------------------------------------------------------
    def _show_result(self, result, final: bool = True) -> None:
        with self.heatmap.hold_sync():  # one message
            for k, v in self.session.grid(result).items():
                setattr(self.heatmap, k, v)
            self.heatmap.hover = self.session.hover(result)
            if final:
                self.heatmap.cell_tops = self.session.cell_tops(result)

    def sweep(self, wait: bool = False, progressive: bool = False, **kw) -> None:
        """Run the sweep on the lab's worker; the heatmap fills in as cells finish, Cancel (or exit) stops it.
        progressive=True: the attribution estimate first (two runs, the whole grid at once), then the exact cells,
        largest |estimate| first, each replacing its estimate as its chunk finishes; Cancel keeps the exact cells
        done (the rest stay estimates, the view says partial)."""
        if progressive:
            return self._sweep_progressive(wait, **kw)
        self._cancel.clear()
        self.heatmap.progress = 0.0
        self.heatmap.status = "sweeping..."

        def progress(done, total):
            self.heatmap.progress = done / total if done < total else 0.0

        sent = None  # cells the page has

        def partial(res):
            # the first update sets the grid (shape, labels, titles); later ones send only the new cells
            nonlocal sent
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
                self.heatmap.status = f"cancelled after {e.done} of {e.total} cells (the grey cells were not " \
                                      f"computed; a click still patches any cell)"
                return
            self.heatmap.status = ""
            self.heatmap.error = f"{type(e).__name__}: {e}"

        self.worker.submit(f"sweep:{id(self)}", run, done, error, widget=self.heatmap, cancel=self._cancel)
        if wait:
            self.worker.join(timeout=600)

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
            heat.status = f"exact: {len(sent)} of {total[0] or '?'} cells, largest |estimate| first (the others: " \
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

        self.worker.submit(f"sweep:{id(self)}", run, done, error, widget=heat, cancel=self._cancel)
        if wait:
            self.worker.join(timeout=600)


def _session_of(result, lab: Engine, answer=None, wrong=None) -> PatchSession:
    metric = getattr(result, "metric", None)
    answer = answer if answer is not None else getattr(metric, "answer", None)
    wrong = wrong if wrong is not None else getattr(metric, "wrong", None)
    # a dataset's sweep: a session of all its pairs (the logit panel shows their mean, or one pair)
    clean, corrupt = (result.clean[0], result.corrupt[0]) if len(result.clean) == 1 else (
        tuple(result.clean), tuple(result.corrupt))
    return PatchSession(lab, clean, corrupt, answer, wrong, result.site, result.by,
                        result.direction, metric=metric if answer is None else None)


def heatmap_for(result, lab: Engine | None = None, answer=None, wrong=None):
    """The explorer for a finished sweep (res.show())."""
    lab = engine_of(lab or getattr(result, "lab", None))
    if lab is None:
        return PatchingHeatmap(values=result.values.reshape(result.values.shape[0], -1).tolist())
    return PatchExplorer(_session_of(result, lab, answer, wrong), result)


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
        lab = lab or first.lab
        if lab is None:
            raise ValueError("the head sweeps' lab is unknown: pass it, sweeps.show(lab)")
        sessions = {site: _session_of(res, lab) for site, res in results.items()}
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
        kept = "clean restored" if first.direction == "denoise" else "clean behaviour kept"
        doing = {"denoise": "denoising", "noise": "noising"}[first.direction]
        self.status = f"{first.metric_name}, {first.method}, {doing}: 1 = {kept}, 0 = corrupted; click a cell to " \
                      f"patch it, shift-click to add cells"

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


class DLAView(Composite):
    """DLAResult.show(): the metric at each position (click one to show it), each head's direct effect at that
    position (layers x heads) and the other parts (embeddings, attention biases, MLPs, final bias) as bars. The
    numbers are the result's own: nothing runs on a click."""

    def __init__(self, result, pos: int = -1):
        self.result = result
        self.positions = PatchingHeatmap(hint="Click a position to show its heads and other parts.", part=True)
        self.heads = PatchingHeatmap(hint="Each head's direct effect at this position (read from one run: "
                                          "nothing is patched).", part=True)
        self.bars = ValueBars(part=True)
        super().__init__({"positions": self.positions, "heads": self.heads, "parts": self.bars},
                         panes=[{"part": "positions"}, {"row": ["heads", "parts"]}])
        self.show_position(pos)
        self.positions.on_click(lambda row, col, shift: self.show_position(col))

    def show_position(self, pos: int) -> None:
        view = dla_view(self.result, pos)
        self.pos = view["pos"]
        for widget, traits in ((self.positions, view["positions"]), (self.heads, view["heads"]),
                               (self.bars, view["parts"])):
            with widget.hold_sync():
                for k, v in traits.items():
                    setattr(widget, k, v)


class PathView(Composite):
    """PathPatchResult.show(): each sender (layer x head, + the MLP column) as a heatmap; a click on a sender shows
    its effect through each receiver group as bars (per_receiver=True: one bar per receiver)."""

    def __init__(self, result):
        self.result = result
        self.heatmap = PatchingHeatmap(hint="Click a sender to show its effect through each receiver.", part=True)
        self.bars = ValueBars(part=True)
        super().__init__({"heatmap": self.heatmap, "bars": self.bars},
                         panes=[{"row": ["heatmap", "bars"]}])
        # the bars start on the sender with the largest effect (never an empty row of dashes), outlined as selected
        row, col = path_strongest(result)
        self._set(path_view(result, row, col))
        self.heatmap.selected = [[row, col]]
        self.heatmap.on_click(lambda row, col, shift: self._set(path_view(result, row, col)))

    def _set(self, view) -> None:
        for widget, traits in ((self.heatmap, view["heatmap"]), (self.bars, view["bars"])):
            with widget.hold_sync():
                for k, v in traits.items():
                    setattr(widget, k, v)


class SteeringController:
    """Drives a SteeringPanel: the vector from contrast prompts, a live preview while dragging, generation."""

    def __init__(self, lab: Engine, prompt: str, positive: list[str], negative: list[str], site: str = "resid_post",
                 layer: int | None = None, alpha_range: tuple[float, float] = (-4.0, 4.0), *, part: bool = False):
        self.lab = lab = engine_of(lab)
        self.worker = lab.worker
        sites = [s for s in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
                 if "unavailable" not in lab.sites.describe()[s]]
        self.panel = SteeringPanel(n_layers=lab.n_layers, sites=sites, site=site,
                                   layer=lab.n_layers // 2 if layer is None else layer, alpha=0.0,
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
            return steering_vector(self.lab, positive, negative, *where)

        def done(v):
            self.vector, self._vector_at = v, where
            p.status = f"vector from {len(positive)} vs {len(negative)} prompts at {p.site} L{p.layer}, " \
                       f"norm {float(v.norm()):.2f}"
            self.preview()

        self.worker.submit(f"vector:{id(self)}", run, done, widget=p)

    def preview(self) -> None:
        p = self.panel
        if self.vector is not None and self._vector_at != (p.site, p.layer):  # layer/site moved: new vector
            self.set_vector([s for s in p.positive.splitlines() if s.strip()],
                            [s for s in p.negative.splitlines() if s.strip()])
            return
        args = (p.prompt, self.vector, p.site, p.layer, p.alpha, p.positions)

        def done(dist):
            p.dist = dist
            p.error = ""

        self.worker.submit(f"preview:{id(self)}", lambda: steering_preview(self.lab, *args), done, widget=p)

    def generate(self) -> None:
        p = self.panel
        p.busy = True
        args = (p.prompt, self.vector, p.site, p.layer, p.alpha, p.positions, p.max_new_tokens)

        def done(text):
            p.generated = text
            p.busy = False

        def error(e):
            p.busy = False
            p.error = f"{type(e).__name__}: {e}"

        stop = threading.Event()  # set by the worker at interpreter exit: generation ends at the next token
        self.worker.submit(f"generate:{id(self)}", lambda: steering_generate(self.lab, *args, cancel=stop), done,
                           error, widget=p, cancel=stop)


def lens_widget(lab: Engine, prompt: str, *, part: bool = False) -> LensView:
    lab = engine_of(lab)
    return LensView(**lens_view(lab, prompt), part=part)


def attention_widget(lab: Engine, prompt: str, layer: int = 0, head: int = 0, *, part: bool = False) -> AttentionView:
    lab = engine_of(lab)
    view = AttentionView(n_layers=lab.n_layers, n_heads=lab.n_heads, layer=layer, head=head, part=part,
                         **attention_view(lab, prompt, layer, head))
    worker = lab.worker

    def select(layer, head):
        def done(d):
            view.pattern, view.title = d["pattern"], d["title"]
        worker.submit(f"attention:{id(view)}", lambda: attention_view(lab, prompt, layer, head), done, widget=view)

    view.on_select(select)
    return view


class Dashboard(Composite):
    """Heatmap + logits, then tabs: steering, logit lens and attention, for one clean/corrupt pair; one anywidget.
    `dashboard.explorer` (heatmap + logits), `.steering` (its controller; `.steering.panel`), `.lens`, `.attention`
    are the widgets as ever; they open no comm of their own (their state travels in the dashboard's)."""

    def __init__(self, lab: Engine, clean: str, corrupt: str, answer, wrong, site: str = "resid_pre",
                 by=("layer", "pos"), direction: str = "denoise", sweep: bool = True, progressive: bool = False):
        lab = engine_of(lab)
        session = PatchSession(lab, clean, corrupt, answer, wrong, site, tuple(by), direction)
        self.explorer = PatchExplorer(session, part=True)
        self.heatmap, self.logits = self.explorer.heatmap, self.explorer.logits
        self.steering = SteeringController(lab, corrupt, [clean], [corrupt], site="resid_post", part=True)
        self.lens = lens_widget(lab, clean, part=True)
        self.attention = attention_widget(lab, clean, part=True)
        super().__init__(
            {"heatmap": self.heatmap, "logits": self.logits, "steering": self.steering.panel, "lens": self.lens,
             "attention": self.attention},
            panes=[{"part": "heatmap"}, {"part": "logits"},
                   {"tabs": [{"title": "steering", "part": "steering"}, {"title": "logit lens", "part": "lens"},
                             {"title": "attention", "part": "attention"}]}])
        if sweep:  # progressive: the attribution estimate first, exact cells largest |estimate| first
            self.explorer.sweep(progressive=progressive)


def steering_panel(lab: Engine, prompt: str, positive: list[str], negative: list[str], site: str = "resid_post",
                   layer: int | None = None, alpha_range: tuple[float, float] = (-4.0, 4.0)) -> SteeringPanel:
    """A SteeringPanel wired to the lab (its controller stays reachable as panel.controller)."""
    lab = engine_of(lab)
    ctrl = SteeringController(lab, prompt, positive, negative, site, layer, alpha_range)
    ctrl.panel.controller = ctrl
    return ctrl.panel


def edges_for(scores, lab: Engine | None = None, clean=None, corrupt=None, metric=None, direction: str = "denoise",
              count: int | None = None, limit: int = 2000) -> CircuitGraph:
    """The circuit graph of an EdgeScores (scores.show(lab, clean, corrupt, metric)): the top `count` edges (20 by
    default) drawn and chosen; with the lab and the pair, a clicked edge is patched exactly on the lab's worker and
    the button evaluates the chosen circuit's faithfulness. Without them, the estimates only."""
    lab = engine_of(lab) if lab is not None else None
    view = CircuitGraph(**edge_graph(scores, limit))
    view.count = min(20, len(view.edges)) if count is None else count
    live = lab is not None and clean is not None and corrupt is not None and metric is not None
    if not live:
        view.status = "estimates only: scores.show(lab, clean, corrupt, metric) patches a clicked edge exactly"
    if getattr(scores, "method", "") == "exact":  # the scores are exact already: a click has nothing to compute
        view.exact = dict(zip(scores.edges, (float(v) for v in scores.scores.tolist())))

    def need_lab(what: str) -> None:
        if not live:
            raise RuntimeError(f"{what} needs the lab and the pair: scores.show(lab, clean, corrupt, metric)")

    def on_edge(edge: str) -> None:  # the comm thread: the patch runs on the worker
        if edge in view.exact:
            view.status = f"{edge}: exact {view.exact[edge]:.4g}"
            return
        need_lab("patching an edge")
        view.status = f"{edge}: patching..."
        t0 = time.perf_counter()

        def done(value):
            with view.hold_sync():
                view.exact = {**view.exact, edge: value}
                view.status = f"{edge}: exact {value:.4g}, in {1000 * (time.perf_counter() - t0):.0f} ms"
                view.error = ""

        lab.worker.submit(f"edge:{id(view)}", lambda: edge_exact(lab, clean, corrupt, metric, edge, direction),
                          done, widget=view)

    def on_node(node: str) -> None:  # the comm thread: the patch runs on the worker
        if node in view.node_exact or node == "logits":
            return
        need_lab("patching a node")
        view.status = f"{node}: patching its output..."

        def done(value):
            with view.hold_sync():
                view.node_exact = {**view.node_exact, node: value}
                view.status = f"{node}: its output patched, {view.metric_name} changes by {value:+.4g}"
                view.error = ""

        lab.worker.submit(f"node:{id(view)}", lambda: node_exact(lab, clean, corrupt, metric, node, direction),
                          done, widget=view)

    def on_circuit() -> None:
        need_lab("evaluating a circuit")
        chosen = view.shown()
        view.status = f"evaluating a circuit of {len(chosen)} edges..."
        t0 = time.perf_counter()

        def done(result):
            with view.hold_sync():
                view.circuit = result
                view.status = f"circuit of {result['n_edges']} edges evaluated in " \
                              f"{1000 * (time.perf_counter() - t0):.0f} ms"
                view.error = ""

        lab.worker.submit(f"circuit:{id(view)}", lambda: circuit_view(lab, clean, corrupt, metric, chosen), done,
                          widget=view)

    view.on_edge(on_edge)
    view.on_node(on_node)
    view.on_circuit(on_circuit)
    return view


display.register("sweep", heatmap_for)  # res.show() reaches the heatmap through the registry
display.register("edges", edges_for)
display.register("head_sweeps", lambda sweeps, lab=None: HeadSweepsView(sweeps, lab))
display.register("dla", lambda result, pos=-1: DLAView(result, pos))
display.register("path", lambda result: PathView(result))

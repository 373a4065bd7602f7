"""What the views show, as plain numbers: the logic behind the heatmap, logit panel, steering, lens and attention.

Everything here returns lists, dicts, floats and strings; the widgets (interplab.widgets) only display them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from . import edges as edges_
from .edits import Edit, SourceRef, patch, steer
from .engine import Engine, engine_of
from .errors import InterplabError
from .lens import logit_lens
from .metrics import as_metric, logit_diff
from .metrics import top_k as top_tokens
from .patching import Cells, SweepCancelled, SweepResult, patch_sweep  # noqa: F401 (SweepCancelled: for the widgets)
from .served import generate  # on the lab's vLLM engine when it has one
from .vectors import diff_of_means

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


@dataclass
class PatchSession:
    """A clean/corrupt pair (or a dataset of pairs, as tuples of prompts), a metric, and the edits a user has clicked
    on. With pairs, the logit panel shows the mean over them (`pair=None`) or pair number `pair`."""

    lab: Engine
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
    _tokens: list[str] | None = field(default=None, repr=False)

    def __post_init__(self):
        self.lab = engine_of(self.lab)
        self.lab.check_pair(self._as_run(self.clean), self._as_run(self.corrupt))
        self.metric = as_metric(self.metric or logit_diff(self.answer, self.wrong)).bind(self.lab.token_id)

    @property
    def base(self) -> str:
        return self.corrupt if self.direction == "denoise" else self.clean

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
            self._tokens = self.lab.to_str_tokens(self._first(self.clean))
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
            return f"mean over {self.n_pairs} pairs (next token after each prompt; pair 0: " \
                   f"{self._first(self.base)[-40:]!r})"
        return f"pair {self.pair} of {self.n_pairs}: next token after {self.base[self.pair][-60:]!r}"

    # ---- the sweep -------------------------------------------------------------------------------------------
    def sweep(self, **kw) -> SweepResult:
        self.result = patch_sweep(self.lab, self.clean, self.corrupt, self.site, self.by, self.metric,
                                  self.direction, **kw)
        return self.result

    def estimate(self, **kw) -> SweepResult:
        """The attribution estimate of this session's sweep (two runs): what a progressive sweep shows first."""
        return patch_sweep(self.lab, self.clean, self.corrupt, self.site, self.by, self.metric, self.direction,
                           method="attribution", progress=False, **kw)

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
        return Cells(tuple(self.by), tuple(range(self.lab.n_layers)), tuple(self.tokens()), self.lab.n_heads)

    def grid(self, result: SweepResult | None = None) -> dict:
        """Heatmap traits for a result: values as rows x cols, axis labels and titles."""
        res = result or self.result
        cells = res.cells
        return {"values": cells.grid(res.values).tolist(), "x_labels": cells.col_labels(),
                "y_labels": [f"L{l}" for l in res.labels["layer"]],
                "x_title": cells.col_title(), "y_title": "layer", "direction": res.direction,
                "key_cols": cells.key_cols(self.key_positions()),
                "metric_name": f"normalised {res.metric_name}",
                "title": f"{res.site}: {res.direction} ({res.method})"}

    def key_positions(self) -> list[int]:
        """Where the effect is: the positions at which the pair's tokens differ, and the last one."""
        clean, corrupt = self.tokens(), self.lab.to_str_tokens(self._first(self.corrupt))
        return [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b] + [len(clean) - 1]

    # ---- clicked cells -> edits ------------------------------------------------------------------------------
    def cell_edit(self, row: int, col: int) -> Edit:
        """The patch a heatmap cell stands for (source -> base at that layer / position / head)."""
        layer, pos, head = self.cells.meaning(row, col)
        # the source run caches the whole site once, so no click re-runs it
        source = self.lab.run(self._as_run(self.source), cache=[self.site], log=False)
        return patch(self.site, layer, pos=pos, head=head, source=source, label=self.cell_label(row, col))

    def cell_ref(self, row: int, col: int) -> Edit:
        """cell_edit's patch with its source named by prompt, built without a forward: what the log records when a
        click arrives (serialised exactly as cell_edit's, whose source is the run of that prompt)."""
        layer, pos, head = self.cells.meaning(row, col)
        return patch(self.site, layer, pos=pos, head=head, source=SourceRef(self.as_prompts(self.source)),
                     label=self.cell_label(row, col))

    def cell_label(self, row: int, col: int) -> str:
        """The label of a cell's patch, known without building it (a widget lists a clicked cell at once)."""
        layer, pos, head = self.cells.meaning(row, col)
        return f"patch {self.site} L{layer}" + (f" H{head}" if head is not None else "") + (
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
        lab = self.lab
        series, values = [], {}

        def shown(logits: torch.Tensor, name: str) -> None:
            # one pair's top tokens and metric, or (a dataset, pair None) the mean probabilities and mean metric
            per_pair = self.metric(logits)
            if self.pair is None:
                toks, probs = top_k_probs(lab, logits.float().softmax(-1).mean(0))
                values[name] = float(per_pair.mean())
            else:
                toks, probs = top_k(lab, logits[self.pair])
                values[name] = float(per_pair[self.pair])
            series.append({"name": name, "tokens": toks, "probs": probs})

        shown(lab.run(self._as_run(self.clean), log=False).last_logits, "clean")
        shown(lab.run(self._as_run(self.corrupt), log=False).last_logits, "corrupt")
        if edits:
            run = self.cell_run(cells[0]) if cells is not None and len(cells) == len(edits) == 1 else None
            if run is not None:
                ids, p, value = run
                toks, probs = [lab.tokenizer.decode([i]) for i in ids], [round(float(x), PROB_DIGITS) for x in p]
                if log:
                    lab.log.record(list(self.as_prompts(self.base)), edits, [])  # as if the forward had run
                series.append({"name": f"patched: {_short(edits)}", "tokens": toks, "probs": probs})
                values["patched"] = value
            else:
                patched = lab.last_logits(self._as_run(self.base), edits, log=log)
                shown(patched, "patched")
                series[-1]["name"] = f"patched: {_short(edits)}"
            denom = values["clean"] - values["corrupt"]
            if abs(denom) > 1e-9:
                values["normalised"] = (values["patched"] - values["corrupt"]) / denom
        return {"series": series, "metric": {"name": self.metric.name, "values": values}}

    @staticmethod
    def _as_run(prompts):
        return prompts if isinstance(prompts, str) else list(prompts)

    @staticmethod
    def as_prompts(prompts) -> tuple[str, ...]:
        """A prompt or a dataset's prompts, as a tuple (what the log records, a SourceRef names)."""
        return (prompts,) if isinstance(prompts, str) else tuple(prompts)

    def _own_exact(self, res: SweepResult | None) -> bool:
        """Whether res is this session's exact sweep (same pair, site, cells, direction, metric) with its runs."""
        return not (res is None or res.method != "exact" or self.n_pairs != 1 or len(res.clean) != 1
                    or res.clean[0] != self.clean
                    or res.corrupt[0] != self.corrupt or res.site != self.site or tuple(res.by) != tuple(self.by)
                    or res.direction != self.direction
                    or res.metric is not None and res.metric.name != self.metric.name or len(res.cell_runs) == 0)

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
        cells, decode, out = res.cells, self.lab.tokenizer.decode, []
        rows, cols = cells.grid(res.raw).shape
        for row in range(rows):
            for col in range(cols):
                run = res.cell_runs.get(cells.index(row, col))
                if run is None or len(run[0]) < TOP_K:
                    continue
                ids, p, value = run
                layer, pos, head = cells.meaning(row, col)
                name = "patched: " + " ".join(x for x in (f"L{layer}", "" if head is None else f"H{head}",
                                                          "" if pos is None else f"pos {pos}") if x)
                out.append([row, col, float(value), name, [decode([i]) for i in ids],
                            [round(float(x), PROB_DIGITS) for x in p]])
        return {"metric": self.metric.name, "cells": out}

    def warm(self) -> None:
        """Precompute what clicks reuse (the base prompt's cached residuals and keys/values)."""
        self.lab.warm(self._as_run(self.base))

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
    return " ".join(x for x in (f"L{e.layer}", "" if e.head is None else f"H{e.head}",
                                "" if e.pos is None else f"pos {e.pos}") if x)


# ---- steering, lens, attention ---------------------------------------------------------------------------------

def steering_preview(lab: Engine, prompt: str, vector: torch.Tensor | None, site: str, layer: int, alpha: float,
                     positions: str) -> list[dict]:
    """Next-token top-k without and with the steer (h + alpha * v) at the chosen positions."""
    lab = engine_of(lab)
    base = lab.run(prompt, log=False).last_logits[0]
    toks, probs = top_k(lab, base)
    out = [{"name": "base", "tokens": toks, "probs": probs}]
    if vector is not None:
        pos = {"all": None, "last": -1, "prompt": None}[positions]
        steered = lab.run(prompt, edits=[steer(site, layer, vector, alpha=alpha, pos=pos)], log=False).last_logits[0]
        toks, probs = top_k(lab, steered)
        out.append({"name": f"steered (alpha {alpha:g})", "tokens": toks, "probs": probs})
    return out


def steering_vector(lab: Engine, positive: list[str], negative: list[str], site: str, layer: int) -> torch.Tensor:
    """The steering vector mean(positive) - mean(negative) at (site, layer) (interplab.vectors.diff_of_means)."""
    lab = engine_of(lab)
    return diff_of_means(lab, positive, negative, site, layer)


def steering_generate(lab: Engine, prompt: str, vector: torch.Tensor | None, site: str, layer: int, alpha: float,
                      positions: str, max_new_tokens: int, cancel=None) -> str:
    lab = engine_of(lab)
    edits = []
    if vector is not None:
        pos = {"all": None, "last": "newest", "prompt": "prompt"}[positions]
        edits.append(steer(site, layer, vector, alpha=alpha, pos=pos))
    return generate(lab, prompt, edits, max_new_tokens=max_new_tokens, cancel=cancel).text


def lens_view(lab: Engine, prompt: str, k: int = 5) -> dict:
    lab = engine_of(lab)
    res = logit_lens(lab, prompt, k=k)
    top = [[cell[0] for cell in layer] for layer in res.top_tokens]
    probs = res.top_probs[..., 0].tolist()
    hover = [[" | ".join(f"{t!r} {p:.2f}" for t, p in zip(cell, ps)) for cell, ps in zip(layer, lp)]
             for layer, lp in zip(res.top_tokens, res.top_probs.tolist())]
    return {"x_labels": res.tokens, "y_labels": [f"L{l}" for l in range(res.n_layers)], "top_tokens": top,
            "probs": probs, "hover": hover, "title": f"logit lens ({res.site})"}


def attention_view(lab: Engine, prompt: str, layer: int, head: int) -> dict:
    lab = engine_of(lab)
    layer = lab.sites.layer_index(layer)
    lab.sites.check_head(head)
    run = lab.run(prompt, cache=[("pattern", layer)], log=False)
    return {"tokens": lab.to_str_tokens(prompt), "pattern": run.cache["pattern", layer][0, head].tolist(),
            "title": f"attention pattern L{layer} H{head}"}


# ---- the circuit graph: edges between components --------------------------------------------------------------
_WRITER = re.compile(r"embed|L(\d+)H(\d+)|MLP(\d+)")
_READER = re.compile(r"L(\d+)H(\d+)\.([qkv])|MLP(\d+)|logits")


def edge_graph(scores: edges_.EdgeScores, limit: int = 2000) -> dict:
    """An EdgeScores as the circuit graph's traits: its nodes (embed, heads, MLPs, logits, each with its layer) and
    its `limit` largest edges [name, writer, reader node, site, score], largest |score| first (GPT-2 small has
    ~35k edges: the page gets the ones a slider can reach, not megabytes)."""
    heads, layers, rows = set(), set(), []
    for name, score in zip(scores.edges, scores.scores.tolist()):
        writer, _, reader = name.partition(" -> ")
        w, r = _WRITER.fullmatch(writer), _READER.fullmatch(reader)
        if w is None or r is None:
            raise ValueError(f"edge {name!r}: expected 'writer -> reader' as interplab.edges names them")
        for m, (lh, hh, mlp) in ((w, (1, 2, 3)), (r, (1, 2, 4))):
            if m.group(lh) is not None:
                layers.add(int(m.group(lh)))
                heads.add(int(m.group(hh)))
            elif m.group(mlp) is not None:
                layers.add(int(m.group(mlp)))
        node, site = (f"L{r.group(1)}H{r.group(2)}", r.group(3)) if r.group(3) else (reader, "")
        score = float(score)
        rows.append([name, writer, node, site, score if math.isfinite(score) else 0.0])
    rows.sort(key=lambda e: -abs(e[4]))
    total, rows = len(rows), rows[:limit]
    n_layers, n_heads = max(layers, default=-1) + 1, max(heads, default=-1) + 1
    nodes = [{"name": "embed", "kind": "embed", "layer": -1, "index": 0}]
    for layer in range(n_layers):
        nodes += [{"name": f"L{layer}H{h}", "kind": "head", "layer": layer, "index": h} for h in range(n_heads)]
        nodes.append({"name": f"MLP{layer}", "kind": "mlp", "layer": layer, "index": n_heads})
    nodes.append({"name": "logits", "kind": "logits", "layer": n_layers, "index": 0})
    return {"nodes": nodes, "edges": rows, "method": scores.method, "metric_name": scores.metric_name,
            "base_value": scores.base_value, "source_value": scores.source_value,
            "title": f"edges by {scores.method}: {scores.metric_name}, base {scores.base_value:.4g} -> "
                     f"source {scores.source_value:.4g}" + (f" (the largest {limit} of {total} edges)"
                                                            if total > limit else "")}


def edge_exact(lab: Engine, clean, corrupt, metric, edge: str, direction: str = "denoise") -> float:
    """One edge patched exactly: metric(patched) - metric(base), as lab.edge_patch gives it."""
    lab = engine_of(lab)
    return float(edges_.edge_patch(lab, clean, corrupt, metric, edges=[edge], direction=direction).scores[0])


def node_exact(lab: Engine, clean, corrupt, metric, node: str, direction: str = "denoise") -> float | None:
    """A graph node's whole output patched, source into base at every position: metric(patched) - metric(base),
    the mean over pairs (the units of edge scores). "embed": the whole input, so the source run's own metric;
    "logits" reads, writes nothing: None."""
    lab = engine_of(lab)
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    bound = as_metric(metric).bind(lab.token_id)
    base_value = float(bound(lab.run(base, log=False).last_logits).mean())
    if node == "logits":
        return None
    if node == "embed":
        return float(bound(lab.run(source, log=False).last_logits).mean()) - base_value
    head = re.fullmatch(r"L(\d+)H(\d+)", node)
    mlp = re.fullmatch(r"MLP(\d+)", node)
    if head is None and mlp is None:
        raise InterplabError(f"node {node!r}: a head (L2H3), an MLP (MLP1), 'embed' or 'logits'")
    site, layer, h = ("z", int(head[1]), int(head[2])) if head else ("mlp_out", int(mlp[1]), None)
    src = lab.run(source, cache=[(site, layer)], log=False)
    patched = lab.last_logits(base, [patch(site, layer, head=h, source=src)], log=False)
    return float(bound(patched).mean()) - base_value


def circuit_view(lab: Engine, clean, corrupt, metric, edges: list[str]) -> dict:
    """A set of edges evaluated for faithfulness (lab.circuit), as plain numbers."""
    lab = engine_of(lab)
    r = edges_.circuit(lab, clean, corrupt, metric, list(edges))
    return {"n_edges": r.n_edges, "total_edges": r.total_edges, "value": r.value, "faithfulness": r.faithfulness,
            "clean_value": r.clean_value, "corrupt_value": r.corrupt_value}


# ---- direct logit attribution, path patching: results already computed, shown as plain numbers -------------------
def dla_view(res, pos: int = -1) -> dict:
    """A DLAResult at one position: the heads as heatmap traits (layers x heads), the other parts as bars, and the
    model's own metric at every position (a one-row heatmap: a click there picks the position)."""
    n_pos = int(res.total.shape[0])
    p = pos % n_pos
    heads = res.heads[:, :, p].float()
    n_layers, n_heads = heads.shape
    tok = res.tokens[p] if p < len(res.tokens) else str(p)
    labels = (["embed", "pos_embed"] + [f"attn bias L{layer}" for layer in range(n_layers)]
              + [f"MLP{layer}" for layer in range(n_layers)] + ["final bias", "heads (sum)", "total"])
    values = [res.embed[p], res.pos_embed[p], *res.attn_bias[:, p], *res.mlp[:, p], res.final_bias[p], heads.sum(),
              res.total[p]]
    return {
        "pos": p,
        "positions": {"values": [[float(v) for v in res.total.tolist()]], "x_labels": list(res.tokens),
                      "y_labels": ["total"], "x_title": "position (click: show it)", "y_title": "",
                      "title": f"{res.metric_name} at each position", "metric_name": res.metric_name,
                      "direction": "", "selected": [[0, p]]},
        "heads": {"values": heads.tolist(), "x_labels": [f"H{h}" for h in range(n_heads)],
                  "y_labels": [f"L{layer}" for layer in range(n_layers)], "x_title": "head", "y_title": "layer",
                  "title": f"each head's direct effect at position {p} ({tok!r})", "metric_name": res.metric_name,
                  "direction": ""},
        "parts": {"labels": labels, "values": [float(v) for v in values], "metric_name": res.metric_name,
                  "title": f"the other parts at position {p} ({tok!r}); they add up to the total"},
    }


def _receiver_label(group) -> str:
    return "logits" if group == "logits" else " + ".join(f"L{layer}H{head}.{site}" for layer, head, site in group)


def path_strongest(res) -> tuple[int, int]:
    """(row, col) of the sender with the largest |effect| (mean over the receiver groups) in path_view's grid."""
    values = res.values.float()
    grid = (values[0] if values.shape[0] == 1 else values.mean(0)).nan_to_num(0.0).abs()
    return divmod(int(grid.argmax()), grid.shape[1])


def path_view(res, row: int | None = None, col: int | None = None) -> dict:
    """A PathPatchResult: the senders as heatmap traits (layers x heads, + the MLP column), the mean over receiver
    groups when there are several; and, for the sender at (row, col), its effect through each group as bars."""
    values = res.values.float()
    grid = values[0] if values.shape[0] == 1 else values.mean(0)
    groups = [_receiver_label(g) for g in res.receivers]
    cols = [f"H{c}" if c != "MLP" else "MLP" for c in res.labels["cols"]]
    through = groups[0] if len(groups) == 1 else f"the mean over {len(groups)} receivers"
    out = {"heatmap": {"values": grid.tolist(), "x_labels": cols,
                       "y_labels": [f"L{layer}" for layer in res.labels["layers"]], "x_title": "sender",
                       "y_title": "layer", "title": f"path patching: each sender through {through}",
                       "metric_name": f"{res.metric_name} (normalised)",
                       "direction": res.direction}}
    if row is not None and col is not None:
        effect = [None if v != v else float(v) for v in values[:, row, col].tolist()]  # NaN: no path there
        out["bars"] = {"labels": groups, "values": effect,
                       "metric_name": f"{res.metric_name} (normalised)",
                       "title": f"{f'MLP{row}' if cols[col] == 'MLP' else f'L{row}{cols[col]}'} through each receiver"}
    else:
        out["bars"] = {"labels": groups, "values": [None] * len(groups), "metric_name": "",
                       "title": "click a sender: its effect through each receiver"}
    return out

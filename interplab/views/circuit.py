"""CircuitGraph: the edges between components as a graph; a slider picks the circuit, a click patches one edge.

Traits (all synced, set by Python only):
    nodes        [{name, kind, layer, index}]  kind: "embed" (layer -1), "head" (index = head), "mlp", "logits"
                 (layer = n_layers); drawn in rows by layer, the embeddings at the bottom, the logits on top
    edges        [[name, writer, reader, site, score], ...]  sorted by |score|, largest first; reader: the node read
                 ("L2H3" for "L2H3.q"), site: "q" | "k" | "v" | "" (an MLP's input, the logits)
    count        int   the top `count` edges are drawn and form the chosen circuit (the slider)
    selected     str   the last clicked edge ("" = none)
    exact        {edge: score}  exact edge patching of the clicked edges: metric(patched) - metric(base)
    circuit      {} or {n_edges, total_edges, value, faithfulness, clean_value, corrupt_value}: the chosen circuit
                 evaluated (every other edge carrying the corrupt run)
    node         str   the last clicked node ("" = none): its edges are highlighted
    node_exact   {node: score}  the clicked nodes' whole output patched (source into base, every position):
                 metric(patched) - metric(base)
    method, metric_name, title   str;   base_value, source_value   float | None
    status, error str

Requests from the frontend (protocol.json; each also carries its `id`) -> callbacks, called with keywords:
    {type:"threshold", count}   -> on_threshold(fn(count=))   (after `count` is set)
    {type:"edge", edge}         -> on_edge(fn(edge=))         (after `selected` is set; edge: a name in `edges`)
    {type:"node", node}         -> on_node(fn(node=))         (after `node` is set; node: a name in `nodes`)
    {type:"circuit"}            -> on_circuit(fn())           (evaluate the top `count` edges)
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

import traitlets as t

from .. import display
from ..analyses import edges as edges_
from ..edits import patch
from ..engine import Engine, engine_of
from ..errors import InterplabError
from ..metrics import as_metric
from ..widgets.base import Field, Int, LabWidget, MessageError, plain
from ..widgets.jobs import job

__all__ = ["CircuitGraph"]

NODE_KINDS = ("embed", "head", "mlp", "logits")
SITES = ("q", "k", "v", "")


class EdgeName(Field):
    """A string naming one of the graph's edges."""

    def __init__(self, names):
        self.names = names

    def check(self, key, value):
        if not isinstance(value, str) or value not in self.names:
            example = next(iter(self.names), "L0H1 -> L2H3.q")
            raise MessageError(f"{key!r}: {repr(value)[:60]} is not an edge of this graph ({len(self.names)} edges, "
                               f"e.g. {example!r})")
        return value


class NodeName(EdgeName):
    """A string naming one of the graph's nodes."""

    def check(self, key, value):
        if not isinstance(value, str) or value not in self.names:
            raise MessageError(f"{key!r}: {repr(value)[:60]} is not a node of this graph (e.g. 'L0H1', 'MLP0')")
        return value


class CircuitGraph(LabWidget):
    _view_kind = t.Unicode("circuit").tag(sync=True)
    REQUESTS = {
        "threshold": {"count": "int"},
        "edge": {"edge": "string"},
        "node": {"node": "string"},
        "circuit": {},
    }

    nodes = t.List().tag(sync=True)
    edges = t.List().tag(sync=True)
    count = t.Int(0).tag(sync=True)
    selected = t.Unicode("").tag(sync=True)
    exact = t.Dict().tag(sync=True)
    circuit = t.Dict().tag(sync=True)
    method = t.Unicode("").tag(sync=True)
    metric_name = t.Unicode("metric").tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    base_value = t.Float(None, allow_none=True).tag(sync=True)
    source_value = t.Float(None, allow_none=True).tag(sync=True)
    node = t.Unicode("").tag(sync=True)
    node_exact = t.Dict().tag(sync=True)

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._names: frozenset[str] = frozenset(e[0] for e in self.edges)
        self.observe(lambda _: setattr(self, "_names", frozenset(e[0] for e in self.edges)), "edges")

    # -- trait validation: plain JSON, the shapes the view reads ------------------------------------------------------
    @t.validate("nodes")
    def _v_nodes(self, proposal):
        out = []
        for n in plain(proposal["value"]):
            if not isinstance(n, dict) or not {"name", "kind", "layer"} <= set(n) or n["kind"] not in NODE_KINDS:
                raise t.TraitError(f"nodes: each a dict with name, kind (one of {NODE_KINDS}), layer; got {n!r}")
            out.append({"name": str(n["name"]), "kind": n["kind"], "layer": int(n["layer"]),
                        "index": int(n.get("index") or 0)})
        return out

    @t.validate("edges")
    def _v_edges(self, proposal):
        out = []
        for e in plain(proposal["value"]):
            e = plain(e)
            if not (isinstance(e, list) and len(e) == 5 and e[3] in SITES):
                raise t.TraitError(f"edges: each [name, writer, reader, site, score], site one of {SITES}; got {e!r}")
            score = float(e[4])
            out.append([str(e[0]), str(e[1]), str(e[2]), e[3], score if score == score else 0.0])
        return out

    @t.validate("count")
    def _v_count(self, proposal):
        return min(max(int(proposal["value"]), 0), len(self.edges))

    @t.validate("node_exact")
    def _v_node_exact(self, proposal):
        return {str(k): float(v) for k, v in dict(proposal["value"]).items()}

    @t.validate("exact")
    def _v_exact(self, proposal):
        return {str(k): float(v) for k, v in dict(proposal["value"]).items()}

    # -- requests --------------------------------------------------------------------------------------------------
    def _limits(self):
        return {"threshold": {"count": Int(1 if self.edges else 0, len(self.edges))},
                "edge": {"edge": EdgeName(self._names)},
                "node": {"node": NodeName(frozenset(n["name"] for n in self.nodes))}}

    def _handle_threshold(self, count: int) -> None:
        self.count = count

    def _handle_edge(self, edge: str) -> None:
        self.selected = edge

    def _handle_node(self, node: str) -> None:
        self.node = node

    def shown(self) -> list[str]:
        """The chosen circuit: the names of the top `count` edges."""
        return [e[0] for e in self.edges[: self.count]]

    def on_threshold(self, fn, remove: bool = False):
        """fn(count=) when the slider is let go (``count`` already set)."""
        return self._register("threshold", fn, remove)

    def on_edge(self, fn, remove: bool = False):
        """fn(edge=) when an edge is clicked (``selected`` already set)."""
        return self._register("edge", fn, remove)

    def on_node(self, fn, remove: bool = False):
        """fn(node=) when a node is clicked (``node`` already set)."""
        return self._register("node", fn, remove)

    def on_circuit(self, fn, remove: bool = False):
        """fn() when "evaluate the circuit" is clicked."""
        return self._register("circuit", fn, remove)


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
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
            raise ValueError(f"edge {name!r}: expected 'writer -> reader' as interplab.analyses.edges names them")
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
    engine = engine_of(lab)
    return float(edges_.edge_patch(engine, clean, corrupt, metric, edges=[edge], direction=direction).scores[0])


def node_exact(lab: Engine, clean, corrupt, metric, node: str, direction: str = "denoise") -> float | None:
    """A graph node's whole output patched, source into base at every position: metric(patched) - metric(base),
    the mean over pairs (the units of edge scores). "embed": the whole input, so the source run's own metric;
    "logits" reads, writes nothing: None."""
    engine = engine_of(lab)
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    bound = as_metric(metric).bind(engine.token_id)
    base_value = float(bound(engine.run(base, log=False).last_logits).mean())
    if node == "logits":
        return None
    if node == "embed":
        return float(bound(engine.run(source, log=False).last_logits).mean()) - base_value
    head = re.fullmatch(r"L(\d+)H(\d+)", node)
    mlp = re.fullmatch(r"MLP(\d+)", node)
    if head is None and mlp is None:
        raise InterplabError(f"node {node!r}: a head (L2H3), an MLP (MLP1), 'embed' or 'logits'")
    site, layer, h = ("z", int(head[1]), int(head[2])) if head else ("mlp_out", int(mlp[1]), None)
    src = engine.run(source, cache=[(site, layer)], log=False)
    patched = engine.last_logits(base, [patch(site, layer, head=h, source=src)], log=False)
    return float(bound(patched).mean()) - base_value


def circuit_view(lab: Engine, clean, corrupt, metric, edges: list[str]) -> dict:
    """A set of edges evaluated for faithfulness (lab.circuit), as plain numbers."""
    engine = engine_of(lab)
    r = edges_.circuit(engine, clean, corrupt, metric, list(edges))
    return {"n_edges": r.n_edges, "total_edges": r.total_edges, "value": r.value, "faithfulness": r.faithfulness,
            "clean_value": r.clean_value, "corrupt_value": r.corrupt_value}


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
def edges_for(scores, lab: Engine | None = None, clean=None, corrupt=None, metric=None, direction: str = "denoise",
              count: int | None = None, limit: int = 2000) -> CircuitGraph:
    """The circuit graph of an EdgeScores (scores.show(lab, clean, corrupt, metric)): the top `count` edges (20 by
    default) drawn and chosen; with the lab and the pair, a clicked edge is patched exactly on the lab's worker and
    the button evaluates the chosen circuit's faithfulness. Without them, the estimates only."""
    engine = engine_of(lab) if lab is not None else None
    view = CircuitGraph(**edge_graph(scores, limit))
    view.count = min(20, len(view.edges)) if count is None else count
    live = engine is not None and clean is not None and corrupt is not None and metric is not None
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

        def show(value):
            view.exact = {**view.exact, edge: value}
            view.status = f"{edge}: exact {value:.4g}, in {1000 * (time.perf_counter() - t0):.0f} ms"

        job(engine.worker, view, f"edge:{id(view)}",
            lambda: edge_exact(engine, clean, corrupt, metric, edge, direction),
            show)

    def on_node(node: str) -> None:  # the comm thread: the patch runs on the worker
        if node in view.node_exact or node == "logits":
            return
        need_lab("patching a node")
        view.status = f"{node}: patching its output..."

        def show(value):
            view.node_exact = {**view.node_exact, node: value}
            view.status = f"{node}: its output patched, {view.metric_name} changes by {value:+.4g}"

        job(engine.worker, view, f"node:{id(view)}",
            lambda: node_exact(engine, clean, corrupt, metric, node, direction),
            show)

    def on_circuit() -> None:
        need_lab("evaluating a circuit")
        chosen = view.shown()
        view.status = f"evaluating a circuit of {len(chosen)} edges..."
        t0 = time.perf_counter()

        def show(result):
            view.circuit = result
            view.status = f"circuit of {result['n_edges']} edges evaluated in "\
                          f"{1000 * (time.perf_counter() - t0):.0f} ms"

        job(engine.worker, view, f"circuit:{id(view)}",
            lambda: circuit_view(engine, clean, corrupt, metric, chosen), show)

    view.on_edge(on_edge)
    view.on_node(on_node)
    view.on_circuit(on_circuit)
    return view


display.register(edges_.EdgeScores, edges_for)

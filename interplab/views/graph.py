"""The graph view: an attribution graph (interplab.analyses.graph) drawn by layer x position, clickable.

    g = ilab.analyses.graph.attribution_graph(lab, prompt, ilab.Transcoders.load("ioi-tiny-transcoders"))
    g.show()                              # the pruned graph
    g.show(stats={0: s0, 1: s1, ...})     # each layer's ilab.analyses.feature_stats: densities, histograms, examples
    g.show(full=True)                     # every node of the graph (the page gets the strongest max_edges edges)

Rows: the token embeddings at the bottom, a row per layer, the logit nodes on top; columns: token positions. Edge
width by |weight|, colour by sign. Hover a node: what it is, its activation and influence, its density and top
contexts (from stats). Click: the node's page in the side panel (the feature page when stats are given: density, the
activation histogram, top examples and examples per activation band, the firing token marked; the node's direct
effects on the logit nodes; its strongest inputs and outputs). Shift-click pins nodes into a subgraph; pinned nodes
can be grouped into named supernodes. The intervention panel zeroes, scales or steers the pinned features (or the
selected one), or zeroes attention heads named in its box ("L2H0 L1H2"), and shows the live logits (g.intervene,
g.intervene_heads) beside what the graph predicted (g.predicted, g.predicted_heads).

Every number is computed here from the graph's public API; the page draws them. Requests that need the model (an
intervention) or the statistics (a page) run as jobs on the lab's worker.
"""

from __future__ import annotations

import re
import time

import traitlets as t

from .. import display
from ..analyses.feature_stats import DENSE
from ..analyses.graph import AttributionGraph
from ..errors import InterplabError, OutOfRangeError
from ..widgets.base import Field, Float, LabWidget, MessageError, Str
from ..widgets.jobs import job

__all__ = ["GraphView", "graph_traits", "node_page", "intervention", "show_graph"]

MAX_EDGES = 10000  # the page draws at most this many edges (the strongest): a full graph has ~n_nodes^2 / 2
SUMMARIES = 600  # hover summaries (density, top contexts) for at most this many features, the most influential
SUMMARY_CONTEXTS = 3
FACTOR = (-10.0, 10.0)
ALPHA = (-100.0, 100.0)  # a steer adds at most this much to a feature's activation
NODE_KINDS = ("feature", "error", "token", "logit")


class NodeIndex(Field):
    """An int naming one of the nodes the page was given (their index in the full graph)."""

    def __init__(self, indices):
        self.indices = indices

    def check(self, key, value):
        if value not in self.indices:
            raise MessageError(f"{key!r}: {value!r} is no node of this graph as shown ({len(self.indices)} nodes; "
                               f"g.nodes lists them)")
        return value


class GraphView(LabWidget):
    """Traits (kernel -> page): tokens; n_layers; nodes [[index, kind, layer, pos, feature, activation, influence],
    ...] (layer -1: a token's embedding, n_layers: a logit; feature -1 for all but features); edges [[source,
    target, weight], ...] strongest first; logit_tokens, logit_probs; summaries {"layer:feature": {density, mean, max,
    dense, top: [{tokens, at, act}]}}; selected (-1: none); pinned [index]; supernodes [{name, nodes}]; page (the
    selected node's: {node, stats, dense, logit_effects, inputs, outputs}); factor; intervention (the last one's
    numbers); title; dense_threshold.

    Requests (page -> kernel): select {node}, pin {node} (pins or unpins), group {name} (the pinned nodes become a
    supernode), ungroup {name}, intervene {factor} (the pinned features, or the selected one, scaled), steer
    {alpha} (their activations plus alpha), heads {names} (attention heads such as "L2H0 L1H2", their outputs
    zeroed)."""

    _view_kind = t.Unicode("graph").tag(sync=True)
    REQUESTS = {
        "select": {"node": "int"},
        "pin": {"node": "int"},
        "group": {"name": "string"},
        "ungroup": {"name": "string"},
        "intervene": {"factor": "number"},
        "steer": {"alpha": "number"},
        "heads": {"names": "string"},
    }

    tokens = t.List().tag(sync=True)
    n_layers = t.Int(0).tag(sync=True)
    nodes = t.List().tag(sync=True)
    edges = t.List().tag(sync=True)
    logit_tokens = t.List().tag(sync=True)
    logit_probs = t.List().tag(sync=True)
    summaries = t.Dict().tag(sync=True)
    selected = t.Int(-1).tag(sync=True)
    pinned = t.List().tag(sync=True)
    supernodes = t.List().tag(sync=True)
    page = t.Dict().tag(sync=True)
    factor = t.Float(0.0).tag(sync=True)
    intervention = t.Dict().tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    dense_threshold = t.Float(DENSE).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._indices = frozenset(int(n[0]) for n in self.nodes)
        self.observe(lambda _: setattr(self, "_indices", frozenset(int(n[0]) for n in self.nodes)), "nodes")

    def _limits(self):
        names = [s["name"] for s in self.supernodes]
        return {"select": {"node": NodeIndex(self._indices)}, "pin": {"node": NodeIndex(self._indices)},
                "group": {"name": Str(60, min_len=1)}, "ungroup": {"name": SupernodeName(names)},
                "intervene": {"factor": Float(*FACTOR)}, "steer": {"alpha": Float(*ALPHA)},
                "heads": {"names": Str(200, min_len=1)}}

    def _handle_select(self, node: int) -> None:
        self.selected = node

    def _handle_pin(self, node: int) -> None:
        self.pinned = [p for p in self.pinned if p != node] if node in self.pinned else [*self.pinned, node]

    def _handle_group(self, name: str) -> None:
        name = name.strip()
        if not name:
            raise MessageError("'name': a supernode needs a name that is not blank")
        if any(s["name"] == name for s in self.supernodes):
            raise MessageError(f"'name': a supernode {name!r} exists already: ungroup it or choose another name")
        if not self.pinned:
            raise MessageError("nothing to group: shift-click nodes to pin them first")
        grouped = {n for s in self.supernodes for n in s["nodes"]}
        members = [p for p in self.pinned if p not in grouped]
        if not members:
            raise MessageError("every pinned node is in a supernode already")
        self.supernodes = [*self.supernodes, {"name": name, "nodes": members}]

    def _handle_ungroup(self, name: str) -> None:
        self.supernodes = [s for s in self.supernodes if s["name"] != name]

    def on_select(self, fn, remove: bool = False):
        """fn(node=) after `selected` is set."""
        return self._register("select", fn, remove)

    def on_intervene(self, fn, remove: bool = False):
        """fn(factor=) when the intervention panel's button is pressed."""
        return self._register("intervene", fn, remove)

    def on_steer(self, fn, remove: bool = False):
        """fn(alpha=) when the intervention panel's Steer button is pressed."""
        return self._register("steer", fn, remove)

    def on_heads(self, fn, remove: bool = False):
        """fn(names=) when the intervention panel's Zero heads button is pressed."""
        return self._register("heads", fn, remove)

    def targets(self) -> list[int]:
        """The features an intervention acts on: the pinned feature nodes, else the selected one if a feature."""
        kinds = {int(n[0]): n[1] for n in self.nodes}
        pinned = [p for p in self.pinned if kinds.get(p) == "feature"]
        if pinned:
            return sorted(pinned)
        return [self.selected] if kinds.get(self.selected) == "feature" else []


class SupernodeName(Field):
    def __init__(self, names):
        self.names = names

    def check(self, key, value):
        if value not in self.names:
            there = ", ".join(map(repr, self.names)) or "none"
            raise MessageError(f"{key!r}: no supernode {value!r} (there are: {there})")
        return value


# ---- what the view shows, as plain numbers --------------------------------------------------------------------
def _layer_row(g: AttributionGraph, n: dict) -> int:
    return -1 if n["kind"] == "token" else g.n_layers if n["kind"] == "logit" else n["layer"]


def _stats_of(stats, layer):
    return None if stats is None or layer is None else stats.get(layer)


def graph_traits(g: AttributionGraph, stats: dict | None = None, *, full: bool = False,
                 max_edges: int = MAX_EDGES) -> dict:
    """The view's first picture: the nodes (pruned, or every node with full=True), the strongest `max_edges` edges
    among them, the logit nodes' tokens and probabilities and, with stats, a hover summary of the most influential
    features (density, mean, max, top contexts)."""
    if stats is not None and not isinstance(stats, dict):
        raise InterplabError(f"stats: a dict {{layer: ilab.analyses.feature_stats.feature_stats(...)}}, got "
                             f"{type(stats).__name__}")
    inf = g.influence()
    n_all = len(g.adjacency)
    if full:
        keep = [True] * n_all
        adj = g.adjacency
        t_idx, s_idx = adj.nonzero(as_tuple=True)
    else:
        keep_mask, edge_keep = g.prune()
        keep = keep_mask.tolist()
        t_idx, s_idx = edge_keep.nonzero(as_tuple=True)
    weights = g.adjacency[t_idx, s_idx]
    order = weights.abs().argsort(descending=True)[:max_edges]
    edges = [[int(s_idx[i]), int(t_idx[i]), float(weights[i])] for i in order.tolist()]
    nodes, feats = [], []
    for i in range(n_all):
        if not keep[i]:
            continue
        n = g.node(i)
        nodes.append([i, n["kind"], _layer_row(g, n), n["pos"], n.get("feature", -1), n.get("activation"),
                      float(inf[i])])
        if n["kind"] == "feature":
            feats.append((float(inf[i]), n["layer"], n["feature"]))
    summaries = {}
    for _, layer, f in sorted(feats, reverse=True):
        s = _stats_of(stats, layer)
        key = f"{layer}:{f}"
        if s is None or key in summaries:
            continue
        if len(summaries) >= SUMMARIES:
            break
        p = s.feature(f)
        summaries[key] = {"density": p["density"], "mean": p["mean"], "max": p["max"], "dense": p["density"] > DENSE,
                          "top": [{"tokens": e["tokens"], "at": e["at"], "act": e["act"]}
                                  for e in p["top"][:SUMMARY_CONTEXTS]]}
    n_shown = len(nodes)
    r, c = g.scores()
    title = (f"attribution graph of {g.prompt[-60:]!r}: {n_shown} of {n_all} nodes"
             + ("" if full else f" (pruned: node {g.node_threshold}, edge {g.edge_threshold})")
             + f", {len(edges)} edges" + (f" (the strongest {max_edges} of {len(t_idx)})" if len(t_idx) > max_edges
                                          else "")
             + f"; replacement {r:.3f}, completeness {c:.3f}")
    return {"tokens": list(g.tokens), "n_layers": g.n_layers, "nodes": nodes, "edges": edges,
            "logit_tokens": list(g.logit_tokens), "logit_probs": [float(p) for p in g.logit_probs],
            "summaries": summaries, "title": title}


def _label(n: dict) -> str:
    if n["kind"] == "feature":
        return f"L{n['layer']} F{n['feature']} @{n['pos']}"
    if n["kind"] == "error":
        return f"L{n['layer']} error @{n['pos']}"
    if n["kind"] == "token":
        return f"emb {n['token']!r} @{n['pos']}"
    return f"logit {n['token']!r}"


def node_page(g: AttributionGraph, i: int, stats: dict | None = None, k: int = 6) -> dict:
    """Node i's page: what it is (g.node, its influence), its feature page (stats[layer].feature) when stats hold its
    layer, whether it is dense, its direct effects on the logit nodes (the adjacency's logit rows), and its `k`
    strongest inputs and outputs in the full graph."""
    n = g.node(i)
    node = {"index": i, **n, "influence": float(g.influence()[i]), "label": _label(n)}
    s = _stats_of(stats, n["layer"]) if n["kind"] == "feature" else None
    feature_page = s.feature(n["feature"]) if s is not None else None
    col = g.adjacency[:, i]
    row = g.adjacency[i]
    ins = row.abs().argsort(descending=True)[:k].tolist()
    outs = col.abs().argsort(descending=True)[:k].tolist()
    return {"node": node, "stats": feature_page,
            "dense": feature_page is not None and feature_page["density"] > DENSE,
            "logit_effects": [[tok, float(g.adjacency[g.logit_start + j, i])] for j, tok in enumerate(g.logit_tokens)],
            "inputs": [[j, _label(g.node(j)), float(row[j])] for j in ins if row[j] != 0],
            "outputs": [[j, _label(g.node(j)), float(col[j])] for j in outs if col[j] != 0]}


def intervention(g: AttributionGraph, nodes: list[int], factor: float, add: float = 0.0) -> dict:
    """g.intervene(nodes, factor, add) as plain numbers, the logit nodes' tokens beside them."""
    out = g.intervene(nodes, factor, add)
    labels = [_label(g.node(int(i))) for i in out["nodes"]]
    what = f"{', '.join(labels)} " + (f"x {factor:g}" if add == 0 else f"+ {add:g} (steered)" if factor == 1
                                      else f"x {factor:g} + {add:g}")
    return {"nodes": [int(i) for i in out["nodes"]], "labels": labels, "what": what, "factor": out["factor"],
            "add": out["add"], **_numbers(g, out)}


def head_intervention(g: AttributionGraph, names: str) -> dict:
    """g.intervene_heads(heads named in `names`, e.g. "L2H0 L1H2") as plain numbers."""
    out = g.intervene_heads([n for n in re.split(r"[\s,;]+", names) if n])
    heads = [f"L{layer}H{h}" for layer, h in out["heads"]]
    return {"heads": heads, "what": f"heads {', '.join(heads)} zeroed", **_numbers(g, out)}


def _numbers(g: AttributionGraph, out: dict) -> dict:
    return {"tokens": list(g.logit_tokens), "before": out["before"], "after": out["after"], "real": out["real"],
            "direct": out["predicted"]["direct"], "total": out["predicted"]["total"],
            "top": [[tok, float(p)] for tok, p in out["top"]]}


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
def show_graph(g: AttributionGraph, stats: dict | None = None, *, full: bool = False,
               max_edges: int = MAX_EDGES) -> GraphView:
    """AttributionGraph.show(stats=None, full=False): the graph view (module docstring)."""
    view = GraphView(**graph_traits(g, stats, full=full, max_edges=max_edges))
    view.graph, view.stats = g, stats
    lab = g.lab
    if lab is None:
        view.status = ("a graph without its lab: pages and interventions need "
                       "ilab.analyses.graph.attribution_graph(lab, ...)")

    def worker():
        from ..engine import engine_of

        return engine_of(lab).worker

    def on_select(node: int) -> None:  # the comm thread: the page is computed on the worker
        if lab is None:
            view.page = node_page(g, node, stats)
            return

        def show(page):
            if view.selected == node:
                view.page = page

        job(worker(), view, f"page:{id(view)}", lambda: node_page(g, node, stats), show)

    def run(what: str, compute) -> None:
        """The intervention `compute` on the worker; its numbers become the panel's (the latest request wins)."""
        if lab is None:
            raise InterplabError("an intervention runs the model: build the graph with "
                                 "ilab.analyses.graph.attribution_graph(lab, ...)")
        view.status = f"{what}..."
        t0 = time.perf_counter()

        def show(out):
            view.intervention = out
            view.status = f"{what}: the model ran in {1000 * (time.perf_counter() - t0):.0f} ms"

        job(worker(), view, f"intervene:{id(view)}", compute, show)

    def features_to_edit() -> list[int]:
        targets = view.targets()
        if not targets:
            raise InterplabError("select a feature node (click) or pin features (shift-click) to intervene on")
        return targets

    def on_intervene(factor: float) -> None:
        targets = features_to_edit()
        view.factor = factor
        what = "zeroing" if factor == 0 else f"scaling by {factor:g}"
        run(f"{what} {len(targets)} feature{'s' if len(targets) > 1 else ''}",
            lambda: intervention(g, targets, factor))

    def on_steer(alpha: float) -> None:
        targets = features_to_edit()
        run(f"steering {len(targets)} feature{'s' if len(targets) > 1 else ''} by {alpha:g}",
            lambda: intervention(g, targets, 1.0, alpha))

    def on_heads(names: str) -> None:
        try:
            g.heads([n for n in re.split(r"[\s,;]+", names) if n])  # checked here: a bad name is the reply's error
        except OutOfRangeError as e:
            raise MessageError(f"'names': {e}") from None
        run(f"zeroing heads {names.strip()}", lambda: head_intervention(g, names))

    view.on_select(on_select)
    view.on_intervene(on_intervene)
    view.on_steer(on_steer)
    view.on_heads(on_heads)
    return view


display.register(AttributionGraph, show_graph)

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

from typing import Any

import traitlets as t

from .base import Field, Int, LabWidget, MessageError, plain

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

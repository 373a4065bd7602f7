"""Attention explained: which heads carry a graph's edge (OV), and what makes a head attend (QK).

    from interplab.analyses.attention_attribution import edge_heads, qk_attribution
    edge_heads(g, source, target)     # {(layer, head): the edge through that head alone, ...} + the rest
    qk_attribution(lab, prompt, tcs, layer=2, head=1, query=13, key=3)

Both work in the replacement model of interplab.analyses.graph (attention patterns and norms frozen, each MLP its
transcoder's features plus an error term), where everything between nodes is linear:
- edge_heads: the edge recomputed with every attention head's value path closed but one (a stop_grad on the other
  heads' outputs), for each head between the source's layer and the target's; and with every head closed (the
  residual stream alone, which carries an edge only within a position). Paths through two or more heads are what
  is left: edge - residual - the heads' sum.
- qk_attribution: the head's attention score s = (q_query . k_key) * scaling (before the softmax, as the model's
  attention function computes it) split over what the residual stream holds at the query position (the token's
  embedding, each earlier layer's attention output, each earlier transcoder feature (a cross-layer transcoder's
  through its decoders to the MLPs before the head's layer), each earlier skip term and error term) with
  the key side fixed, and over the key position's parts with the query side fixed. The score is bilinear in the two
  residuals, so each side's parts plus its bias term (the norm's and projection's biases) add up to the score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import edits
from ..engine import Engine, engine_of
from ..errors import InterplabError, OutOfRangeError
from ..transcoders import TRANSCODER_SETS, CrossLayerTranscoder, Transcoders
from .graph import AttributionGraph, Linearised


def _node(g: AttributionGraph, i, what: str) -> int:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(g.adjacency):
        raise OutOfRangeError(f"{what}={i!r}: a node index of this graph, 0..{len(g.adjacency) - 1} (g.nodes).")
    return i


def edge_heads(g: AttributionGraph, source: int, target: int) -> dict:
    """The edge source -> target split by the attention heads that carry it. Returns {"edge", "residual", "heads":
    {(layer, head): value}, "rest"}: each head's value is the edge with only that head's path open."""
    engine = engine_of(g.lab)
    s, t = _node(g, source, "source"), _node(g, target, "target")
    src, tgt = g.node(s), g.node(t)
    if src["kind"] == "logit" or tgt["kind"] in ("token", "error"):
        raise OutOfRangeError(f"an edge runs from a feature, error or token node to a feature or logit node; got "
                              f"{src['kind']} -> {tgt['kind']}.")
    if g.transcoders_obj is None:
        raise InterplabError("this graph does not hold its transcoders: build it with "
                             "ilab.analyses.graph.attribution_graph.")
    first = 0 if src["kind"] == "token" else src["layer"] + 1  # the first attention that reads the source
    last = tgt["layer"] if tgt["kind"] == "feature" else g.n_layers - 1
    heads = [(layer, h) for layer in range(first, last + 1) for h in range(engine.n_heads)]
    closed_all = [edits.stop_grad("z", layer, head=h) for layer, h in heads]

    def through(closed: list) -> float:
        lin = Linearised(engine, g.prompt, g.frozen_edits() + closed, g.features, g.logit_ids, g.transcoders_obj,
                         g.n_layers)
        row = t if t < g.n_features else g.n_features + (t - g.logit_start)
        grads_out, grad_embed = lin.gradients(torch.tensor([row]))
        return float(g.edge_from(s, grads_out, grad_embed, lin.embed)[0])

    out = {"edge": float(g.adjacency[t, s]), "residual": through(closed_all), "heads": {}}
    for layer, h in heads:
        out["heads"][layer, h] = through([e for e, lh in zip(closed_all, heads) if lh != (layer, h)])
    out["rest"] = out["edge"] - out["residual"] - sum(out["heads"].values())
    return out


@dataclass
class QKAttribution:
    """A head's attention score at (query, key), split over the parts of the residual stream at each side."""

    layer: int
    head: int
    query: int
    key: int
    score: float
    query_parts: list[tuple[str, float]]  # the query position's parts, key side fixed; largest first
    key_parts: list[tuple[str, float]]
    query_bias: float  # score minus the query parts' sum: the biases' share
    key_bias: float

    def __repr__(self) -> str:
        q = ", ".join(f"{n} {v:+.2f}" for n, v in self.query_parts[:4])
        k = ", ".join(f"{n} {v:+.2f}" for n, v in self.key_parts[:4])
        return (f"QKAttribution(L{self.layer}H{self.head} query {self.query} -> key {self.key}: score "
                f"{self.score:.3f}; query side: {q}; key side: {k})")


def qk_attribution(lab: Engine, prompt: str, transcoders: Transcoders | CrossLayerTranscoder, *, layer: int,
                   head: int, query: int, key: int) -> QKAttribution:
    """Head (layer, head)'s attention score from position query to position key, attributed to the token
    embedding, each earlier layer's attention output, each earlier transcoder feature and error term at each side."""
    engine = engine_of(lab)
    if not isinstance(transcoders, TRANSCODER_SETS):
        raise InterplabError(f"qk_attribution takes a transcoder set (ilab.Transcoders.load) or a cross-layer "
                             f"transcoder (ilab.CrossLayerTranscoder.load), got {type(transcoders).__name__}.")
    transcoders.check_fits(engine)
    n = len(engine.to_str_tokens(prompt))
    for name, v, hi in (("layer", layer, engine.n_layers), ("head", head, engine.n_heads), ("query", query, n),
                        ("key", key, n)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise OutOfRangeError(f"{name}={v!r}: an int in 0..{hi - 1}.")
    if key > query:
        raise OutOfRangeError(f"key={key} is after query={query}: a causal model's query attends to keys up to its "
                              f"own position.")
    rotary = engine.sites.arch is not None and engine.sites.arch.rotary
    q_site, k_site = ("rot_q", "rot_k") if rotary else ("q", "k")
    earlier = range(layer)
    leaves = [("attn_out", l_) for l_ in earlier] + [("mlp_out", l_) for l_ in earlier] + [("resid_pre", 0)]
    base = [edits.stop_grad("pattern", l_) for l_ in range(engine.n_layers)] \
        + [edits.stop_grad(site, l_) for site, l_ in leaves if site != "resid_pre"]
    attn = engine.model.get_submodule(engine.resolve("attn_out", layer).point.module)
    d_head = engine.d_head
    scaling = float(getattr(attn, "scaling", d_head ** -0.5))
    n_kv = engine.sites.n_kv_heads or engine.n_heads
    kv_head = head // (engine.n_heads // n_kv)
    plain = engine.run(prompt, cache=[("mlp_in", l_) for l_ in earlier], log=False)
    sides = {}
    for side, stopped, pos in (("query", k_site, query), ("key", q_site, key)):
        run = engine.run(prompt, base + [edits.stop_grad(stopped, layer)], cache=leaves + [(q_site, layer),
                         (k_site, layer)], grad=True, log=False, memo=False, frozen_norms=True)
        q = run.cache[q_site, layer][0, query, head * d_head:(head + 1) * d_head]
        k = run.cache[k_site, layer][0, key, kv_head * d_head:(kv_head + 1) * d_head]
        score = (q.float() @ k.float()) * scaling
        grads = torch.autograd.grad(score, [run.cache[x] for x in leaves], allow_unused=True)
        g = {x: (torch.zeros_like(run.cache[x]) if gr is None else gr)[0, pos].detach().float()
             for x, gr in zip(leaves, grads)}
        value = {x: run.cache[x][0, pos].detach().float() for x in leaves}
        parts = [("token", float(g["resid_pre", 0] @ value["resid_pre", 0]))]
        xs = [plain.cache["mlp_in", l_][0, pos].float() for l_ in earlier]
        acts = [transcoders.encode_at(l_, xs[l_]) for l_ in earlier]
        for l_ in earlier:
            parts.append((f"L{l_} attention", float(g["attn_out", l_] @ value["attn_out", l_])))
            for f in acts[l_].nonzero()[:, 0].tolist():  # through each decoder to an MLP before this layer
                parts.append((f"L{l_} F{f}", float(sum(acts[l_][f] * (g["mlp_out", t] @ W_dec[f].to(xs[l_].device))
                                                      for t, W_dec in transcoders.decoders_of(l_) if t < layer))))
            skip = transcoders.skip_at(l_)
            if skip is not None:
                parts.append((f"L{l_} skip", float(g["mlp_out", l_] @ (xs[l_] @ skip.to(xs[l_].device)))))
            err = value["mlp_out", l_] - transcoders.output_at(l_, acts, xs[l_])
            parts.append((f"L{l_} error", float(g["mlp_out", l_] @ err)))
        parts.sort(key=lambda p: -abs(p[1]))
        sides[side] = (float(score.detach()), parts)
    score, q_parts = sides["query"]
    _, k_parts = sides["key"]
    return QKAttribution(layer, head, query, key, score, q_parts, k_parts, score - sum(v for _, v in q_parts),
                         score - sum(v for _, v in k_parts))

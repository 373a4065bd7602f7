"""Attribution graphs over transcoders: which features write which, down to the logits (circuit-tracer's meaning).

    tcs = ilab.Transcoders.load("ioi-tiny-transcoders")   # or an ilab.CrossLayerTranscoder
    g = ilab.analyses.graph.attribution_graph(lab, "When Mary and John went to the store, John gave a drink", tcs)
    g.nodes, g.edges            # the pruned graph: node dicts, (source, target, weight) links
    g.scores()                  # (replacement score, completeness score)
    g.to_json()                 # the graph file circuit-tracer's and Neuronpedia's graph frontend reads

The replacement model (Ameisen et al. 2025, "Circuit tracing"): every MLP is replaced by its transcoder plus an
error term (the MLP's real output minus the transcoder's), attention patterns and every normalisation's scale are
frozen at the real run's values. With the error terms the replacement computes exactly the model's logits, and
between the nodes everything is linear, so each edge is a direct effect:
    source feature s (layer l', pos p', activation a_s) -> target: a_s * (W_dec[s] . d target / d mlp_out[l'][p'])
        (a cross-layer transcoder's feature: summed over its decoders W_dec[l' -> l] into every MLP l >= l')
    error node (l', p') -> target: err[l'][p'] . d target / d mlp_out[l'][p']
    token node p' -> target: resid_pre[0][p'] . d target / d resid_pre[0][p']   (token + position embedding)
where a feature target is its pre-activation (mlp_in[l][p] . W_enc[:, f]) and a logit target is the logit minus
the mean logit. Nodes are ordered [features, errors (layer-major), tokens, logits]; the adjacency's rows are targets
and its columns sources, as circuit-tracer's Graph. Gradients come from one forward and backward per chunk of
targets (the prompt repeated once per target), run by the engine with the patterns' gradients stopped, the norms
frozen (Engine.run(frozen_norms=True)) and each MLP's output a constant but for its transcoder's skip term x @ W_skip,
linear in the MLP's input x, through which gradients flow (Engine.run(linear_mlps=...); circuit-tracer's
skip + (mlp_out - skip).detach()). An error node is the MLP's output minus the transcoders' whole prediction
(decoders, b_dec and skip).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import torch

from .. import display, edits
from ..engine import Engine, engine_of
from ..errors import InterplabError, OutOfRangeError
from ..transcoders import TRANSCODER_SETS, CrossLayerTranscoder, Transcoders

NODE_THRESHOLD, EDGE_THRESHOLD = 0.8, 0.98  # circuit-tracer's defaults for prune_graph


@dataclass
class AttributionGraph:
    """The full (unpruned) graph of one prompt; pruning is a view of it (`prune`, `nodes`, `edges`)."""

    prompt: str
    tokens: list[str]
    features: torch.Tensor  # [n_features, 3] (layer, pos, feature) of every active feature
    activations: torch.Tensor  # [n_features]
    logit_ids: list[int]
    logit_tokens: list[str]
    logit_probs: torch.Tensor  # [n_logits]
    adjacency: torch.Tensor  # [n_nodes, n_nodes] rows: targets, columns: sources
    n_layers: int
    node_threshold: float = NODE_THRESHOLD
    edge_threshold: float = EDGE_THRESHOLD
    transcoders: str | None = None
    lab: object = field(default=None, repr=False)
    transcoders_obj: Transcoders | CrossLayerTranscoder | None = field(default=None, repr=False)
    errors: torch.Tensor | None = field(default=None, repr=False)  # [layer, pos, d] each MLP's error term

    def frozen_edits(self) -> list:
        """The edits that make a run the replacement model's linear part (norms are frozen by the run itself)."""
        return frozen_edits(self.n_layers)

    def edge_from(self, source: int, grads_out: list, grad_embed: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
        """[rows] the edge from node `source` to each row's target, given the targets' gradients at the MLP outputs
        ([layer] -> [rows, pos, d]) and at the first block's input ([rows, pos, d], whose value is embed)."""
        n = self.node(source)
        if n["kind"] == "feature":  # through each of its decoders (one per later MLP for a cross-layer transcoder)
            return sum(grads_out[layer][:, n["pos"]] @ (self.activations[source] * W_dec[n["feature"]])
                       for layer, W_dec in self.transcoders_obj.decoders_of(n["layer"]))
        if n["kind"] == "error":
            return grads_out[n["layer"]][:, n["pos"]] @ self.errors[n["layer"], n["pos"]]
        if n["kind"] == "token":
            return grad_embed[:, n["pos"]] @ embed[n["pos"]]
        raise OutOfRangeError(f"node {source} is a logit: logits are targets, not sources.")

    # ---- node index ranges ---------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.features)

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    @property
    def error_start(self) -> int:
        return self.n_features

    @property
    def token_start(self) -> int:
        return self.n_features + self.n_layers * self.n_pos

    @property
    def logit_start(self) -> int:
        return self.token_start + self.n_pos

    def logit_weights(self) -> torch.Tensor:
        w = torch.zeros(len(self.adjacency))
        w[self.logit_start:] = self.logit_probs
        return w

    def node(self, i: int) -> dict:
        """What node i is: its kind, layer, position and (for features) feature index and activation."""
        if i < self.error_start:
            layer, pos, feat = (int(v) for v in self.features[i])
            return {"kind": "feature", "layer": layer, "pos": pos, "feature": feat,
                    "activation": float(self.activations[i]), "token": self.tokens[pos]}
        if i < self.token_start:
            layer, pos = divmod(i - self.error_start, self.n_pos)
            return {"kind": "error", "layer": layer, "pos": pos, "token": self.tokens[pos]}
        if i < self.logit_start:
            pos = i - self.token_start
            return {"kind": "token", "layer": None, "pos": pos, "token": self.tokens[pos]}
        j = i - self.logit_start
        return {"kind": "logit", "layer": self.n_layers, "pos": self.n_pos - 1, "token": self.logit_tokens[j],
                "token_id": self.logit_ids[j], "prob": float(self.logit_probs[j])}

    def index(self, layer: int, pos: int, feature: int) -> int:
        """The node index of feature (layer, pos, feature); OutOfRangeError when it is not active here."""
        hit = ((self.features[:, 0] == layer) & (self.features[:, 1] == pos)
               & (self.features[:, 2] == feature)).nonzero()
        if len(hit) == 0:
            raise OutOfRangeError(f"feature {feature} of layer {layer} is not active at position {pos} of this "
                                  f"prompt, so it is no node of the graph: see g.nodes for the nodes there are.")
        return int(hit[0, 0])

    # ---- influence, pruning and scores (circuit-tracer's definitions) --------------------------------------
    def influence(self) -> torch.Tensor:
        """[n_nodes] each node's total influence on the logit nodes (weighted by their probabilities), through
        every path of the row-normalised absolute adjacency."""
        return influence(normalized(self.adjacency), self.logit_weights())

    def prune(self, node_threshold: float | None = None, edge_threshold: float | None = None):
        """(node_mask [n_nodes], edge_mask [n_nodes, n_nodes]): circuit-tracer's prune_graph. Features are kept by
        cumulative influence up to node_threshold, edges by cumulative influence-weighted score up to
        edge_threshold; tokens and logits always stay; then nodes left without edges are dropped."""
        nt = self.node_threshold if node_threshold is None else _fraction(node_threshold, "node_threshold")
        et = self.edge_threshold if edge_threshold is None else _fraction(edge_threshold, "edge_threshold")
        weights = self.logit_weights()
        node_inf = self.influence()
        keep = node_inf >= _threshold(node_inf, nt)
        keep[self.token_start:] = True
        pruned = self.adjacency.clone()
        pruned[~keep] = 0
        pruned[:, ~keep] = 0
        norm = normalized(pruned)
        scores = norm * (influence(norm, weights) + weights)[:, None]
        edge_keep = scores >= _threshold(scores.flatten(), et)
        last = None
        while last is None or not torch.equal(last, keep):
            last = keep.clone()
            edge_keep[~keep] = False
            edge_keep[:, ~keep] = False
            keep[:self.token_start] &= edge_keep[:, :self.token_start].any(0)  # features and errors send somewhere
            keep[:self.n_features] &= edge_keep[:self.n_features].any(1)  # features receive from somewhere
        return keep, edge_keep

    def scores(self) -> tuple[float, float]:
        """(replacement score, completeness score), circuit-tracer's compute_graph_scores: the share of the tokens'
        end-to-end influence that does not pass through error nodes, and the influence-weighted share of every
        node's inputs that come from features or tokens rather than errors."""
        weights = self.logit_weights()
        norm = normalized(self.adjacency)
        inf = influence(norm, weights)
        tokens = inf[self.token_start:self.logit_start].sum()
        errors = inf[self.error_start:self.token_start].sum()
        non_error = 1 - norm[:, self.error_start:self.token_start].sum(-1)
        out = inf + weights
        return float(tokens / (tokens + errors)), float((non_error * out).sum() / out.sum())

    @property
    def nodes(self) -> list[dict]:
        """The pruned graph's nodes (with their index in the full graph and their influence)."""
        keep, _ = self.prune()
        inf = self.influence()
        return [{"index": int(i), **self.node(int(i)), "influence": float(inf[i])} for i in keep.nonzero()[:, 0]]

    @property
    def edges(self) -> list[tuple[int, int, float]]:
        """The pruned graph's edges: (source index, target index, weight), strongest first."""
        _, edge_keep = self.prune()
        t, s = edge_keep.nonzero(as_tuple=True)
        w = self.adjacency[t, s]
        order = w.abs().argsort(descending=True)
        return [(int(s[i]), int(t[i]), float(w[i])) for i in order]

    def to_json(self, slug: str = "interplab-graph") -> str:
        """The pruned graph in the JSON circuit-tracer's create_graph_files writes and its (and Neuronpedia's)
        graph frontend reads: metadata, qParams, nodes (node_id 'layer_feature_pos', feature_type, ctx_idx,
        activation, influence, ...) and links (source, target, weight)."""
        keep, edge_keep = self.prune()
        inf = self.influence()
        ids, nodes = {}, []
        for i in keep.nonzero()[:, 0].tolist():
            n = self.node(i)
            layer = "E" if n["kind"] == "token" else n["layer"]
            if n["kind"] == "feature":
                node_id, feature, kind = f"{layer}_{n['feature']}_{n['pos']}", n["feature"], "cross layer transcoder"
            elif n["kind"] == "error":
                node_id, feature, kind = f"{layer}_{n['pos']}_{n['pos']}", None, "mlp reconstruction error"
            elif n["kind"] == "token":
                node_id, feature, kind = f"E_{n['pos']}_{n['pos']}", n["pos"], "embedding"
            else:
                node_id, feature, kind = f"{layer}_{n['token_id']}_{n['pos']}", n["token_id"], "logit"
            ids[i] = node_id
            nodes.append({"node_id": node_id, "feature": feature, "layer": str(layer), "ctx_idx": n["pos"],
                          "feature_type": kind, "jsNodeId": f"{node_id}-0", "run_idx": 0,
                          "reverse_ctx_idx": self.n_pos - 1 - n["pos"], "clerp": _clerp(n),
                          "token_prob": n.get("prob", 0.0), "is_target_logit": n["kind"] == "logit" and i ==
                          self.logit_start, "influence": float(inf[i]), "activation": n.get("activation")})
        t, s = edge_keep.nonzero(as_tuple=True)
        links = [{"source": ids[int(a)], "target": ids[int(b)], "weight": float(self.adjacency[b, a])}
                 for a, b in zip(s.tolist(), t.tolist())]
        meta = {"slug": slug, "scan": self.transcoders or "interplab", "prompt_tokens": self.tokens,
                "prompt": self.prompt, "node_threshold": self.node_threshold, "schema_version": 1,
                "info": {"creator_name": "interplab", "generator": {"name": "interplab"}}}
        q = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": None, "sg_pos": ""}
        return json.dumps({"metadata": meta, "qParams": q, "nodes": nodes, "links": links})

    # ---- interventions -------------------------------------------------------------------------------------
    def feature_nodes(self, nodes) -> list[int]:
        """Node indices of features, from indices or (layer, pos, feature) triples; OutOfRangeError for anything
        that is not a feature node of this graph."""
        if isinstance(nodes, (int, tuple)) and not isinstance(nodes, bool):
            nodes = [nodes]
        out = []
        for n in nodes:
            if isinstance(n, tuple) and len(n) == 3:
                out.append(self.index(*(int(v) for v in n)))
            elif isinstance(n, int) and not isinstance(n, bool) and 0 <= n < self.n_features:
                out.append(n)
            else:
                raise OutOfRangeError(f"node {n!r}: interventions act on feature nodes, given as node indices "
                                      f"0..{self.n_features - 1} or (layer, pos, feature); g.nodes lists them.")
        if not out:
            raise OutOfRangeError("no node given: pass feature nodes (indices or (layer, pos, feature)).")
        return sorted(set(out))

    def predicted(self, nodes, factor: float = 0.0, add: float = 0.0) -> dict:
        """What the graph predicts for the logit nodes when the features' activations a become factor * a + add
        (factor 0: ablated; factor 1 and add alpha: steered by alpha): 'direct' through the intervened features' own
        edges to the logits; 'total' also through every feature downstream, each responding linearly to its
        pre-activation's change (errors and tokens fixed). In units of each logit node's target: the logit minus the
        mean logit."""
        idx = self.feature_nodes(nodes)
        change = torch.zeros(self.n_features)
        # each intervened feature's relative change (edges are per unit of relative change: a_s * d target / d a_s)
        change[idx] = (float(factor) - 1.0) + float(add) / self.activations[idx].clamp(min=1e-12)
        to_logit = self.adjacency[self.logit_start:, :self.n_features]
        return {"direct": (to_logit @ change).tolist(),
                "total": (to_logit @ self._responding(change, fixed=change != 0)).tolist()}

    def _responding(self, start: torch.Tensor, fixed: torch.Tensor, pre: torch.Tensor | None = None) -> torch.Tensor:
        """Every feature's relative change once the features downstream respond linearly to their pre-activations'
        change: the `fixed` ones keep `start`; the others move by (their edges' sum [+ pre]) / activation."""
        to_feat = self.adjacency[:self.n_features, :self.n_features]
        acts = self.activations.clamp(min=1e-12)
        extra = torch.zeros(self.n_features) if pre is None else pre
        rel = start.clone()
        for _ in range(self.n_layers):  # features only read earlier layers: n_layers rounds reach the fixed point
            rel = torch.where(fixed, start, (to_feat @ rel + extra) / acts)
        return rel

    def intervene(self, nodes, factor: float = 0.0, add: float = 0.0) -> dict:
        """Run the model (everything live) with these features' activations a set to factor * a + add (factor 0:
        ablated; factor 1, add alpha: steered): each one's decoder vector times the change added to its MLP's output
        at its position. Returns the logit nodes' targets (logit minus mean logit) before and after, the graph's
        prediction (`predicted`) and the new top tokens."""
        if self.transcoders_obj is None:
            raise InterplabError("this graph does not hold its transcoders (made elsewhere): build it with "
                                 "ilab.analyses.graph.attribution_graph to intervene.")
        for name, v in (("factor", factor), ("add", add)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or abs(v) == float("inf"):
                raise OutOfRangeError(f"{name}={v!r}: a finite number (factor 0 ablates, 1 leaves as is, 2 doubles; "
                                      f"add steers by that much).")
        idx = self.feature_nodes(nodes)
        vectors: dict[tuple[int, int], torch.Tensor] = {}
        for i in idx:
            layer, pos, feat = (int(v) for v in self.features[i])
            delta = (float(factor) - 1.0) * float(self.activations[i]) + float(add)
            for target, W_dec in self.transcoders_obj.decoders_of(layer):  # every MLP the feature writes to
                vectors[target, pos] = vectors.get((target, pos), 0) + delta * W_dec[feat]
        steers = [edits.steer("mlp_out", layer, vector=v, pos=pos) for (layer, pos), v in vectors.items()]
        out = self._live(steers)
        return {"nodes": idx, "factor": float(factor), "add": float(add), **out,
                "predicted": self.predicted(idx, factor, add)}

    def heads(self, heads) -> list[tuple[int, int]]:
        """(layer, head) pairs from pairs or names such as "L2H0"; OutOfRangeError for any other."""
        engine = engine_of(self.lab)
        if isinstance(heads, (str, tuple)):
            heads = [heads]
        out = []
        for h in heads:
            name = h
            if isinstance(h, str):
                m = re.fullmatch(r"\s*L(\d+)\s*H(\d+)\s*", h, flags=re.IGNORECASE)
                h = (int(m.group(1)), int(m.group(2))) if m else None
            if not (isinstance(h, tuple) and len(h) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 for v in h)
                    and 0 <= h[0] < self.n_layers and 0 <= h[1] < engine.n_heads):
                raise OutOfRangeError(f"head {name!r}: a (layer, head) pair or a name like 'L2H0', layer in "
                                      f"0..{self.n_layers - 1}, head in 0..{engine.n_heads - 1}.")
            out.append(h)
        if not out:
            raise OutOfRangeError("no head given: pass (layer, head) pairs or names like 'L2H0'.")
        return sorted(set(out))

    def predicted_heads(self, heads) -> dict:
        """What the graph predicts for the logit nodes when these attention heads' outputs are removed (their z
        zeroed at every position, as intervene_heads does live): 'direct' with every feature fixed, 'total' with the
        active features responding linearly to their pre-activations' change, to the fixed point. Both exact in the
        replacement model, which is linear in a head's output: the removed heads' z are cut from the graph (no path
        runs through them) and tangents pushed forward through it (J @ v by a double backward), one product giving
        every feature's pre-activation and every logit target at once."""
        heads = self.heads(heads)
        if self.transcoders_obj is None:
            raise InterplabError("this graph does not hold its transcoders: build it with "
                                 "ilab.analyses.graph.attribution_graph.")
        engine = engine_of(self.lab)
        layers = sorted({layer for layer, _ in heads})
        cut = [edits.stop_grad("z", layer, head=h) for layer, h in heads]
        lin = Linearised(engine, self.prompt, self.frozen_edits() + cut, self.features, self.logit_ids,
                         self.transcoders_obj, self.n_layers, also=[("z", layer) for layer in layers])
        zs = [lin.cache["z", layer] for layer in layers]
        outs = lin.inputs[:self.n_layers]  # each MLP's output: where a feature's change enters
        removal = []
        for layer, z in zip(layers, zs):
            d_head = z.shape[-1] // engine.n_heads
            mask = torch.zeros(z.shape[-1], dtype=z.dtype, device=z.device)
            for hl, h in heads:
                if hl == layer:
                    mask[h * d_head:(h + 1) * d_head] = 1
            removal.append(-(z.detach() * mask))
        targets = torch.cat(lin.groups)
        u = torch.zeros_like(targets, requires_grad=True)
        back = torch.autograd.grad(targets, zs + outs, grad_outputs=u, create_graph=True, allow_unused=True)

        def push(tangents: list) -> torch.Tensor:  # J @ tangents: the change of every target
            used = [(b, t) for b, t in zip(back, tangents) if b is not None]
            return torch.autograd.grad([b for b, _ in used], u, grad_outputs=[t for _, t in used],
                                       retain_graph=True)[0].detach().float().cpu()

        feats = self.features
        delta = torch.zeros(self.n_features)  # each active feature's activation change
        direct = None
        for _ in range(self.n_layers + 1):  # features read only earlier layers: n_layers + 1 rounds are exact
            moved = [torch.zeros_like(o) for o in outs]
            for layer in range(self.n_layers):
                here = (feats[:, 0] == layer).nonzero()[:, 0]
                if not len(here) or delta[here].abs().max() == 0:
                    continue
                for target, W_dec in self.transcoders_obj.decoders_of(layer):  # every MLP the feature writes to
                    dec = W_dec[feats[here, 2]].to(moved[target])
                    moved[target][0].index_add_(0, feats[here, 1].to(moved[target].device),
                                                delta[here].to(dec)[:, None] * dec)
            change = push(removal + moved)
            if direct is None:
                direct = change[self.n_features:]
            delta = change[:self.n_features]  # a feature's activation moves with its pre-activation
        return {"direct": direct.tolist(), "total": change[self.n_features:].tolist()}

    def intervene_heads(self, heads) -> dict:
        """Run the model (everything live) with these heads' outputs zeroed at every position; the logit nodes'
        targets before and after, and the graph's prediction (`predicted_heads`)."""
        heads = self.heads(heads)
        out = self._live([edits.zero("z", layer, head=h) for layer, h in heads])
        return {"heads": heads, **out, "predicted": self.predicted_heads(heads)}

    def _live(self, edit_list: list) -> dict:
        """The logit nodes' targets of the real model as is and with these edits, and the edited run's top tokens."""
        from ..metrics import top_k

        engine = engine_of(self.lab)
        before = engine.run(self.prompt, log=False).last_logits[0].float()
        after = engine.run(self.prompt, edit_list, log=False, memo=False).last_logits[0].float()
        target = lambda logits: [float(logits[i] - logits.mean()) for i in self.logit_ids]  # noqa: E731
        ids, probs = top_k(after[None], 5)
        tokens = [engine.to_string([i]) for i in ids[0]]
        return {"before": target(before), "after": target(after),
                "real": [a - b for a, b in zip(target(after), target(before))], "top": list(zip(tokens, probs[0]))}

    def show(self, **kw):
        """The graph view (interplab.views.graph)."""
        return display.view(self, **kw)

    def __repr__(self) -> str:
        keep, edge_keep = self.prune()
        r, c = self.scores()
        return (f"AttributionGraph({self.prompt!r}: {self.n_features} active features, {len(self.adjacency)} nodes; "
                f"pruned {int(keep.sum())} nodes, {int(edge_keep.sum())} edges; replacement {r:.3f}, "
                f"completeness {c:.3f})")


def _clerp(n: dict) -> str:
    if n["kind"] == "feature":
        return f"L{n['layer']} F{n['feature']} at {n['token']!r}"
    if n["kind"] == "error":
        return f"L{n['layer']} error at {n['token']!r}"
    if n["kind"] == "token":
        return f"token {n['token']!r}"
    return f"logit {n['token']!r} (p={n['prob']:.3f})"


def normalized(matrix: torch.Tensor) -> torch.Tensor:
    """|matrix| with each row divided by its sum (rows of zeros stay zero)."""
    a = matrix.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(norm: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """weights @ (A + A^2 + ...): the graph is acyclic, so the series ends (A is nilpotent)."""
    step = weights @ norm
    total = step.clone()
    for _ in range(max_iter):
        if not step.any():
            return total
        step = step @ norm
        total += step
    raise InterplabError("influence did not converge: the adjacency is not acyclic.")


def _threshold(scores: torch.Tensor, fraction: float) -> torch.Tensor:
    """The score at which the sorted scores' cumulative share first reaches fraction."""
    ordered = scores.sort(descending=True).values
    share = ordered.cumsum(0) / ordered.sum()
    i = min(int(torch.searchsorted(share, torch.tensor(fraction, dtype=share.dtype))), len(ordered) - 1)
    return ordered[i]


def _fraction(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise OutOfRangeError(f"{name}={v!r}: a fraction of the total influence, in (0, 1] (circuit-tracer's "
                              f"defaults: node 0.8, edge 0.98).")
    return float(v)


def _positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise OutOfRangeError(f"{name}={v!r}: an int >= 1.")
    return v


def attribution_graph(lab: Engine, prompt: str, transcoders: Transcoders, *, max_n_logits: int = 10,
                      desired_logit_prob: float = 0.95, max_feature_nodes: int | None = None,
                      batch_size: int | None = None, budget_mb: int = 512,
                      node_threshold: float = NODE_THRESHOLD, edge_threshold: float = EDGE_THRESHOLD,
                      progress: bool = True) -> AttributionGraph:
    """The attribution graph of one prompt over per-layer transcoders (ilab.Transcoders, with or without skip terms)
    or a cross-layer transcoder (ilab.CrossLayerTranscoder): circuit-tracer's `attribute`.

    max_n_logits, desired_logit_prob: the logit nodes are the most likely next tokens, as few as reach
        desired_logit_prob of the probability, at most max_n_logits (circuit-tracer's defaults: 10, 0.95).
    max_feature_nodes: at most this many features become nodes, chosen as circuit-tracer does: the logits' rows
        first, then a batch at a time the features the rows so far give the most influence on the logits. None: all.
        The graph's memory is (kept features + errors + tokens)^2 plus these rows over every active feature.
    batch_size: targets per backward pass; by default as many as budget_mb (the gradients a batch holds) allows.
    node_threshold, edge_threshold: the pruning that g.nodes, g.edges and g.to_json() show (g.prune(...) for
        others)."""
    engine = engine_of(lab)
    if not isinstance(transcoders, TRANSCODER_SETS):
        raise InterplabError(f"attribution_graph takes a transcoder set (ilab.Transcoders.load(...)) or a cross-layer "
                             f"transcoder (ilab.CrossLayerTranscoder.load(...)), got {type(transcoders).__name__}.")
    if not isinstance(prompt, str) or not prompt:
        raise InterplabError(f"attribution_graph takes one prompt (a non-empty string), got {prompt!r}.")
    transcoders.check_fits(engine)
    _positive_int(max_n_logits, "max_n_logits")
    if batch_size is not None:
        _positive_int(batch_size, "batch_size")
    if max_feature_nodes is not None:
        _positive_int(max_feature_nodes, "max_feature_nodes")
    _positive_int(budget_mb, "budget_mb")
    if isinstance(desired_logit_prob, bool) or not isinstance(desired_logit_prob, (int, float)) \
            or not 0 < desired_logit_prob <= 1:
        raise OutOfRangeError(f"desired_logit_prob={desired_logit_prob!r}: a probability in (0, 1].")
    node_threshold, edge_threshold = (_fraction(node_threshold, "node_threshold"),
                                      _fraction(edge_threshold, "edge_threshold"))
    n_layers = engine.n_layers
    sites = [("mlp_in", layer) for layer in range(n_layers)] + [("mlp_out", layer) for layer in range(n_layers)]
    run = engine.run(prompt, cache=sites, log=False)
    with torch.no_grad():
        x_in = [run.cache["mlp_in", layer][0].float() for layer in range(n_layers)]
        acts = [transcoders.encode_at(layer, x_in[layer]) for layer in range(n_layers)]  # [pos, d_tc]
        errors = torch.stack([run.cache["mlp_out", layer][0].float() - transcoders.output_at(layer, acts, x_in[layer])
                              for layer in range(n_layers)])  # [layer, pos, d]
        stacked = torch.stack(acts)  # [layer, pos, d_tc]
        features = stacked.nonzero()  # (layer, pos, feature), in that order
        activations = stacked[features[:, 0], features[:, 1], features[:, 2]]
        # the graph lives on the host (the gradients come there a batch at a time), whatever runs the model
        errors, features, activations = errors.cpu(), features.cpu(), activations.cpu()
        probs = run.last_logits[0].float().softmax(-1)
        top_p, top_i = probs.topk(min(max_n_logits, len(probs)))
        n_logits = min(int((top_p.cumsum(0) < desired_logit_prob).sum()) + 1, len(top_p))
        logit_ids, logit_probs = top_i[:n_logits].tolist(), top_p[:n_logits].clone()
    n_pos, n_active = len(x_in[0]), len(features)
    replacement = Linearised(engine, prompt, frozen_edits(n_layers), features, logit_ids, transcoders, n_layers)
    if batch_size is None:  # per row: the gradients at every MLP output and the input, and one layer's decoder scores
        d_tc = transcoders.d_tc
        row_bytes = 4 * n_pos * ((n_layers + 1) * engine.d_model + d_tc)
        batch_size = max(1, min(64, budget_mb * 2 ** 20 // row_bytes))  # (larger batches ran slower per row)
    sources = _Sources(features, activations, errors, replacement.embed, transcoders, n_layers, n_pos)
    n_rows = n_active if max_feature_nodes is None else min(max_feature_nodes, n_active)
    # rows: computed targets (first the logits, then features); columns: every active feature, errors, tokens
    rows = torch.zeros(n_logits + n_rows, sources.n_cols)
    row_target = torch.empty(n_logits + n_rows, dtype=torch.long)  # each row's target: a feature or n_active + j
    bar = _bar(n_logits + n_rows, progress)
    done = 0

    def compute(targets: torch.Tensor) -> None:
        nonlocal done
        for start in range(0, len(targets), batch_size):
            chunk = targets[start:start + batch_size]
            grads_out, grad_embed = replacement.gradients(chunk)
            rows[done:done + len(chunk)] = sources.edges(grads_out, grad_embed)
            row_target[done:done + len(chunk)] = chunk
            done += len(chunk)
            _advance(bar, len(chunk))

    try:
        compute(torch.arange(n_active, n_active + n_logits))
        if n_rows == n_active:
            compute(torch.arange(n_active))
        else:  # circuit-tracer's order: the features the rows so far say influence the logits most, a batch at a time
            chosen = torch.zeros(n_active, dtype=torch.bool)
            while done < n_logits + n_rows:
                inf = _partial_influence(rows[:done], row_target[:done], logit_probs, n_active, sources.n_cols)
                inf[chosen] = -1
                pick = inf.topk(min(batch_size, n_logits + n_rows - done)).indices
                chosen[pick] = True
                compute(pick)
    finally:
        if bar is not None:
            bar.close()
    # the graph: the computed features (in layer, pos, feature order), errors, tokens, logits; square
    kept = row_target[n_logits:].sort().values
    cols = torch.cat([kept, torch.arange(n_active, sources.n_cols)])
    n_feat = len(kept)
    n_nodes = n_feat + n_layers * n_pos + n_pos + n_logits
    adjacency = torch.zeros(n_nodes, n_nodes)
    where = torch.full((n_active,), -1, dtype=torch.long)
    where[kept] = torch.arange(n_feat)
    is_feat = row_target < n_active
    targets = torch.where(is_feat, where[row_target.clamp(max=n_active - 1)],
                          row_target - n_active + n_nodes - n_logits)
    adjacency[targets, :n_nodes - n_logits] = rows[:, cols]
    features, activations = features[kept], activations[kept]
    tokens = engine.to_str_tokens(prompt)
    return AttributionGraph(prompt, tokens, features, activations, logit_ids,
                            [engine.to_string([i]) for i in logit_ids], logit_probs, adjacency, n_layers,
                            node_threshold, edge_threshold, transcoders.source, lab, transcoders, errors)


class _Sources:
    """Every source node's edge to a batch of targets: the active features (a_s * W_dec[s] . gradient at its MLP's
    output and position, summed over its decoders: a cross-layer transcoder's feature writes to every later MLP),
    the error terms, the tokens. Columns: active features, errors (layer-major), tokens."""

    def __init__(self, features, activations, errors, embed, transcoders, n_layers: int, n_pos: int):
        self.features, self.activations, self.errors, self.embed = features, activations, errors, embed
        self.transcoders, self.n_layers, self.n_pos = transcoders, n_layers, n_pos
        self.by_layer = [(features[:, 0] == layer).nonzero()[:, 0] for layer in range(n_layers)]
        # per layer, per position with active features: (pos, their columns, their dictionary indices)
        self.at = [[(p, here[features[here, 1] == p], features[here[features[here, 1] == p], 2])
                    for p in features[here, 1].unique().tolist()] for here in self.by_layer]
        self.n_cols = len(features) + n_layers * n_pos + n_pos

    def edges(self, grads_out: list, grad_embed: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            n_active = len(self.features)
            out = torch.zeros(len(grad_embed), self.n_cols)
            for layer in range(self.n_layers):
                g = grads_out[layer]  # [rows, pos, d]
                decoders = self.transcoders.decoders_of(layer)
                # the gradient at each position against the decoders of the features active there only (not every
                # feature at every position: 30x fewer products on ioi-tiny, ~100x on a GPT-2 small)
                for pos, cols, feats in self.at[layer]:
                    score = sum(grads_out[target][:, pos] @ W_dec[feats].to(g.dtype).T for target, W_dec in decoders)
                    out[:, cols] = score * self.activations[cols]
                e0 = n_active + layer * self.n_pos
                out[:, e0:e0 + self.n_pos] = (g * self.errors[layer]).sum(-1)
            out[:, n_active + self.n_layers * self.n_pos:] = (grad_embed * self.embed).sum(-1)
            return out


_BLOCK = 512  # rows of the partial graph normalised at a time


def _partial_influence(rows: torch.Tensor, row_target: torch.Tensor, logit_probs: torch.Tensor, n_active: int,
                       n_cols: int) -> torch.Tensor:
    """[n_active] each active feature's influence on the logits through the rows computed so far (circuit-tracer's
    compute_partial_influences: the row-normalised |rows| iterated from the logits' probabilities)."""
    # row-normalised |rows|, a block of rows at a time: no copy of the whole matrix (7,500 rows at 256 tokens of a
    # GPT-2 small are 0.8 GB), the row sums once
    sums = torch.cat([rows[i:i + _BLOCK].abs().sum(1) for i in range(0, len(rows), _BLOCK)]).clamp(min=1e-10)

    def times_norm(weights: torch.Tensor) -> torch.Tensor:  # weights @ normalized(rows)
        w = weights / sums
        out = torch.zeros(n_cols)
        for i in range(0, len(rows), _BLOCK):
            if w[i:i + _BLOCK].any():
                out += w[i:i + _BLOCK] @ rows[i:i + _BLOCK].abs()
        return out

    # node space: the columns, then one slot per logit; each row's target in it
    slot = torch.where(row_target < n_active, row_target, row_target - n_active + n_cols)
    vec = torch.zeros(n_cols + len(logit_probs))
    vec[n_cols:] = logit_probs
    total = torch.zeros(n_cols)
    for _ in range(1000):
        step = times_norm(vec[slot])
        if not step.any():
            break
        total += step
        vec = torch.zeros_like(vec)
        vec[:n_cols] = step
    return total[:n_active]


def frozen_edits(n_layers: int) -> list:
    """Attention patterns frozen (no gradient through them). (Each MLP's output is frozen by Linearised's run: a
    constant, its transcoder's features and error term, plus its skip term, linear in the MLP's input.)"""
    return [edits.stop_grad("pattern", layer) for layer in range(n_layers)]


def _rows_at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x[positions] ([pos, d] -> [n, d]), in a form whose backward a batched backward runs at once: an indexing's
    backward (a scatter) runs once per target row under is_grads_batched. A one-hot product where it is cheap (a
    small model: the whole graph ran 1.3x faster), the scatter where the product would cost more than it saves."""
    n, (t, d) = len(positions), x.shape
    if n * t * d > _ONE_HOT_MAX:
        return x.index_select(0, positions.to(x.device))
    one_hot = torch.zeros(n, t, dtype=x.dtype, device=x.device)
    one_hot[torch.arange(n), positions.to(x.device)] = 1
    return one_hot @ x


_ONE_HOT_MAX = 1 << 24  # multiply-adds per target row


class Linearised:
    """One forward of the replacement model's linear part: patterns' gradients stopped, norms frozen, each MLP's
    output a constant in gradient but for its transcoder's skip term, linear in the MLP's input (circuit-tracer's
    skip + (mlp_out - skip).detach()); the values are the model's own. Its targets are every active feature's
    pre-activation and each logit node's logit minus the mean logit; `gradients(rows)` backpropagates a chunk of
    them at once (a batched vector-Jacobian product over the one graph)."""

    def __init__(self, engine: Engine, prompt: str, frozen: list, features: torch.Tensor, logit_ids: list,
                 transcoders: Transcoders | CrossLayerTranscoder, n_layers: int, also: list | None = None):
        cache = [("mlp_in", layer) for layer in range(n_layers)] \
            + [("mlp_out", layer) for layer in range(n_layers)] + [("resid_pre", 0)]
        mlps = {layer: transcoders.skip_at(layer) for layer in range(n_layers)}
        run = engine.run(prompt, frozen, cache=cache + list(also or []), grad=True, log=False, memo=False,
                         frozen_norms=True, linear_mlps=mlps)
        self.cache = run.cache  # `also`: more sites recorded in the same graph (a head's z, for predicted_heads)
        self.groups = []  # per layer the active features' pre-activations, then the logit targets: node order
        for layer in range(n_layers):
            here = (features[:, 0] == layer).nonzero()[:, 0]
            x = run.cache["mlp_in", layer][0]  # [pos, d]
            enc = transcoders.W_enc_at(layer).to(x.device, x.dtype)
            self.groups.append((_rows_at(x, features[here, 1]) * enc[:, features[here, 2]].T).sum(-1).float())
        last = run.logits[0, -1].float()
        self.groups.append(last[logit_ids] - last.mean())
        self.starts = torch.tensor([0] + [len(t) for t in self.groups]).cumsum(0)
        self.inputs = [run.cache["mlp_out", layer] for layer in range(n_layers)] + [run.cache["resid_pre", 0]]
        self.embed = run.cache["resid_pre", 0][0].detach().float().cpu()
        self.recorded = [run.cache[key] for key in cache]  # (a grad run's cache keeps .grad: cleared per chunk)

    def gradients(self, rows: torch.Tensor):
        """([layer] -> [rows, pos, d] d target / d mlp_out[layer], [rows, pos, d] d target / d resid_pre[0]).

        Only the groups (layers, logits) the rows' targets are in are backpropagated: a layer-0 target's backward
        stops at layer 0, and no feature's passes through the unembedding."""
        group = torch.searchsorted(self.starts, rows, right=True) - 1
        outputs, seeds = [], []
        for g in group.unique().tolist():
            targets = self.groups[g]
            seed = torch.zeros(len(rows), len(targets), dtype=targets.dtype, device=targets.device)
            mine = (group == g).nonzero()[:, 0]
            seed[mine.to(seed.device), (rows[mine] - self.starts[g]).to(seed.device)] = 1
            outputs.append(targets)
            seeds.append(seed)
        grads = torch.autograd.grad(outputs, self.inputs, grad_outputs=seeds, retain_graph=True,
                                    is_grads_batched=True, allow_unused=True)
        for t in self.recorded:  # a chunk's .grad would be summed with the next one's, of another batch size
            t.grad = None
        out = [torch.zeros(len(rows), *t.shape[1:]) if g is None else g[:, 0].detach().float().cpu()
               for g, t in zip(grads, self.inputs)]
        return out[:-1], out[-1]


def _bar(total: int, progress: bool):
    if not isinstance(progress, bool):
        raise InterplabError(f"progress={progress!r}: True (a progress bar) or False.")
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="attribution graph", unit="target", leave=False)


def _advance(bar, n: int) -> None:
    if bar is not None:
        bar.update(n)

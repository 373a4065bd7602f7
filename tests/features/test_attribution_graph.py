"""Attribution graphs (interplab.analyses.graph) against a hand-written replacement model.

The reference is a GPT-2 forward written out here from the transformers model's weights (no interplab site, hook or
edit): every LayerNorm's scale and every attention pattern frozen at the real run's values (read with
output_attentions and the model's own LayerNorm inputs), each MLP's output a constant plus an injected vector.
Autograd through it gives each edge: d target / d injection at the source's layer and position, times the source's
vector. Transcoders: random, seeded, TopK, so the test does not depend on the shipped ones."""

from __future__ import annotations

import json

import pytest
import torch

import interplab as ilab
from interplab.analyses.attention_attribution import edge_heads, qk_attribution
from interplab.analyses.graph import attribution_graph
from interplab.analyses.replacement import replacement
from interplab.errors import InterplabError, OutOfRangeError

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def random_transcoders(n_layers: int, d: int, d_tc: int = 64, k: int = 6, seed: int = 0) -> ilab.Transcoders:
    g = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(n_layers):
        W_enc = torch.randn(d, d_tc, generator=g) / d ** 0.5
        W_dec = torch.randn(d_tc, d, generator=g) / d_tc ** 0.5
        b_enc, b_dec = torch.randn(d_tc, generator=g) * 0.1, torch.randn(d, generator=g) * 0.1
        out.append(ilab.Transcoder(W_enc, b_enc, W_dec, b_dec, layer=layer, activation="topk", k=k))
    return ilab.Transcoders(out)


@pytest.fixture(scope="module")
def tcs(lab):
    return random_transcoders(lab.n_layers, lab.d_model)


@pytest.fixture(scope="module")
def graph(lab, tcs):
    return attribution_graph(lab, PROMPT, tcs, progress=False)


class HandReplacement:
    """ioi-tiny's forward, written out, with norms' scales and patterns frozen and MLP outputs constant."""

    def __init__(self, model, ids: torch.Tensor):
        self.model, self.ids = model, ids
        tr = model.transformer
        seen = {}
        handles = [m.register_forward_hook(lambda m, a, o, n=n: seen.__setitem__(n, (a[0][0].detach(), o[0].detach())))
                   for n, m in [*[(f"ln1.{i}", b.ln_1) for i, b in enumerate(tr.h)],
                                *[(f"ln2.{i}", b.ln_2) for i, b in enumerate(tr.h)],
                                *[(f"mlp.{i}", b.mlp) for i, b in enumerate(tr.h)], ("lnf", tr.ln_f)]]
        try:
            with torch.no_grad():
                out = model(ids, output_attentions=True)
        finally:
            for h in handles:
                h.remove()
        self.logits = out.logits[0]
        self.patterns = [a[0].detach() for a in out.attentions]  # [head, q, k]
        self.mlp_in = [seen[f"ln2.{i}"][1] for i in range(len(tr.h))]
        self.mlp_out = [seen[f"mlp.{i}"][1] for i in range(len(tr.h))]
        eps = model.config.layer_norm_epsilon
        self.scales = {n: (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).add(eps).sqrt()
                       for n, (x, _) in seen.items() if n.startswith(("ln", "lnf"))}

    def norm(self, ln, name: str, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / self.scales[name] * ln.weight + ln.bias

    def forward(self, inject: list[torch.Tensor], embed_delta: torch.Tensor, open_heads=None):
        """(mlp inputs per layer, logits [pos, vocab]) with inject[l] added to MLP l's (constant) output.
        open_heads: the (layer, head) whose value path passes gradients (all where None); self.attn_out, self.q,
        self.k: each layer's attention output and its queries and keys [head, pos, d_head]."""
        tr, cfg = self.model.transformer, self.model.config
        n_head, t = cfg.n_head, self.ids.shape[1]
        h = tr.wte(self.ids[0]) + tr.wpe(torch.arange(t)) + embed_delta
        ins, self.attn_out, self.q, self.k, self.resid = [], [], [], [], []
        for i, block in enumerate(tr.h):
            self.resid.append(h)
            a = self.norm(block.ln_1, f"ln1.{i}", h)
            qkv = (a @ block.attn.c_attn.weight + block.attn.c_attn.bias).view(t, 3, n_head, -1).permute(1, 2, 0, 3)
            q, k, v = qkv  # [head, pos, d_head] each
            self.q.append(q)
            self.k.append(k)
            if open_heads is not None:
                v = torch.stack([v[hd] if (i, hd) in open_heads else v[hd].detach() for hd in range(n_head)])
            z = (self.patterns[i] @ v).transpose(0, 1).reshape(t, cfg.n_embd)
            self.attn_out.append(z @ block.attn.c_proj.weight + block.attn.c_proj.bias)
            h = h + self.attn_out[-1]
            ins.append(self.norm(block.ln_2, f"ln2.{i}", h))
            h = h + self.mlp_out[i] + inject[i]
        final = self.norm(tr.ln_f, "lnf", h)
        return ins, final @ tr.wte.weight.T


def hand_rows(lab, tcs, g: ilab.AttributionGraph, rows: list[int]) -> torch.Tensor:
    """The adjacency rows `rows` (targets) over every source, by autograd through HandReplacement."""
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    t, d = ids.shape[1], lab.d_model
    embed = (lab.model.transformer.wte(ids[0]) + lab.model.transformer.wpe(torch.arange(t))).detach()
    errors = [hand.mlp_out[i] - tcs[i](hand.mlp_in[i]) for i in range(lab.n_layers)]
    acts = [tcs[i].encode(hand.mlp_in[i]) for i in range(lab.n_layers)]
    out = torch.zeros(len(rows), len(g.adjacency))
    for r, row in enumerate(rows):
        inject = [torch.zeros(t, d, requires_grad=True) for _ in range(lab.n_layers)]
        delta = torch.zeros(t, d, requires_grad=True)
        ins, logits = hand.forward(inject, delta)
        node = g.node(row)
        if node["kind"] == "feature":
            target = ins[node["layer"]][node["pos"]] @ tcs[node["layer"]].W_enc[:, node["feature"]]
        else:
            target = logits[-1, node["token_id"]] - logits[-1].mean()
        grads = torch.autograd.grad(target, inject + [delta], allow_unused=True)
        grads = [torch.zeros(t, d) if x is None else x for x in grads]
        for col in range(g.logit_start):
            src = g.node(col)
            if src["kind"] == "feature":
                vec = acts[src["layer"]][src["pos"], src["feature"]] * tcs[src["layer"]].W_dec[src["feature"]]
                out[r, col] = grads[src["layer"]][src["pos"]] @ vec
            elif src["kind"] == "error":
                out[r, col] = grads[src["layer"]][src["pos"]] @ errors[src["layer"]][src["pos"]]
            else:
                out[r, col] = grads[-1][src["pos"]] @ embed[src["pos"]]
    return out


def test_the_hand_replacement_computes_the_models_logits(lab):
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    zeros = [torch.zeros(ids.shape[1], lab.d_model) for _ in range(lab.n_layers)]
    _, logits = hand.forward(zeros, torch.zeros(ids.shape[1], lab.d_model))
    assert (logits - hand.logits).abs().max() < 1e-4  # (so the reference below is the model's own computation)


def test_edges_equal_autograd_through_a_hand_written_replacement_model(lab, tcs, graph):
    g = graph
    assert g.n_features > 50 and len(g.logit_ids) >= 1
    # the last feature of each layer at the last position, one feature at S2, and every logit node
    rows = sorted({int(((g.features[:, 0] == layer)).nonzero()[-1, 0]) for layer in range(1, lab.n_layers)}
                  | {int(((g.features[:, 0] == 2) & (g.features[:, 1] == 9)).nonzero()[0, 0])}
                  | set(range(g.logit_start, len(g.adjacency))))
    want = hand_rows(lab, tcs, g, rows)
    got = g.adjacency[rows]
    for r, row in enumerate(rows):
        scale = want[r].abs().max()
        assert scale > 0, g.node(row)
        assert (got[r] - want[r]).abs().max() <= 1e-4 * scale + 1e-6, (g.node(row), (got[r] - want[r]).abs().max())
    # nothing flows backwards: a feature's inputs come from earlier layers (or its own layer's attention: tokens)
    feat_layers = g.features[:, 0]
    later = feat_layers[None, :] >= feat_layers[:, None]
    assert g.adjacency[:g.n_features, :g.n_features][later].abs().max() == 0


def test_pruning_and_scores_in_circuit_tracers_meaning(graph):
    g = graph
    keep, edges = g.prune()
    assert keep[g.token_start:].all()  # tokens and logits always stay
    # a kept feature sends and receives a kept edge
    for i in keep[:g.n_features].nonzero()[:, 0].tolist():
        assert edges[:, i].any() and edges[i].any()
    # pruning keeps at least the influence it promises: the kept features' influence reaches node_threshold
    inf = g.influence()[:g.token_start]
    keep_all, _ = g.prune(1.0, 1.0)
    assert keep_all[:g.n_features].sum() >= keep[:g.n_features].sum()
    replacement, completeness = g.scores()
    assert 0 < replacement <= 1 and 0 < completeness <= 1
    # completeness, computed again from its definition: the influence-weighted share of non-error inputs
    a = g.adjacency.abs()
    norm = a / a.sum(1, keepdim=True).clamp(min=1e-10)
    w = g.logit_weights()
    total, step = torch.zeros(len(a)), w @ norm
    while step.abs().sum() > 0:
        total, step = total + step, step @ norm
    out = total + w
    non_error = 1 - norm[:, g.error_start:g.token_start].sum(1)
    assert abs(float((non_error * out).sum() / out.sum()) - completeness) < 1e-5
    assert abs(float(total[:g.token_start].sum() - inf.sum())) < 1e-4 * float(inf.sum())


def test_the_json_is_the_graph_frontends_format(graph):
    data = json.loads(graph.to_json(slug="ioi"))
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    ids = {n["node_id"] for n in data["nodes"]}
    assert len(ids) == len(data["nodes"]) == len(graph.nodes)
    assert all(link["source"] in ids and link["target"] in ids for link in data["links"])
    kinds = {n["feature_type"] for n in data["nodes"]}
    assert {"embedding", "logit"} <= kinds
    assert data["metadata"]["prompt_tokens"] == graph.tokens
    assert sum(n["is_target_logit"] for n in data["nodes"]) == 1


def test_bad_input_is_refused_and_leaves_no_hook(lab, tcs):
    with pytest.raises(OutOfRangeError, match="layers"):
        attribution_graph(lab, PROMPT, ilab.Transcoders(list(tcs)[:2]))
    wide = random_transcoders(lab.n_layers, lab.d_model + 1)
    with pytest.raises(OutOfRangeError, match="another model"):
        attribution_graph(lab, PROMPT, wide)
    for bad in (0, 1.5, -0.1):
        with pytest.raises(OutOfRangeError, match="node_threshold"):
            attribution_graph(lab, PROMPT, tcs, node_threshold=bad)
    with pytest.raises(InterplabError, match="transcoder set"):
        attribution_graph(lab, PROMPT, tcs[0])
    assert ilab.attached_hooks() == []
    assert lab.model.transformer.h[0].ln_1._forward_hooks == {}


def hand_spliced_logits(lab, tcs, ids) -> torch.Tensor:
    """The model's logits with each MLP's output replaced by its transcoder's, by hooks on the model's MLPs."""
    handles = [block.mlp.register_forward_hook(lambda m, args, out, layer=layer: tcs[layer](args[0]))
               for layer, block in enumerate(lab.model.transformer.h)]
    try:
        with torch.no_grad():
            return lab.model(ids).logits
    finally:
        for h in handles:
            h.remove()


def test_the_replacement_model_with_and_without_its_errors(lab, tcs):
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        model_logits = lab.model(ids).logits
    with_errors = replacement(lab, PROMPT, tcs)
    assert (with_errors.logits - model_logits).abs().max() <= 1e-5 * model_logits.abs().max()
    alone = replacement(lab, PROMPT, tcs, errors=False)
    want = hand_spliced_logits(lab, tcs, ids)
    assert (alone.logits - want).abs().max() <= 1e-4 * want.abs().max()
    assert alone.kl() > 10 * with_errors.kl() + 1e-3  # random transcoders: far from the model without the errors
    assert ilab.attached_hooks() == []


def test_an_intervention_runs_the_model_and_reports_the_graphs_prediction(lab, tcs, graph):
    g = graph
    i = int(g.influence()[:g.n_features].argmax())
    layer, pos, feat = (int(v) for v in g.features[i])
    r = g.intervene([(layer, pos, feat)], 0.0)
    # the real change, by a hook on the model's own MLP removing the feature's decoder vector there
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    vec = float(g.activations[i]) * tcs[layer].W_dec[feat]

    def remove(m, args, out):
        out = out.clone()
        out[0, pos] -= vec
        return out

    h = lab.model.transformer.h[layer].mlp.register_forward_hook(remove)
    try:
        with torch.no_grad():
            last = lab.model(ids).logits[0, -1]
    finally:
        h.remove()
    want = [float(last[t] - last.mean()) for t in g.logit_ids]
    assert max(abs(a - b) for a, b in zip(r["after"], want)) <= 1e-4 * max(map(abs, want))
    # the direct prediction is minus the feature's edges to the logits
    assert max(abs(p + float(g.adjacency[g.logit_start + j, i]))
               for j, p in enumerate(r["predicted"]["direct"])) <= 1e-6 * float(g.adjacency[g.logit_start:].abs().max())
    with pytest.raises(OutOfRangeError, match="not active"):
        g.intervene([(0, 0, 10_000)])
    with pytest.raises(OutOfRangeError, match="feature nodes"):
        g.intervene([g.token_start])
    assert ilab.attached_hooks() == []


def test_edge_heads_equal_the_hand_model_with_one_head_open(lab, tcs, graph):
    g = graph
    # an edge between positions: a layer-0 feature at S2 (pos 9) to the first logit node
    s = int(((g.features[:, 0] == 0) & (g.features[:, 1] == 9)).nonzero()[0, 0])
    t = g.logit_start
    got = edge_heads(g, s, t)
    assert abs(got["edge"] - float(g.adjacency[t, s])) < 1e-6
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    n, d = ids.shape[1], lab.d_model
    acts = tcs[0].encode(hand.mlp_in[0])
    vec = acts[9, int(g.features[s, 2])] * tcs[0].W_dec[int(g.features[s, 2])]
    for (layer, head), value in got["heads"].items():
        inject = [torch.zeros(n, d, requires_grad=True) for _ in range(lab.n_layers)]
        _, logits = hand.forward(inject, torch.zeros(n, d), open_heads={(layer, head)})
        target = logits[-1, g.logit_ids[0]] - logits[-1].mean()
        (grad,) = torch.autograd.grad(target, inject[0])
        want = float(grad[9] @ vec)
        assert abs(value - want) <= 1e-4 * abs(got["edge"]) + 1e-6, ((layer, head), value, want)
    assert abs(got["residual"]) < 1e-6  # another position: no path without a head
    assert sum(abs(v) for v in got["heads"].values()) > 0.5 * abs(got["edge"])


def test_qk_attribution_equals_the_hand_models_query_and_key_parts(lab, tcs):
    layer, head, query, key = 3, 0, 13, 1
    got = qk_attribution(lab, PROMPT, tcs, layer=layer, head=head, query=query, key=key)
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    n, d = ids.shape[1], lab.d_model
    hand.forward([torch.zeros(n, d) for _ in range(lab.n_layers)], torch.zeros(n, d))
    d_head = d // lab.model.config.n_head
    scale = d_head ** -0.5
    score = float((hand.q[layer][head, query] @ hand.k[layer][head, key]).detach()) * scale
    assert abs(got.score - score) < 1e-4 * abs(score) + 1e-5
    block = lab.model.transformer.h[layer]
    W = block.attn.c_attn.weight.view(d, 3, lab.model.config.n_head, d_head)
    sc = hand.scales[f"ln1.{layer}"]

    def linear(c, pos, which):  # the frozen norm's and the projection's linear part, one head
        centred = c - c.mean()
        return (centred / sc[pos] * block.ln_1.weight) @ W[:, which, head]

    embed = lab.model.transformer.wte(ids[0]) + lab.model.transformer.wpe(torch.arange(n))
    for parts, pos, which, other in ((got.query_parts, query, 0, hand.k[layer][head, key]),
                                     (got.key_parts, key, 1, hand.q[layer][head, query])):
        named = dict(parts)
        want = {"token": embed[pos]}
        for l_ in range(layer):
            want[f"L{l_} attention"] = hand.attn_out[l_][pos]
            acts = tcs[l_].encode(hand.mlp_in[l_][pos])
            for f in acts.nonzero()[:, 0].tolist():
                want[f"L{l_} F{f}"] = acts[f] * tcs[l_].W_dec[f]
            want[f"L{l_} error"] = hand.mlp_out[l_][pos] - tcs[l_](hand.mlp_in[l_][pos])
        assert set(named) == set(want)
        for name, c in want.items():
            value = float((linear(c, pos, which) @ other).detach()) * scale
            assert abs(named[name] - value) <= 1e-4 * abs(score) + 1e-5, (name, named[name], value)
    # each side's parts and bias add up to the score
    assert abs(sum(v for _, v in got.query_parts) + got.query_bias - got.score) < 1e-9
    with pytest.raises(OutOfRangeError, match="after query"):
        qk_attribution(lab, PROMPT, tcs, layer=1, head=0, query=2, key=5)
    assert ilab.attached_hooks() == []


def test_max_feature_nodes_keeps_the_most_influential_features_exactly(lab, tcs, graph):
    small = attribution_graph(lab, PROMPT, tcs, max_feature_nodes=40, batch_size=16, progress=False)
    assert small.n_features == 40
    # every kept feature's row and the logits' rows equal the full graph's, over the kept nodes
    full_index = [graph.index(*(int(v) for v in f)) for f in small.features]
    cols = torch.tensor(full_index + list(range(graph.error_start, graph.logit_start)))
    rows = torch.tensor(full_index + list(range(graph.logit_start, len(graph.adjacency))))
    want = graph.adjacency[rows][:, cols]
    got = torch.cat([small.adjacency[:40], small.adjacency[small.logit_start:]])[:, :small.logit_start]
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    # the chosen ones are among the most influential of the full graph (circuit-tracer's order, not its equal)
    top = set(graph.influence()[:graph.n_features].argsort(descending=True)[:80].tolist())
    assert len(top & set(full_index)) >= 30

"""Attribution graphs (interplab.analyses.graph) against a hand-written replacement model.

The reference is a GPT-2 forward written out here from the transformers model's weights (no interplab site, hook or
edit): every LayerNorm's scale and every attention pattern frozen at the real run's values (read with
output_attentions and the model's own LayerNorm inputs), each MLP's output a constant plus an injected vector.
Autograd through it gives each edge: d target / d injection at the source's layer and position, times the source's
vector. Transcoders: random, seeded, TopK, so the test does not depend on the shipped ones; then with a skip term
(each MLP's output a constant plus its input @ W_skip, the replacement model's linear MLP) and a cross-layer
transcoder (each feature's vector written into every later MLP's output, its decoders written out here)."""

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


def random_transcoders(n_layers: int, d: int, d_tc: int = 64, k: int = 6, seed: int = 0,
                       skip: bool = False) -> ilab.Transcoders:
    g = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(n_layers):
        W_enc = torch.randn(d, d_tc, generator=g) / d ** 0.5
        W_dec = torch.randn(d_tc, d, generator=g) / d_tc ** 0.5
        b_enc, b_dec = torch.randn(d_tc, generator=g) * 0.1, torch.randn(d, generator=g) * 0.1
        W_skip = torch.randn(d, d, generator=g) * 0.05 if skip else None
        out.append(ilab.Transcoder(W_enc, b_enc, W_dec, b_dec, layer=layer, activation="topk", k=k, W_skip=W_skip))
    return ilab.Transcoders(out)


def random_clt_params(n_layers: int, d: int, d_tc: int = 48, seed: int = 1) -> dict:
    """A seeded random cross-layer transcoder, JumpReLU: W_enc [layer, d, d_tc], W_dec[l] [d_tc, n_layers - l, d]."""
    g = torch.Generator().manual_seed(seed)
    return {"W_enc": torch.randn(n_layers, d, d_tc, generator=g) / d ** 0.5,
            "b_enc": torch.randn(n_layers, d_tc, generator=g) * 0.1,
            "W_dec": [torch.randn(d_tc, n_layers - l_, d, generator=g) / (d_tc * (n_layers - l_)) ** 0.5
                      for l_ in range(n_layers)],
            "b_dec": torch.randn(n_layers, d, generator=g) * 0.1,
            "threshold": 0.3 + torch.rand(n_layers, d_tc, generator=g) * 0.3}


class HandTranscoders:
    """What the hand reference needs of a transcoder set, from its raw tensors, written out here: each layer's
    activations, each (source layer, target layer) decoder, each skip matrix and each MLP's prediction."""

    def __init__(self, enc, dec, skips, encode):
        self.enc, self.dec, self.skips, self.encode_fn = enc, dec, skips, encode  # dec: {(src, tgt): [d_tc, d]}

    @classmethod
    def of_layers(cls, tcs: ilab.Transcoders):
        def encode(layer, x):
            t = tcs[layer]
            pre = x @ t.W_enc + t.b_enc
            v, i = pre.topk(t.k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, i, v.relu())
        return cls([t.W_enc for t in tcs], {(i, i): t.W_dec for i, t in enumerate(tcs)},
                   [t.W_skip for t in tcs], encode), [t.b_dec for t in tcs]

    @classmethod
    def of_clt(cls, p: dict):
        n = len(p["W_dec"])

        def encode(layer, x):
            pre = x @ p["W_enc"][layer] + p["b_enc"][layer]
            return pre * (pre > p["threshold"][layer])
        return cls(list(p["W_enc"]), {(s, t): p["W_dec"][s][:, t - s] for s in range(n) for t in range(s, n)},
                   [None] * n, encode), list(p["b_dec"])

    def predict(self, mlp_in: list, b_dec: list) -> list:
        """Each MLP's output as the transcoders predict it from every MLP's (real) input."""
        acts = [self.encode_fn(i, x) for i, x in enumerate(mlp_in)]
        out = []
        for t, x in enumerate(mlp_in):
            y = b_dec[t] + sum(acts[s] @ self.dec[s, t] for s in range(t + 1) if (s, t) in self.dec)
            out.append(y if self.skips[t] is None else y + x @ self.skips[t])
        return out


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

    def forward(self, inject: list[torch.Tensor], embed_delta: torch.Tensor, open_heads=None, skips=None):
        """(mlp inputs per layer, logits [pos, vocab]) with inject[l] added to MLP l's (constant) output.
        skips: per layer None or W: MLP l's output is then its real value minus its real input @ W, a constant,
        plus its input in this forward @ W (a transcoder's skip term, linear in the replacement model).
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
            skip = 0 if skips is None or skips[i] is None else (ins[-1] - self.mlp_in[i]) @ skips[i]
            h = h + self.mlp_out[i] + skip + inject[i]
        final = self.norm(tr.ln_f, "lnf", h)
        return ins, final @ tr.wte.weight.T


def hand_rows(lab, tcs, g: ilab.AttributionGraph, rows: list[int], hand_tcs=None) -> torch.Tensor:
    """The adjacency rows `rows` (targets) over every source, by autograd through HandReplacement. hand_tcs:
    (HandTranscoders, b_dec) where the transcoders are not plain per-layer ones."""
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    ht, b_dec = hand_tcs or HandTranscoders.of_layers(tcs)
    t, d = ids.shape[1], lab.d_model
    embed = (lab.model.transformer.wte(ids[0]) + lab.model.transformer.wpe(torch.arange(t))).detach()
    errors = [real - pred for real, pred in zip(hand.mlp_out, ht.predict(hand.mlp_in, b_dec))]
    acts = [ht.encode_fn(i, hand.mlp_in[i]) for i in range(lab.n_layers)]
    out = torch.zeros(len(rows), len(g.adjacency))
    for r, row in enumerate(rows):
        inject = [torch.zeros(t, d, requires_grad=True) for _ in range(lab.n_layers)]
        delta = torch.zeros(t, d, requires_grad=True)
        ins, logits = hand.forward(inject, delta, skips=ht.skips)
        node = g.node(row)
        if node["kind"] == "feature":
            target = ins[node["layer"]][node["pos"]] @ ht.enc[node["layer"]][:, node["feature"]]
        else:
            target = logits[-1, node["token_id"]] - logits[-1].mean()
        grads = torch.autograd.grad(target, inject + [delta], allow_unused=True)
        grads = [torch.zeros(t, d) if x is None else x for x in grads]
        for col in range(g.logit_start):
            src = g.node(col)
            if src["kind"] == "feature":  # into every MLP it writes to
                a = acts[src["layer"]][src["pos"], src["feature"]]
                out[r, col] = sum(grads[tgt][src["pos"]] @ (a * W[src["feature"]])
                                  for (s_, tgt), W in ht.dec.items() if s_ == src["layer"])
            elif src["kind"] == "error":
                out[r, col] = grads[src["layer"]][src["pos"]] @ errors[src["layer"]][src["pos"]]
            else:
                out[r, col] = grads[-1][src["pos"]] @ embed[src["pos"]]
    return out


def check_rows(lab, tcs, g, hand_tcs=None) -> None:
    """The last feature of each layer at the last position, one feature at S2, and every logit node: their rows
    equal the hand replacement's to 1e-4 of each row's largest entry."""
    assert g.n_features > 50 and len(g.logit_ids) >= 1
    rows = sorted({int(((g.features[:, 0] == layer)).nonzero()[-1, 0]) for layer in range(1, lab.n_layers)}
                  | {int(((g.features[:, 0] == 2) & (g.features[:, 1] == 9)).nonzero()[0, 0])}
                  | set(range(g.logit_start, len(g.adjacency))))
    want = hand_rows(lab, tcs, g, rows, hand_tcs)
    got = g.adjacency[rows]
    for r, row in enumerate(rows):
        scale = want[r].abs().max()
        assert scale > 0, g.node(row)
        assert (got[r] - want[r]).abs().max() <= 1e-4 * scale + 1e-6, (g.node(row), (got[r] - want[r]).abs().max())
    # nothing flows backwards: a feature's inputs come from earlier layers (or its own layer's attention: tokens)
    feat_layers = g.features[:, 0]
    later = feat_layers[None, :] >= feat_layers[:, None]
    assert g.adjacency[:g.n_features, :g.n_features][later].abs().max() == 0


def test_the_hand_replacement_computes_the_models_logits(lab):
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    zeros = [torch.zeros(ids.shape[1], lab.d_model) for _ in range(lab.n_layers)]
    _, logits = hand.forward(zeros, torch.zeros(ids.shape[1], lab.d_model))
    assert (logits - hand.logits).abs().max() < 1e-4  # (so the reference below is the model's own computation)


def test_edges_equal_autograd_through_a_hand_written_replacement_model(lab, tcs, graph):
    check_rows(lab, tcs, graph)


def test_skip_transcoders_edges_follow_the_skip_term(lab):
    """With W_skip each MLP's output passes gradients as its input @ W_skip (circuit-tracer's skip + (out -
    skip).detach()): the edges equal the hand model's with that linear path, and differ from the edges without it."""
    skipped = random_transcoders(lab.n_layers, lab.d_model, skip=True)
    g = attribution_graph(lab, PROMPT, skipped, progress=False)
    check_rows(lab, skipped, g)
    # the same transcoders without their skip: the same features (encoders unchanged), other edges
    plain = ilab.Transcoders([ilab.Transcoder(t.W_enc, t.b_enc, t.W_dec, t.b_dec, layer=t.layer, activation="topk",
                                              k=t.k) for t in skipped])
    without = attribution_graph(lab, PROMPT, plain, progress=False)
    assert torch.equal(g.features, without.features)
    logit_rows = g.adjacency[g.logit_start:, :g.n_features]
    diff = (logit_rows - without.adjacency[without.logit_start:, :without.n_features]).abs().max()
    assert diff > 1e-2 * logit_rows.abs().max()
    # the error terms are what the transcoder (skip included) misses
    r = replacement(lab, PROMPT, skipped)
    assert (r.logits - r.model_logits).abs().max() <= 1e-5 * r.model_logits.abs().max()
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    alone = replacement(lab, PROMPT, skipped, errors=False)
    want = hand_spliced_logits(lab, skipped, ids)
    assert (alone.logits - want).abs().max() <= 1e-4 * want.abs().max()
    assert ilab.attached_hooks() == []


@pytest.fixture(scope="module")
def clt_params(lab):
    return random_clt_params(lab.n_layers, lab.d_model)


@pytest.fixture(scope="module")
def clt(clt_params):
    p = clt_params
    return ilab.CrossLayerTranscoder(p["W_enc"], p["b_enc"], p["W_dec"], p["b_dec"], threshold=p["threshold"])


def test_cross_layer_transcoder_edges_go_through_every_decoder(lab, clt, clt_params):
    g = attribution_graph(lab, PROMPT, clt, progress=False)
    check_rows(lab, clt, g, HandTranscoders.of_clt(clt_params))
    # a feature's edges to the logits sum its decoders into every later MLP: its first decoder alone (as if it were a
    # per-layer transcoder's feature) gives other edges
    first = HandTranscoders.of_clt(clt_params)
    first[0].dec = {k: v for k, v in first[0].dec.items() if k[0] == k[1]}
    layer0 = (g.features[:, 0] == 0).nonzero()[:, 0]
    only_first = hand_rows(lab, clt, g, [g.logit_start], first)[0, layer0]
    got = g.adjacency[g.logit_start, layer0]
    assert (only_first - got).abs().max() > 0.05 * got.abs().max()
    assert ilab.attached_hooks() == []


def clt_spliced_logits(lab, p: dict, ids) -> torch.Tensor:
    """The model's logits with each MLP's output replaced by the CLT's prediction, by hooks on the model's MLPs:
    each MLP's input (in this spliced run) encoded at its layer, its output the decoders of every earlier layer."""
    acts = []

    def splice(module, args, out, layer):
        pre = args[0] @ p["W_enc"][layer] + p["b_enc"][layer]
        acts.append(pre * (pre > p["threshold"][layer]))
        return p["b_dec"][layer] + sum(acts[s] @ p["W_dec"][s][:, layer - s] for s in range(layer + 1))

    handles = [block.mlp.register_forward_hook(lambda m, a, o, layer=layer: splice(m, a, o, layer))
               for layer, block in enumerate(lab.model.transformer.h)]
    try:
        with torch.no_grad():
            return lab.model(ids).logits
    finally:
        for h in handles:
            h.remove()


def test_the_cross_layer_replacement_model(lab, clt, clt_params):
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        model_logits = lab.model(ids).logits
    with_errors = replacement(lab, PROMPT, clt)
    assert (with_errors.logits - model_logits).abs().max() <= 1e-5 * model_logits.abs().max()
    alone = replacement(lab, PROMPT, clt, errors=False)
    want = clt_spliced_logits(lab, clt_params, ids)
    assert (alone.logits - want).abs().max() <= 1e-4 * want.abs().max()
    assert alone.kl() > 10 * with_errors.kl() + 1e-3
    assert ilab.attached_hooks() == []


def test_a_cross_layer_intervention_removes_every_decoder(lab, clt, clt_params):
    g = attribution_graph(lab, PROMPT, clt, progress=False)
    i = int(((g.features[:, 0] == 0) & (g.features[:, 1] == 9)).nonzero()[0, 0])
    _, pos, feat = (int(v) for v in g.features[i])
    r = g.intervene([i], 0.0)
    a = float(g.activations[i])

    def remove(m, args, out, layer):
        out = out.clone()
        out[0, pos] -= a * clt_params["W_dec"][0][feat, layer]
        return out

    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    handles = [block.mlp.register_forward_hook(lambda m, ar, o, layer=layer: remove(m, ar, o, layer))
               for layer, block in enumerate(lab.model.transformer.h)]
    try:
        with torch.no_grad():
            last = lab.model(ids).logits[0, -1]
    finally:
        for h in handles:
            h.remove()
    want = [float(last[t] - last.mean()) for t in g.logit_ids]
    assert max(abs(x - y) for x, y in zip(r["after"], want)) <= 1e-4 * max(map(abs, want))
    assert ilab.attached_hooks() == []


def test_a_cross_layer_transcoder_of_another_model_is_refused(lab, clt_params):
    p = clt_params
    short = ilab.CrossLayerTranscoder(p["W_enc"][:3], p["b_enc"][:3], [w[:, :w.shape[1] - 1] for w in p["W_dec"][:3]],
                                      p["b_dec"][:3], threshold=p["threshold"][:3])
    with pytest.raises(OutOfRangeError, match="layers"):
        attribution_graph(lab, PROMPT, short)
    with pytest.raises(OutOfRangeError, match="layers"):
        replacement(lab, PROMPT, short)
    wide = random_clt_params(lab.n_layers, lab.d_model + 2)
    wide = ilab.CrossLayerTranscoder(wide["W_enc"], wide["b_enc"], wide["W_dec"], wide["b_dec"])
    with pytest.raises(OutOfRangeError, match="another model"):
        attribution_graph(lab, PROMPT, wide)
    with pytest.raises(ilab.LoadError, match="W_dec"):  # decoders that do not reach every later layer
        ilab.CrossLayerTranscoder(p["W_enc"], p["b_enc"], [w[:, :1] for w in p["W_dec"]], p["b_dec"])
    assert ilab.attached_hooks() == []


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


@pytest.mark.parametrize("kind", ["topk", "skip", "cross-layer"])
def test_edge_heads_equal_the_hand_model_with_one_head_open(lab, tcs, graph, clt, clt_params, kind):
    if kind == "skip":
        tcs = random_transcoders(lab.n_layers, lab.d_model, skip=True)
    ht, _ = HandTranscoders.of_clt(clt_params) if kind == "cross-layer" else HandTranscoders.of_layers(tcs)
    if kind != "topk":
        graph = attribution_graph(lab, PROMPT, clt if kind == "cross-layer" else tcs, progress=False)
    g = graph
    # an edge between positions: a layer-0 feature at S2 (pos 9) to the first logit node
    s = int(((g.features[:, 0] == 0) & (g.features[:, 1] == 9)).nonzero()[0, 0])
    t = g.logit_start
    got = edge_heads(g, s, t)
    assert abs(got["edge"] - float(g.adjacency[t, s])) < 1e-6
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    n, d = ids.shape[1], lab.d_model
    f = int(g.features[s, 2])
    a = ht.encode_fn(0, hand.mlp_in[0])[9, f]
    vecs = {tgt: a * W[f] for (src, tgt), W in ht.dec.items() if src == 0}  # each MLP the feature writes to
    for (layer, head), value in got["heads"].items():
        inject = [torch.zeros(n, d, requires_grad=True) for _ in range(lab.n_layers)]
        _, logits = hand.forward(inject, torch.zeros(n, d), open_heads={(layer, head)}, skips=ht.skips)
        target = logits[-1, g.logit_ids[0]] - logits[-1].mean()
        grads = torch.autograd.grad(target, inject, allow_unused=True)
        want = sum(float(grads[tgt][9] @ v) for tgt, v in vecs.items() if grads[tgt] is not None)
        assert abs(value - want) <= 1e-4 * abs(got["edge"]) + 1e-6, ((layer, head), value, want)
    assert abs(got["residual"]) < 1e-6  # another position: no path without a head
    assert sum(abs(v) for v in got["heads"].values()) > 0.5 * abs(got["edge"])


@pytest.mark.parametrize("kind", ["topk", "skip", "cross-layer"])
def test_qk_attribution_equals_the_hand_models_query_and_key_parts(lab, tcs, clt, clt_params, kind):
    """Each part's vector in the residual at the query (key) position, through the frozen ln_1 and the head's W_Q
    (W_K), against the other side: a feature's vector is its activation times its decoders into the MLPs before
    the head's layer (one for a per-layer transcoder), a skip term is the MLP's input @ W_skip, an error is the MLP's
    output minus the transcoders' prediction."""
    layer, head, query, key = 3, 0, 13, 1
    if kind == "skip":
        tcs = random_transcoders(lab.n_layers, lab.d_model, skip=True)
    ht, b_dec = HandTranscoders.of_clt(clt_params) if kind == "cross-layer" else HandTranscoders.of_layers(tcs)
    tcs = clt if kind == "cross-layer" else tcs
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
        predicted = ht.predict([x[pos] for x in hand.mlp_in], b_dec)
        for l_ in range(layer):
            want[f"L{l_} attention"] = hand.attn_out[l_][pos]
            acts = ht.encode_fn(l_, hand.mlp_in[l_][pos])
            for f in acts.nonzero()[:, 0].tolist():
                want[f"L{l_} F{f}"] = sum(acts[f] * W[f] for (s_, t), W in ht.dec.items() if s_ == l_ and t < layer)
            if ht.skips[l_] is not None:
                want[f"L{l_} skip"] = hand.mlp_in[l_][pos] @ ht.skips[l_]
            want[f"L{l_} error"] = hand.mlp_out[l_][pos] - predicted[l_]
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


def test_a_linear_mlp_keeps_its_value_and_passes_gradients_through_its_matrix(lab):
    """Engine.run(linear_mlps={layer: W}): the MLP's output is its real value, and its only gradient path is
    mlp_in @ W: d target / d mlp_in = (d target / d mlp_out) @ W.T, for the recorded tensors of the same run."""
    W = torch.randn(lab.d_model, lab.d_model, generator=torch.Generator().manual_seed(2)) * 0.1
    plain = lab.run(PROMPT, log=False)
    run = lab.engine.run(PROMPT, cache=[("mlp_in", 3), ("mlp_out", 3)], grad=True, log=False, memo=False,
                         linear_mlps={3: W})
    assert (run.logits.detach() - plain.logits).abs().max() <= 1e-6 * plain.logits.abs().max()
    target = run.logits[0, -1, 7] - run.logits[0, -1].mean()
    g_in, g_out = torch.autograd.grad(target, [run.cache["mlp_in", 3], run.cache["mlp_out", 3]])
    want = g_out @ W.T
    assert want.abs().max() > 0 and (g_in - want).abs().max() <= 1e-5 * want.abs().max()
    none = lab.engine.run(PROMPT, cache=[("mlp_in", 3)], grad=True, log=False, memo=False, linear_mlps={3: None})
    (g,) = torch.autograd.grad(none.logits[0, -1, 7], [none.cache["mlp_in", 3]], allow_unused=True)
    assert g is None or g.abs().max() == 0  # None: no gradient through the MLP at all
    for bad in ([3], {3: torch.ones(lab.d_model)}):
        with pytest.raises(InterplabError, match="linear_mlps"):
            lab.engine.run(PROMPT, grad=True, log=False, linear_mlps=bad)
    assert ilab.attached_hooks() == []

"""Interventions on an attribution graph (interplab.analyses.graph): steering features (a -> factor * a + add) and
removing attention heads, live and as the graph predicts.

The live runs are checked against hooks written here on the transformers model's own modules (the MLP's output,
the attention's output projection's input). The heads' predictions against the hand-written replacement model of
test_attribution_graph.py (norms' scales and patterns frozen, MLP outputs constant): 'direct' is its logits with
the head's output, computed here from its frozen pattern and its value vectors, subtracted; 'total' lets every
active feature respond (its activation moving with its pre-activation) by iterating that forward to its fixed
point, with no adjacency matrix involved; for per-layer transcoders and for a cross-layer one, whose features
write into every later MLP."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from features.test_attribution_graph import (
    PROMPT,
    HandReplacement,
    HandTranscoders,
    random_clt_params,
    random_transcoders,
)
from interplab.analyses.graph import attribution_graph
from interplab.errors import OutOfRangeError


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def tcs(lab):
    return random_transcoders(lab.n_layers, lab.d_model, seed=1)


@pytest.fixture(scope="module")
def graph(lab, tcs):
    return attribution_graph(lab, PROMPT, tcs, progress=False)


@pytest.fixture(scope="module", params=["per-layer", "cross-layer"])
def graph_and_hand(request, lab, tcs, graph):
    """(graph, its transcoders written out by hand): per-layer transcoders, or a cross-layer one whose features
    write into every later MLP."""
    if request.param == "per-layer":
        return graph, HandTranscoders.of_layers(tcs)[0]
    p = random_clt_params(lab.n_layers, lab.d_model)
    clt = ilab.CrossLayerTranscoder(p["W_enc"], p["b_enc"], p["W_dec"], p["b_dec"], threshold=p["threshold"])
    return attribution_graph(lab, PROMPT, clt, progress=False), HandTranscoders.of_clt(p)[0]


def targets(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    last = logits[-1]
    return torch.stack([last[i] - last.mean() for i in ids])


def live(lab, module, hook, pre: bool = False) -> torch.Tensor:
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    h = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            return lab.model(ids).logits[0]
    finally:
        h.remove()


def test_steering_a_feature_adds_its_decoder_vector_and_the_graph_predicts_it(lab, tcs, graph):
    g = graph
    i = int(g.influence()[:g.n_features].argmax())
    layer, pos, feat = (int(v) for v in g.features[i])
    alpha = 3.0
    r = g.intervene([i], 1.0, add=alpha)
    vec = alpha * tcs[layer].W_dec[feat]

    def add(m, args, out):
        out = out.clone()
        out[0, pos] += vec
        return out

    want = targets(live(lab, lab.model.transformer.h[layer].mlp, add), g.logit_ids)
    assert torch.allclose(torch.tensor(r["after"]), want, atol=1e-4 * float(want.abs().max()))
    # per unit of the edge's relative change: alpha / a of the feature's direct edges to the logits
    edges = g.adjacency[g.logit_start:, i] * alpha / g.activations[i]
    assert torch.allclose(torch.tensor(r["predicted"]["direct"]), edges, atol=1e-6 * float(edges.abs().max()))
    assert ilab.attached_hooks() == []


def head_output(lab, hand: HandReplacement, layer: int, head: int) -> torch.Tensor:
    """[pos, d] what one head writes to the residual stream in the hand model: its frozen pattern times its value
    vectors (from the frozen ln_1 of the residual the hand forward recorded), through its slice of c_proj."""
    cfg, block = lab.model.config, lab.model.transformer.h[layer]
    t, d, n = hand.ids.shape[1], cfg.n_embd, cfg.n_head
    dh = d // n
    a = hand.norm(block.ln_1, f"ln1.{layer}", hand.resid[layer])
    v = (a @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 2 * d:].view(t, n, dh)[:, head]
    z = hand.patterns[layer][head] @ v
    return z @ block.attn.c_proj.weight[head * dh:(head + 1) * dh]


@pytest.mark.parametrize("heads", [[(2, 0)], [(1, 2), (3, 1)]])
def test_removing_heads_live_and_as_the_hand_replacement_model_predicts(lab, graph_and_hand, heads):
    g, ht = graph_and_hand
    r = g.intervene_heads([f"L{layer}H{h}" for layer, h in heads])
    assert r["heads"] == sorted(heads)
    # live: the heads' slices of the output projection's input zeroed, by hooks written here
    dh = lab.d_model // lab.model.config.n_head
    handles = []
    for layer, h in heads:
        def cut(m, args, h=h):
            x = args[0].clone()
            x[..., h * dh:(h + 1) * dh] = 0
            return (x,)
        handles.append(lab.model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(cut))
    try:
        with torch.no_grad():
            got = lab.model(lab.tokenizer(PROMPT, return_tensors="pt").input_ids).logits[0]
    finally:
        for h in handles:
            h.remove()
    want = targets(got, g.logit_ids)
    assert torch.allclose(torch.tensor(r["after"]), want, atol=1e-4 * float(want.abs().max()))

    # the graph's prediction, by the hand replacement model
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    hand = HandReplacement(lab.model, ids)
    t, d, L = ids.shape[1], lab.d_model, lab.n_layers
    feats = g.features

    def hand_run(delta_a: torch.Tensor):
        """The hand model with each active feature's activation moved by delta_a and the heads' outputs removed
        (each recomputed from the residual that reaches it, so it is zero whatever changed upstream)."""
        inject = [torch.zeros(t, d) for _ in range(L)]
        for j, (layer, pos, f) in enumerate(feats.tolist()):
            for target in range(layer, L):  # (a cross-layer feature writes into every later MLP)
                if (layer, target) in ht.dec:
                    inject[target][pos] += delta_a[j] * ht.dec[layer, target][f]
        removed = [torch.zeros(t, d) for _ in range(L)]
        for layer in sorted({layer for layer, _ in heads}):
            hand.forward([a + b for a, b in zip(inject, removed)], torch.zeros(t, d))  # sets hand.resid
            for hl, h in heads:
                if hl == layer:
                    removed[layer] = removed[layer] - head_output(lab, hand, layer, h)
        ins, logits = hand.forward([a + b for a, b in zip(inject, removed)], torch.zeros(t, d))
        return ins, logits, removed

    with torch.no_grad():
        ins0, logits0 = hand.forward([torch.zeros(t, d) for _ in range(L)], torch.zeros(t, d))
        _, logits1, _ = hand_run(torch.zeros(len(feats)))
        direct = targets(logits1, g.logit_ids) - targets(logits0, g.logit_ids)
        scale = float(direct.abs().max())
        assert scale > 1e-3  # the heads matter here, so a prediction of 0 would fail
        assert torch.allclose(torch.tensor(r["predicted"]["direct"]), direct, atol=1e-4 * scale)

        # total: each active feature's activation moves with its pre-activation, to the fixed point
        delta_a = torch.zeros(len(feats))
        for _ in range(L + 1):
            ins, logits, removed = hand_run(delta_a)
            for j, (layer, pos, f) in enumerate(feats.tolist()):
                x = ins[layer][pos] - ins0[layer][pos]
                # a head's removal in the feature's own layer is added after the hand model's MLP input: its
                # frozen ln_2, added here
                delta = removed[layer][pos]
                ln_2 = lab.model.transformer.h[layer].ln_2
                x = x + (delta - delta.mean()) / hand.scales[f"ln2.{layer}"][pos] * ln_2.weight
                delta_a[j] = x @ ht.enc[layer][:, f]
        total = targets(logits, g.logit_ids) - targets(logits0, g.logit_ids)
    assert torch.allclose(torch.tensor(r["predicted"]["total"]), total, atol=1e-4 * float(total.abs().max()))
    assert ilab.attached_hooks() == []


def test_bad_heads_and_numbers_are_refused(graph):
    for bad in ["L9H0", "L0H99", "head 2", (0,), [], [(True, 0)]]:
        with pytest.raises(OutOfRangeError):
            graph.intervene_heads(bad)
    for bad in [float("nan"), float("inf"), "2"]:
        with pytest.raises(OutOfRangeError):
            graph.intervene([0], 1.0, add=bad)
    assert ilab.attached_hooks() == []

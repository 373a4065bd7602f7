"""Path patching against a hand implementation with plain PyTorch hooks on the models' own modules (GPT-2, Llama
with grouped-query attention, GPT-NeoX), and against an invariant: a last-layer head has no later head to freeze,
so its path to the logits is its whole effect, which a plain per-head patch measures."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab

from ._hand import hand_run
from .test_invariants import CLEAN, CORRUPT, build_model

ARCHS = ["gpt2", "llama", "gpt_neox"]
O_PROJ = {"gpt2": "transformer.h.{}.attn.c_proj", "llama": "model.layers.{}.self_attn.o_proj",
          "gpt_neox": "gpt_neox.layers.{}.attention.dense"}


@pytest.fixture(scope="module")
def labs(tokenizer):
    return {a: ilab.Lab(build_model(a), tokenizer) for a in ARCHS}


def _diff(logits, a, b):
    return float(logits[0, -1, a] - logits[0, -1, b])


def _hand_path(model, arch, base_ids, source_ids, sender, receivers, H, answer, wrong):
    """The paper's procedure with hand hooks: sender's z from the source run, every other head's z frozen at the
    base run's; receivers = None (the logits) or [(layer, head, 'q' | 'k' | 'v')] on a Llama."""
    n = model.config.num_hidden_layers
    o = O_PROJ[arch]
    _, base_z = hand_run(model, base_ids, capture=[(i, o.format(i), "input", 0) for i in range(n)])
    _, src_z = hand_run(model, source_ids, capture=[(i, o.format(i), "input", 0) for i in range(n)])
    sl, sh = sender

    def frozen(i):
        def fn(t):
            z = base_z[i].clone()
            if i == sl:
                d = z.shape[-1] // H
                z[..., sh * d:(sh + 1) * d] = src_z[i][..., sh * d:(sh + 1) * d]
            return z
        return fn
    edits = [(o.format(i), "input", frozen(i)) for i in range(n)]
    if receivers is None:
        logits, _ = hand_run(model, base_ids, edits=edits)
        return _diff(logits, answer, wrong)
    proj = {s: f"model.layers.{{}}.self_attn.{s}_proj" for s in "qkv"}
    _, sent = hand_run(model, base_ids, edits=edits,
                       capture=[((layer, s), proj[s].format(layer), "output", 0) for layer, _, s in receivers])
    d = model.config.head_dim

    def put(layer, head, s):
        def fn(t):
            t = t.clone()
            t[..., head * d:(head + 1) * d] = sent[layer, s][..., head * d:(head + 1) * d]
            return t
        return fn
    logits, _ = hand_run(model, base_ids, edits=[(proj[s].format(layer), "output", put(layer, head, s))
                                                 for layer, head, s in receivers])
    return _diff(logits, answer, wrong)


@pytest.mark.parametrize("arch", ARCHS)
def test_path_to_the_logits_equals_the_hand_procedure(labs, arch):
    lab = labs[arch]
    metric = ilab.logit_diff(" Mary", " John")
    senders = [(0, 1), (1, 2), (2, 3), (1, 0)]
    res = lab.path_patch(CLEAN, CORRUPT, metric, senders=senders, max_batch=3)  # two chunks
    a, b = lab.token_id(" Mary"), lab.token_id(" John")
    base_ids, source_ids = lab.to_tokens(CLEAN), lab.to_tokens(CORRUPT)  # noising: the corrupt sender into clean
    for sender in senders:
        want = _hand_path(lab.model, arch, base_ids, source_ids, sender, None, lab.n_heads, a, b)
        assert abs(float(res.raw[0, sender[0], sender[1]]) - want) < 1e-4, (sender, want)
    assert (res.raw[0, [s[0] for s in senders], [s[1] for s in senders]] - res.clean_value).abs().max() > 1e-3


def test_path_through_queries_keys_values_equals_the_hand_procedure(labs):
    lab = labs["llama"]
    metric = ilab.logit_diff(" Mary", " John")
    a, b = lab.token_id(" Mary"), lab.token_id(" John")
    receivers = [(2, 1, "q"), (2, 0, "k"), (2, 1, "v")]  # k, v: key-value heads (2 of them)
    senders = [(0, 0), (0, 3), (1, 2)]
    joint = lab.path_patch(CLEAN, CORRUPT, metric, senders=senders, receivers=receivers)
    each = lab.path_patch(CLEAN, CORRUPT, metric, senders=senders, receivers=receivers, per_receiver=True)
    assert each.raw.shape[0] == 3 and joint.raw.shape[0] == 1
    base_ids, source_ids = lab.to_tokens(CLEAN), lab.to_tokens(CORRUPT)
    moved = 0.0
    for sender in senders:
        want = _hand_path(lab.model, "llama", base_ids, source_ids, sender, receivers, lab.n_heads, a, b)
        assert abs(float(joint.raw[0, sender[0], sender[1]]) - want) < 1e-4
        for gi, r in enumerate(receivers):
            want = _hand_path(lab.model, "llama", base_ids, source_ids, sender, [r], lab.n_heads, a, b)
            assert abs(float(each.raw[gi, sender[0], sender[1]]) - want) < 1e-4, (sender, r)
            moved = max(moved, abs(want - joint.clean_value))
    assert moved > 1e-3


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_last_layer_head_reaches_the_logits_only_directly(labs, arch):
    lab = labs[arch]
    metric = ilab.logit_diff(" Mary", " John")
    last = lab.n_layers - 1
    res = lab.path_patch(CLEAN, CORRUPT, metric, senders="heads+mlps")
    sweep = lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"), metric=metric, direction="noise")
    torch.testing.assert_close(res.raw[0, last, :lab.n_heads], sweep.raw[last], atol=1e-4, rtol=0)
    mlp = lab.patch_sweep(CLEAN, CORRUPT, site="mlp_out", by=("layer",), metric=metric, direction="noise")
    assert abs(float(res.raw[0, last, -1]) - float(mlp.raw[last])) < 1e-4
    assert res.value(last, None) == float(res.values[0, last, -1])


def test_bad_path_requests_say_what_to_do(labs):
    lab = labs["llama"]
    m = ilab.logit_diff(" Mary", " John")
    with pytest.raises(ilab.InterplabError, match=r"\(layer, head, 'q' \| 'k' \| 'v'\)"):
        lab.path_patch(CLEAN, CORRUPT, m, receivers=[(1, 0, "z")])
    with pytest.raises(ilab.OutOfRangeError, match="key-value heads"):
        lab.path_patch(CLEAN, CORRUPT, m, receivers=[(1, 3, "k")])
    with pytest.raises(ilab.InterplabError, match="senders="):
        lab.path_patch(CLEAN, CORRUPT, m, senders="everything")
    with pytest.raises(ilab.LengthMismatchError, match="different lengths"):
        lab.path_patch(CLEAN, "When Mary and John went", m)
    assert lab.hooks() == []

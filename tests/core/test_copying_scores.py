"""Copying scores against a hand computation from the weights (GPT-2's fused Conv1D projections; Llama's
grouped-query attention and RMSNorm): the token's embedding (plus position) through layer 0's MLP, each head's
value projection of its layer's input norm, the head's slice of W_O, the final norm and W_U. Every rank must match;
and the trained model's heads that write the answer at the end are scored by the same rule."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab

from .test_invariants import CLEAN, build_model

ARCHS = ["gpt2", "llama"]
NAME_POSITIONS = [2, 4]  # " Mary" and " John" in CLEAN (checked below)


def _hand_ranks(model, arch: str, ids: torch.Tensor, cols: list[int]) -> torch.Tensor:
    """[layers, heads, names] each name's rank under each head's OV output, from the weights alone."""
    cfg = model.config
    n, H = cfg.num_hidden_layers, cfg.num_attention_heads
    d = cfg.hidden_size
    with torch.no_grad():
        tok = ids[0, cols]
        if arch == "gpt2":
            t = model.transformer
            x = t.wte.weight[tok] + t.wpe.weight[torch.tensor(cols)]
            x = x + t.h[0].mlp(t.h[0].ln_2(x))  # layer 0 with no attention output
        else:
            m = model.model
            x = m.embed_tokens.weight[tok]
            x = x + m.layers[0].mlp(m.layers[0].post_attention_layernorm(x))
        ranks = torch.zeros(n, H, len(cols), dtype=torch.long)
        for layer in range(n):
            for h in range(H):
                if arch == "gpt2":
                    block = t.h[layer]
                    hd = d // H
                    qkv = block.ln_1(x) @ block.attn.c_attn.weight + block.attn.c_attn.bias
                    v = qkv[:, 2 * d + h * hd: 2 * d + (h + 1) * hd]
                    out = v @ block.attn.c_proj.weight[h * hd:(h + 1) * hd]
                    logits = model.lm_head(t.ln_f(out))
                else:
                    block = m.layers[layer]
                    hd = cfg.head_dim
                    g = h // (H // cfg.num_key_value_heads)  # the key-value head this query head reads
                    v = block.self_attn.v_proj(block.input_layernorm(x))[:, g * hd:(g + 1) * hd]
                    out = v @ block.self_attn.o_proj.weight[:, h * hd:(h + 1) * hd].T
                    logits = model.lm_head(m.norm(out))
                own = logits[torch.arange(len(cols)), tok]
                ranks[layer, h] = (logits > own[:, None]).sum(1)
    return ranks


@pytest.mark.parametrize("arch", ARCHS)
def test_copying_scores_equal_the_weights_by_hand(arch, tokenizer):
    model = build_model(arch)
    lab = ilab.Lab(model, tokenizer)
    assert [lab.to_str_tokens(CLEAN)[c] for c in NAME_POSITIONS] == [" Mary", " John"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scores = lab.copying_scores([CLEAN], NAME_POSITIONS, k=5)
    ids = lab.engine.encode([CLEAN])[0]
    hand = _hand_ranks(model, arch, ids, NAME_POSITIONS)
    assert torch.equal(scores.ranks, hand), (scores.ranks, hand)
    assert torch.equal(scores.positive, (hand < 5).float().mean(-1))
    assert scores.names == [" Mary", " John"]
    # nothing left behind
    assert not ilab.attached_hooks()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_negated_head_swaps_positive_and_negative_scores(tokenizer):
    """Flipping the sign of one head's slice of W_O negates its OV output: its positive and negative scores swap,
    and no other head's scores change."""
    model = build_model("gpt2")
    lab = ilab.Lab(model, tokenizer)
    prompts, positions = [CLEAN], NAME_POSITIONS
    before = lab.copying_scores(prompts, positions, k=40)
    hd = model.config.n_embd // model.config.n_head
    with torch.no_grad():
        model.transformer.h[1].attn.c_proj.weight[2 * hd:3 * hd] *= -1
    after = lab.copying_scores(prompts, positions, k=40)
    assert torch.equal(after.positive[1, 2], before.negative[1, 2])
    assert torch.equal(after.negative[1, 2], before.positive[1, 2])
    keep = torch.ones(3, 4, dtype=torch.bool)
    keep[1, 2] = False
    assert torch.equal(after.positive[keep], before.positive[keep])
    assert bool((before.positive + before.negative > 0).any())  # k=40 of 320 tokens: some head scores


@pytest.mark.parametrize("bad, message", [
    ({"positions": "one"}, "positions="),
    ({"positions": [torch.tensor([1, 2, 3])]}, "one per prompt"),
    ({"positions": [1.5]}, "positions="),
    ({"positions": 99}, "out of range"),
    ({"k": 0}, "k=0"),
    ({"k": True}, "k=True"),
])
def test_bad_arguments_are_refused_before_any_run(bad, message, tokenizer):
    lab = ilab.Lab(build_model("gpt2"), tokenizer)
    kw = {"positions": 1, "k": 5, **bad}
    with pytest.raises(ilab.InterplabError, match=message):
        lab.copying_scores([CLEAN, CLEAN], kw["positions"], k=kw["k"])
    assert not ilab.attached_hooks()

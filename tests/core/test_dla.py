"""Direct logit attribution against a hand computation from the weights (GPT-2, Llama with grouped-query
attention, GPT-NeoX): each head's output through its slice of W_O, the final norm's scale frozen at the run's
value, dotted with W_U[answer] - W_U[wrong]. The parts must also add up to the model's own logit difference."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab

from ._hand import hand_run
from .test_invariants import CLEAN, build_model

ARCHS = ["gpt2", "llama", "gpt_neox"]
PATHS = {  # layers, o_proj, mlp, final norm (written out here, not taken from interplab's site map)
    "gpt2": ("transformer.h", "attn.c_proj", "mlp", "transformer.ln_f"),
    "llama": ("model.layers", "self_attn.o_proj", "mlp", "model.norm"),
    "gpt_neox": ("gpt_neox.layers", "attention.dense", "mlp", "gpt_neox.final_layer_norm"),
}


@pytest.fixture(scope="module")
def labs(tokenizer):
    return {a: ilab.Lab(build_model(a), tokenizer) for a in ARCHS}


def _by_hand(model, arch: str, ids: torch.Tensor, answer: int, wrong: int) -> dict:
    layers, o_proj, mlp, norm_path = PATHS[arch]
    n = model.config.num_hidden_layers
    H = model.config.num_attention_heads
    cap = [(("z", i), f"{layers}.{i}.{o_proj}", "input", 0) for i in range(n)]
    cap += [(("mlp", i), f"{layers}.{i}.{mlp}", "output", 0) for i in range(n)]
    cap += [("final", norm_path, "input", 0), ("first", f"{layers}.0", "input", 0)]
    logits, got = hand_run(model, ids, capture=cap)
    norm = model.get_submodule(norm_path)
    r = got["final"]
    if isinstance(norm, torch.nn.LayerNorm):
        scale = (r.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()

        def frozen(c):
            return norm.weight * (c - c.mean(-1, keepdim=True)) / scale
        shift = norm.bias
    else:  # Llama's RMSNorm
        scale = (r.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon).sqrt()

        def frozen(c):
            return norm.weight * c / scale
        shift = torch.zeros(r.shape[-1])
    W_U = model.get_output_embeddings().weight
    u = W_U[answer] - W_U[wrong]

    def score(c):
        return (frozen(c) * u).sum(-1)[0]  # [pos]

    heads = torch.zeros(n, H, ids.shape[1])
    out_bias = torch.zeros(n, ids.shape[1])
    for i in range(n):
        proj = model.get_submodule(f"{layers}.{i}.{o_proj}")
        z = got["z", i]
        d = z.shape[-1] // H
        for h in range(H):
            zh = z[..., h * d:(h + 1) * d]
            if arch == "gpt2":  # Conv1D: x @ W, W [in, out]
                out = zh @ proj.weight[h * d:(h + 1) * d]
            else:  # Linear: x @ W.T, W [out, in]
                out = zh @ proj.weight[:, h * d:(h + 1) * d].T
            heads[i, h] = score(out)
        if proj.bias is not None:
            out_bias[i] = score(proj.bias.expand_as(r))
    mlp_parts = torch.stack([score(got["mlp", i]) for i in range(n)])
    return {"heads": heads, "attn_bias": out_bias, "mlp": mlp_parts, "before": score(got["first"]),
            "shift": float(shift @ u), "logit_diff": (logits[0, :, answer] - logits[0, :, wrong])}


@pytest.mark.parametrize("arch", ARCHS)
def test_direct_logit_attribution_equals_the_hand_computation(labs, arch):
    lab = labs[arch]
    metric = ilab.logit_diff(" Mary", " John")
    res = lab.direct_logit_attribution(CLEAN, metric)
    with torch.no_grad():
        hand = _by_hand(lab.model, arch, lab.to_tokens(CLEAN), lab.token_id(" Mary"), lab.token_id(" John"))
    torch.testing.assert_close(res.heads, hand["heads"], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.mlp, hand["mlp"], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.attn_bias, hand["attn_bias"], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.embed + res.pos_embed, hand["before"], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.final_bias, torch.full_like(res.final_bias, hand["shift"]), atol=1e-4, rtol=0)
    # the parts add up to the model's own logit difference, at every position
    torch.testing.assert_close(res.total, hand["logit_diff"], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.parts_sum(), hand["logit_diff"], atol=1e-3, rtol=0)
    assert res.heads.abs().max() > 1e-2
    name, value = res.top(1)[0]
    assert abs(value) == max(abs(v) for _, v in res.top(50))


def test_gpt2_splits_token_and_position_embeddings(labs):
    lab = labs["gpt2"]
    res = lab.direct_logit_attribution(CLEAN, ilab.logit_diff(" Mary", " John"))
    assert res.pos_embed.abs().max() > 1e-4 and res.embed.abs().max() > 1e-4


def test_direct_logit_attribution_refuses_what_does_not_split(labs, tokenizer):
    lab = labs["llama"]
    with pytest.raises(ilab.InterplabError, match="linear in the logits"):
        lab.direct_logit_attribution(CLEAN, ilab.prob(" Mary"))
    gemma2 = ilab.Lab(build_model("gemma2"), tokenizer)
    with pytest.raises(ilab.UnsupportedSiteError, match="normalises each sublayer"):
        gemma2.direct_logit_attribution(CLEAN, ilab.logit_diff(" Mary", " John"))
    with pytest.raises(ilab.LengthMismatchError, match="equal token length"):
        lab.direct_logit_attribution([CLEAN, "When Mary"], ilab.logit_diff(" Mary", " John"))

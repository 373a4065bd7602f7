"""AtP* (Kramar et al. 2024) options of method="attribution", against hand computations on a tiny Llama (grouped-
query, rotary): the QK fix's pattern change comes from the model's own forward with that query or key patched (not
from interplab's recomputation), and GradDrop's per-layer estimates from plain hooks that detach a layer's outputs."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab

from .test_invariants import CLEAN, CORRUPT, build_model

LL = "model.layers.{}"


@pytest.fixture(scope="module")
def lab(tokenizer):
    return ilab.Lab(build_model("llama"), tokenizer)


def _metric_value(lab, logits):
    return logits[0, -1, lab.token_id(" Mary")] - logits[0, -1, lab.token_id(" John")]


def _pattern_grad(lab, layer):
    """d metric / d pattern of a layer on the corrupt run, by a hand hook that adds zero to the model's own
    attention weights (read with output_attentions from the attention module)."""
    model = lab.model
    ids = lab.to_tokens(CORRUPT)
    with torch.enable_grad():
        out = model(ids, output_attentions=True)
        att = out.attentions[layer]
        (g,) = torch.autograd.grad(_metric_value(lab, out.logits), att)
    return att.detach(), g


def test_qk_fix_is_the_pattern_gradient_times_the_models_own_pattern_change(lab):
    metric = ilab.logit_diff(" Mary", " John")
    est = lab.patch_sweep(CLEAN, CORRUPT, site="q", by=("layer", "head", "pos"), metric=metric,
                          method="attribution", qk_fix=True)
    k_est = lab.patch_sweep(CLEAN, CORRUPT, site="k", by=("layer", "head"), metric=metric,
                            method="attribution", qk_fix=True)
    clean = lab.run(CLEAN, cache=[("q", 1), ("k", 2)])
    for site, layer, head, pos, res in [("q", 1, 2, -1, est), ("q", 1, 0, 20, est), ("k", 2, 1, None, k_est)]:
        pattern, g = _pattern_grad(lab, layer)
        patched = lab.run(CORRUPT, edits=[ilab.patch(site, layer, head=head, pos=pos, source=clean)],
                          cache=[("pattern", layer)]).cache["pattern", layer]
        want = float((g * (patched - pattern)).sum())
        index = (layer, head) if pos is None else (layer, head, pos % res.raw.shape[-1])
        got = float(res.raw[index]) - res.corrupt_value
        assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (site, layer, head, pos, got, want)
        assert abs(want) > 1e-6


def test_grad_drop_is_the_mean_size_of_the_estimates_with_each_layer_detached(lab):
    metric = ilab.logit_diff(" Mary", " John")
    res = lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"), metric=metric, method="attribution",
                          grad_drop=True)
    plain = lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"), metric=metric, method="attribution")
    model, n, H = lab.model, lab.n_layers, lab.n_heads
    clean = lab.run(CLEAN, cache=["z"])
    ids = lab.to_tokens(CORRUPT)
    sizes = torch.zeros(n, H)
    for drop in range(n):
        detach = [model.get_submodule(f"{LL.format(drop)}.{m}").register_forward_hook(
            lambda mod, args, out: out.detach() if isinstance(out, torch.Tensor) else (out[0].detach(), *out[1:]))
            for m in ("self_attn", "mlp")]
        zs = {}

        def grab(layer, into=zs):
            def hook(mod, args):
                into[layer] = args[0]
            return hook
        grabs = [model.get_submodule(f"{LL.format(i)}.self_attn.o_proj").register_forward_pre_hook(grab(i))
                 for i in range(n)]
        try:
            with torch.enable_grad():
                logits = model(ids).logits
                value = _metric_value(lab, logits)
                grads = torch.autograd.grad(value, [zs[i] for i in range(n)], allow_unused=True)
        finally:
            for h in detach + grabs:
                h.remove()
            model.zero_grad(set_to_none=True)
        for i in range(n):
            if grads[i] is None:
                continue
            d = (clean.cache["z", i] - zs[i].detach()) * grads[i]
            sizes[i] += d.view(*d.shape[:2], H, -1).sum((0, 1, 3)).abs()
    sizes /= n - 1
    want = torch.where(plain.raw - plain.corrupt_value < 0, -sizes, sizes)
    torch.testing.assert_close(res.raw - res.corrupt_value, want, atol=1e-4, rtol=1e-4)
    assert sizes.max() > 1e-3


def test_atp_star_options_say_where_they_apply(lab):
    metric = ilab.logit_diff(" Mary", " John")
    with pytest.raises(ilab.InterplabError, match="queries and keys"):
        lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"), metric=metric, method="attribution",
                        qk_fix=True)
    with pytest.raises(ilab.InterplabError, match="option of method='attribution'"):
        lab.patch_sweep(CLEAN, CORRUPT, site="q", by=("layer", "head"), metric=metric, grad_drop=True)
    with pytest.raises(ilab.InterplabError, match="True or False"):
        lab.patch_sweep(CLEAN, CORRUPT, site="q", by=("layer", "head"), metric=metric, method="attribution",
                        qk_fix="yes")
    assert lab.hooks() == []

"""The MLP's neurons as sites: mlp_pre (before the activation; a gated MLP's gate projection) and mlp_post (what the
down projection reads) on every architecture the invariant tests build, read and edited with neuron=, checked against
hooks written out here on other modules of the model's own MLP: the activation function's input and output, and a
gated MLP's up projection (act(gate) * up), never the modules interplab's site map hooks (c_fc / c_proj,
dense_h_to_4h / dense_4h_to_h, gate_proj / down_proj)."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab

from ._hand import encode, hand_run, param_hash
from .test_invariants import ARCH_LIST, CLEAN, CORRUPT, EFFECT, MOE, build_model

ATOL = 1e-4  # fp32, absolute
DENSE = [a for a in ARCH_LIST if a not in MOE]
GATED = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2"}


def _mlp(arch: str, layer: int) -> str:
    return {"gpt2": "transformer.h", "gpt_neox": "gpt_neox.layers", "gpt_neox_parallel": "gpt_neox.layers"}.get(
        arch, "model.layers") + f".{layer}.mlp"


def _act(arch: str, layer: int) -> str:
    """The activation function's module: its input is mlp_pre, its output (times up_proj's, if gated) mlp_post."""
    return _mlp(arch, layer) + (".act_fn" if arch in GATED else ".act")


@pytest.fixture(scope="module")
def built(tokenizer):
    made: dict = {}

    def get(arch: str):
        if arch not in made:
            model = build_model(arch)
            made[arch] = (model, ilab.Lab(model, tokenizer))
        return made[arch]
    return get


def _hand_units(model, arch: str, tokenizer, prompt: str, layers: range, edits=()):
    """{(site, layer): [1, pos, d_mlp]} read by hand from the activation (and the up projection), and the logits."""
    capture = []
    for L in layers:
        capture += [(("pre", L), _act(arch, L), "input", 0), (("act", L), _act(arch, L), "output", 0)]
        if arch in GATED:
            capture.append((("up", L), _mlp(arch, L) + ".up_proj", "output", 0))
    ids, mask = encode(tokenizer, prompt)
    logits, got = hand_run(model, ids, mask, edits=edits, capture=capture)
    out = {}
    for L in layers:
        out["mlp_pre", L] = got["pre", L]
        out["mlp_post", L] = got["act", L] * got["up", L] if arch in GATED else got["act", L]
    return logits, out


@pytest.mark.parametrize("arch", DENSE)
def test_mlp_pre_and_post_are_the_mlps_hidden_units(arch, built, tokenizer):
    model, lab = built(arch)
    n = lab.n_layers
    run = lab.run(CLEAN, cache=["mlp_pre", "mlp_post"])
    _, want = _hand_units(model, arch, tokenizer, CLEAN, range(n))
    d_mlp = want["mlp_post", 0].shape[-1]  # the activation's width, read by hand
    assert lab.engine.sites.d_mlp == d_mlp
    for key, value in want.items():
        got = run.cache[key]
        assert got.shape == (1, run.logits.shape[1], d_mlp), key
        torch.testing.assert_close(got.float(), value.float(), atol=ATOL, rtol=0, msg=f"{arch} {key}")
    assert lab.hooks() == []


@pytest.mark.parametrize("arch", DENSE)
def test_neuron_edits_equal_hand_hooks_on_the_activation(arch, built, tokenizer):
    """zero at mlp_post and scale at mlp_pre, on two neurons at one position / one neuron everywhere, equal the same
    change made by hand on the activation function (for a gated MLP, zeroing the up projection's unit zeroes the
    product), and move the logits by far more than the tolerance."""
    model, lab = built(arch)
    plain = lab.run(CORRUPT).logits.float()
    units, p = [3, 17], 4

    def zero_units(t):
        t = t.clone()
        t[:, p, units] = 0
        return t

    zeroed = lab.run(CORRUPT, [ilab.zero("mlp_post", 1, neuron=units, pos=p)]).logits.float()
    where = _mlp(arch, 1) + ".up_proj" if arch in GATED else _act(arch, 1)
    hand, _ = _hand_units(model, arch, tokenizer, CORRUPT, range(0), edits=[(where, "output", zero_units)])
    torch.testing.assert_close(zeroed, hand, atol=ATOL, rtol=0)
    assert (zeroed - plain).abs().max() > EFFECT

    def scale_unit(t):
        t = t.clone()
        t[..., 5] *= 2.5
        return t

    scaled = lab.run(CORRUPT, [ilab.scale("mlp_pre", 0, factor=2.5, neuron=5)]).logits.float()
    hand, _ = _hand_units(model, arch, tokenizer, CORRUPT, range(0), edits=[(_act(arch, 0), "input", scale_unit)])
    torch.testing.assert_close(scaled, hand, atol=ATOL, rtol=0)
    assert (scaled - plain).abs().max() > EFFECT
    assert lab.hooks() == []


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_patch_and_set_value_act_on_the_selected_neurons_only(arch, built, tokenizer):
    model, lab = built(arch)
    clean = lab.run(CLEAN, cache=["mlp_post"])
    patched = lab.run(CORRUPT, [ilab.patch("mlp_post", 0, neuron=slice(0, 8), source=clean)], cache=["mlp_post"])
    corrupt = lab.run(CORRUPT, cache=["mlp_post"])
    got, old, src = (r.cache["mlp_post", 0] for r in (patched, corrupt, clean))
    torch.testing.assert_close(got[..., :8], src[..., :8], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[..., 8:], old[..., 8:], atol=ATOL, rtol=0)
    # one number for every selected neuron, at the last position, read back at the site and by hand
    edited = lab.run(CORRUPT, [ilab.set_value("mlp_pre", 1, 3.0, neuron=[2, 9], pos=-1)], cache=["mlp_pre"])
    _, hand = _hand_units(model, arch, tokenizer, CORRUPT, range(2),
                          edits=[(_act(arch, 1), "input", lambda t: _set_last(t, [2, 9], 3.0))])
    torch.testing.assert_close(edited.cache["mlp_pre", 1].float(), hand["mlp_pre", 1].float(), atol=ATOL, rtol=0)
    assert abs(float(hand["mlp_pre", 1][0, -1, 2]) - 3.0) < ATOL


def _set_last(t, units, value):
    t = t.clone()
    t[:, -1, units] = value
    return t


@pytest.mark.parametrize("arch", sorted(MOE))
def test_a_mixture_of_experts_block_has_no_neuron_site(arch, built):
    model, lab = built(arch)
    before = param_hash(model)
    for attempt in (lambda: lab.run(CLEAN, cache=["mlp_post"]),
                    lambda: lab.run(CLEAN, [ilab.zero("mlp_pre", 0, neuron=1)])):
        with pytest.raises(ilab.UnsupportedSiteError, match="mixture-of-experts.*mlp_out"):
            attempt()
    assert lab.hooks() == [] and param_hash(model) == before


def test_bad_neuron_selections_are_typed_errors_before_any_forward(built):
    model, lab = built("gpt2")
    before = param_hash(model)
    with pytest.raises(ilab.UnsupportedSiteError, match="neurons are the MLP's hidden units"):
        ilab.zero("resid_pre", 0, neuron=1)
    with pytest.raises(ilab.UnsupportedSiteError, match="no heads"):
        ilab.zero("mlp_post", 0, neuron=1, head=0)
    with pytest.raises(ilab.OutOfRangeError, match="neuron="):
        ilab.zero("mlp_post", 0, neuron=1.5)
    with pytest.raises(ilab.OutOfRangeError, match=r"128 neurons \(0..127"):
        lab.run(CLEAN, [ilab.zero("mlp_post", 0, neuron=[1, 128])])
    with pytest.raises(ilab.VectorError):
        lab.run(CLEAN, [ilab.set_value("mlp_post", 0, [1.0, 2.0, 3.0], neuron=[1, 2])])
    assert lab.hooks() == [] and param_hash(model) == before
    edit = ilab.zero("mlp_post", 0, neuron=[1, 2], pos=-1)
    assert edit.describe() == "zero mlp_post L0 N1,2 pos -1"
    assert ilab.edits_from_json(ilab.edits_to_json([edit]))[0].neuron == [1, 2]

"""Every canonical site, on every architecture, equals what a plain hook on the hand-mapped module sees."""

from types import SimpleNamespace

import pytest
import torch
from _tiny_models import ARCHS
from torch import nn

import interplab as ilab

from ._hand import encode, hand_run

PROMPT = "When Mary and John went to the store, John gave a drink to"
ATOL = 1e-5

# The module mapping, written out by hand per architecture (not read from interplab.sites).
# Each entry: site -> (module path with {L}, "input"/"output", tuple index).
_LLAMA_LIKE = {
    "embed": ("model.embed_tokens", "output", 0),
    "resid_pre": ("model.layers.{L}", "input", 0),
    "resid_mid": ("model.layers.{L}.post_attention_layernorm", "input", 0),
    "resid_post": ("model.layers.{L}", "output", 0),
    "attn_out": ("model.layers.{L}.self_attn", "output", 0),
    "mlp_out": ("model.layers.{L}.mlp", "output", 0),
    "z": ("model.layers.{L}.self_attn.o_proj", "input", 0),
    "pattern": ("model.layers.{L}.self_attn", "output", 1),
    "logits": ("lm_head", "output", 0),
}
_NEOX = {
    "embed": ("gpt_neox.embed_in", "output", 0),
    "resid_pre": ("gpt_neox.layers.{L}", "input", 0),
    "resid_mid": ("gpt_neox.layers.{L}.post_attention_layernorm", "input", 0),
    "resid_post": ("gpt_neox.layers.{L}", "output", 0),
    "attn_out": ("gpt_neox.layers.{L}.attention", "output", 0),
    "mlp_out": ("gpt_neox.layers.{L}.mlp", "output", 0),
    "z": ("gpt_neox.layers.{L}.attention.dense", "input", 0),
    "pattern": ("gpt_neox.layers.{L}.attention", "output", 1),
    "logits": ("lm_head", "output", 0),  # transformers 5 names GPT-NeoX's unembedding lm_head (was embed_out)
}
MAPPING = {
    "gpt2": {
        "embed": ("transformer.wte", "output", 0),
        "resid_pre": ("transformer.h.{L}", "input", 0),
        "resid_mid": ("transformer.h.{L}.ln_2", "input", 0),
        "resid_post": ("transformer.h.{L}", "output", 0),
        "attn_out": ("transformer.h.{L}.attn", "output", 0),
        "mlp_out": ("transformer.h.{L}.mlp", "output", 0),
        "z": ("transformer.h.{L}.attn.c_proj", "input", 0),
        "pattern": ("transformer.h.{L}.attn", "output", 1),
        "logits": ("lm_head", "output", 0),
    },
    "gpt_neox": _NEOX,
    "gpt_neox_parallel": {k: v for k, v in _NEOX.items() if k != "resid_mid"},
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE,
    "gemma2": {
        **_LLAMA_LIKE,
        # Gemma 2 normalises each sublayer output before the residual add: the stream sees the norm's output.
        "resid_mid": ("model.layers.{L}.pre_feedforward_layernorm", "input", 0),
        "attn_out": ("model.layers.{L}.post_attention_layernorm", "output", 0),
        "mlp_out": ("model.layers.{L}.post_feedforward_layernorm", "output", 0),
    },
}
LAYERED = {"resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z", "pattern"}
ALL_ARCHS = ARCHS + ["gpt_neox_parallel"]


def _expected(model, tokenizer, arch):
    ids, mask = encode(tokenizer, PROMPT)
    cap = []
    for site, (path, io, idx) in MAPPING[arch].items():
        if site in LAYERED:
            for L in range(3):
                cap.append(((site, L), path.format(L=L), io, idx))
        else:
            cap.append((site, path, io, idx))
    return hand_run(model, ids, mask, capture=cap)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_every_canonical_site_equals_a_plain_hook(arch, models, tokenizer):
    model = models[arch]
    lab = ilab.Lab(model, tokenizer)
    sites = list(MAPPING[arch])
    run = lab.run(PROMPT, cache=sites)
    plain_logits, expected = _expected(model, tokenizer, arch)
    assert torch.allclose(run.logits, plain_logits, atol=ATOL)
    for key, want in expected.items():
        got = run.cache[key]
        assert got.shape == want.shape, (arch, key, got.shape, want.shape)
        assert torch.allclose(got, want.float(), atol=ATOL), (arch, key, (got - want).abs().max())
    # a cache request by (site, layer) gives the same tensor as the all-layers request
    one = lab.run(PROMPT, cache=[("z", 1)])
    assert torch.allclose(one.cache["z", 1], expected["z", 1], atol=ATOL)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_sites_obey_the_residual_algebra(arch, models, tokenizer):
    """Independent of any module mapping: resid_post = resid_pre + attn_out + mlp_out, and so on."""
    model = models[arch]
    lab = ilab.Lab(model, tokenizer)
    names = ["resid_pre", "resid_post", "attn_out", "mlp_out", "z", "pattern", "logits"]
    parallel = arch == "gpt_neox_parallel"
    if not parallel:
        names.append("resid_mid")
    c = lab.run(PROMPT, cache=names).cache
    for L in range(3):
        if parallel:
            assert torch.allclose(c["resid_pre", L] + c["attn_out", L] + c["mlp_out", L], c["resid_post", L], atol=ATOL)
        else:
            assert torch.allclose(c["resid_pre", L] + c["attn_out", L], c["resid_mid", L], atol=ATOL)
            assert torch.allclose(c["resid_mid", L] + c["mlp_out", L], c["resid_post", L], atol=ATOL)
        if L < 2:
            assert torch.allclose(c["resid_post", L], c["resid_pre", L + 1], atol=ATOL)
        p = c["pattern", L]
        assert p.shape[1] == lab.n_heads
        assert torch.allclose(p.sum(-1), torch.ones_like(p.sum(-1)), atol=ATOL)  # rows are distributions
        assert torch.all(p.triu(1) == 0)  # causal
        assert c["z", L].shape[-1] == lab.n_heads * lab.engine.d_head
    full = model(input_ids=lab.to_tokens(PROMPT)).logits
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma 2: the 'logits' site is lm_head's output, before the final tanh soft-capping
        assert torch.allclose(torch.tanh(c["logits"] / cap) * cap, full, atol=ATOL)
        assert not torch.allclose(c["logits"], full, atol=ATOL)
    else:
        assert torch.allclose(c["logits"], full, atol=ATOL)
    run = lab.run(PROMPT)
    assert torch.allclose(run.logits, full, atol=ATOL)  # run.logits is always the model's final output


def test_parallel_neox_resid_mid_explains_itself(models, tokenizer):
    lab = ilab.Lab(models["gpt_neox_parallel"], tokenizer)
    for call in (lambda: lab.run(PROMPT, cache=["resid_mid"]),
                 lambda: lab.run(PROMPT, cache=[("resid_mid", 1)]),
                 lambda: lab.run(PROMPT, edits=[ilab.zero("resid_mid", 1)])):
        with pytest.raises(ilab.UnsupportedSiteError) as ei:
            call()
        msg = str(ei.value)
        assert "parallel residual" in msg and "use_parallel_residual" in msg
        assert "resid_pre" in msg  # says what to use instead


def test_raw_module_paths(models, tokenizer):
    model = models["gpt2"]
    lab = ilab.Lab(model, tokenizer)
    ids, mask = encode(tokenizer, PROMPT)
    _, want = hand_run(model, ids, mask, capture=[
        ("out", "transformer.h.1.mlp", "output", 0),
        ("in", "transformer.h.1.mlp", "input", 0),
        ("cproj0", "transformer.h.0.attn.c_proj", "input", 0),
        ("cproj2", "transformer.h.2.attn.c_proj", "input", 0),
    ])
    run = lab.run(PROMPT, cache=["transformer.h.1.mlp.output", "transformer.h.1.mlp.input", "transformer.h.1.mlp",
                                 ("transformer.h.{layer}.attn.c_proj.input", 0),
                                 ("transformer.h.{layer}.attn.c_proj.input", 2)])
    assert torch.allclose(run.cache["transformer.h.1.mlp.output"], want["out"], atol=ATOL)
    assert torch.allclose(run.cache["transformer.h.1.mlp"], want["out"], atol=ATOL)  # no suffix = output
    assert torch.allclose(run.cache["transformer.h.1.mlp.input"], want["in"], atol=ATOL)
    assert torch.allclose(run.cache["transformer.h.{layer}.attn.c_proj.input", 0], want["cproj0"], atol=ATOL)
    assert torch.allclose(run.cache["transformer.h.{layer}.attn.c_proj.input", 2], want["cproj2"], atol=ATOL)
    # a raw path names the same tensor as the canonical site
    canon = lab.run(PROMPT, cache=[("mlp_out", 1), ("z", 2)]).cache
    assert torch.allclose(canon["mlp_out", 1], want["out"], atol=ATOL)
    assert torch.allclose(canon["z", 2], want["cproj2"], atol=ATOL)
    # edits on a raw path, with and without the {layer} placeholder
    hand_logits, _ = hand_run(model, ids, mask, edits=[("transformer.h.1.mlp", "output", torch.zeros_like)])
    for e in (ilab.zero("transformer.h.1.mlp.output"), ilab.zero("transformer.h.{layer}.mlp.output", layer=1)):
        assert torch.allclose(lab.run(PROMPT, edits=[e]).logits, hand_logits, atol=ATOL)
    with pytest.raises(ilab.UnknownSiteError, match="layer"):
        lab.run(PROMPT, cache=["transformer.h.{layer}.mlp.output"])


class Mystery(nn.Module):
    """A model interplab has never heard of: a GPT-2 inside a custom wrapper with model_type 'mystery'."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = SimpleNamespace(model_type="mystery")

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)


def test_unknown_architecture_raw_paths_work_canonical_names_explain(models, tokenizer):
    model = Mystery(models["gpt2"])
    lab = ilab.Lab(model, tokenizer)
    assert lab.sites.arch is None
    ids, mask = encode(tokenizer, PROMPT)
    plain, want = hand_run(model, ids, mask, capture=[("m", "inner.transformer.h.2.mlp", "output", 0)])
    run = lab.run(PROMPT, cache=["inner.transformer.h.2.mlp.output"])
    assert torch.allclose(run.logits, plain, atol=ATOL)
    assert torch.allclose(run.cache["inner.transformer.h.2.mlp.output"], want["m"], atol=ATOL)
    edited, _ = hand_run(model, ids, mask, edits=[("inner.transformer.h.2.mlp", "output", lambda t: t * 3.0)])
    got = lab.run(PROMPT, edits=[ilab.scale("inner.transformer.h.2.mlp.output", factor=3.0)])
    assert torch.allclose(got.logits, edited, atol=ATOL)
    for call in (lambda: lab.run(PROMPT, cache=["resid_post"]),
                 lambda: lab.run(PROMPT, cache=[("resid_pre", 0)]),
                 lambda: lab.run(PROMPT, edits=[ilab.zero("embed")])):
        with pytest.raises(ilab.UnsupportedSiteError) as ei:
            call()
        msg = str(ei.value)
        assert "mystery" in msg and "raw module path" in msg.lower() or "module path" in msg
    repr(lab)  # must not crash without a site map

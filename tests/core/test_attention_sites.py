"""q, k, v, rot_q, rot_k and an editable pattern, on GPT-2, GPT-NeoX, Llama (grouped-query), Qwen 3 and Gemma 2.

Reads are checked against an independent peer: plain PyTorch hooks on the model's own projection modules (written
by hand per architecture, tests/core/_hand.py), the model's own rotary function, and the weights the model itself
returns with output_attentions=True. Edits are checked by invariants of attention's math: a head's output is its
pattern times its values, and its pattern is a function of its queries and keys only.
"""

from __future__ import annotations

import sys

import pytest
import torch

import interplab as ilab

from ._hand import hand_run
from .test_invariants import build_model  # tiny random models with sharp attention, random biases and norms

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
ARCHS = ["gpt2", "gpt_neox", "llama", "qwen3", "gemma2"]
L = 1
TOL = 1e-5


@pytest.fixture(scope="module")
def labs(tokenizer):
    return {a: ilab.Lab(build_model(a), tokenizer) for a in ARCHS}


def _peer_qkv(lab, arch: str, prompt: str) -> dict:
    """q, k, v of layer L as [batch, pos, heads * d_head], read off the model's own modules by plain hooks."""
    ids = lab.to_tokens(prompt)
    m = lab.model
    if arch == "gpt2":
        _, got = hand_run(m, ids, capture=[("qkv", f"transformer.h.{L}.attn.c_attn", "output", 0)])
        return dict(zip("qkv", got["qkv"].split(m.config.n_embd, dim=-1)))
    if arch == "gpt_neox":
        _, got = hand_run(m, ids, capture=[("qkv", f"gpt_neox.layers.{L}.attention.query_key_value", "output", 0)])
        b, t, _ = got["qkv"].shape
        heads = got["qkv"].view(b, t, lab.n_heads, 3, -1)
        return {n: heads[..., i, :].reshape(b, t, -1) for i, n in enumerate("qkv")}
    attn = f"model.layers.{L}.self_attn"
    if arch == "qwen3":  # q and k are normalised per head before the rotary embedding
        cap = [("q", f"{attn}.q_norm", "output", 0), ("k", f"{attn}.k_norm", "output", 0),
               ("v", f"{attn}.v_proj", "output", 0)]
        _, got = hand_run(m, ids, capture=cap)
        return {n: t.reshape(*t.shape[:2], -1) for n, t in got.items()}
    _, got = hand_run(m, ids, capture=[(n, f"{attn}.{n}_proj", "output", 0) for n in "qkv"])
    return got


def _peer_rotated(lab, arch: str, q: torch.Tensor, k: torch.Tensor, prompt: str):
    """q, k after the model's own rotary function, applied by hand to the peer's q, k."""
    module = sys.modules[type(lab.model).__module__]
    ids = lab.to_tokens(prompt)
    pos = torch.arange(ids.shape[1])[None]
    rotary = lab.model.gpt_neox.rotary_emb if arch == "gpt_neox" else lab.model.model.rotary_emb
    with torch.no_grad():
        cos, sin = rotary(q, pos)
    d = lab.engine.d_head
    bhtd = [x.view(*x.shape[:2], -1, d).transpose(1, 2) for x in (q, k)]
    rq, rk = module.apply_rotary_pos_emb(*bhtd, cos, sin)
    return [x.transpose(1, 2).reshape(*x.shape[:1], x.shape[2], -1) for x in (rq, rk)]


@pytest.mark.parametrize("arch", ARCHS)
def test_reads_equal_the_models_own_tensors(labs, arch):
    lab = labs[arch]
    sites = ["q", "k", "v", "pattern"] + ([] if arch == "gpt2" else ["rot_q", "rot_k"])
    run = lab.run(CLEAN, cache=[(s, L) for s in sites])
    peer = _peer_qkv(lab, arch, CLEAN)
    for n in "qkv":
        assert run.cache[n, L].shape == peer[n].shape, n
        torch.testing.assert_close(run.cache[n, L], peer[n], atol=TOL, rtol=0)
    kv_heads = getattr(lab.model.config, "num_key_value_heads", lab.n_heads)
    assert run.cache["k", L].shape[-1] == kv_heads * lab.engine.d_head
    if arch != "gpt2":
        rq, rk = _peer_rotated(lab, arch, peer["q"], peer["k"], CLEAN)
        torch.testing.assert_close(run.cache["rot_q", L], rq, atol=TOL, rtol=0)
        torch.testing.assert_close(run.cache["rot_k", L], rk, atol=TOL, rtol=0)
        assert (run.cache["rot_q", L] - run.cache["q", L]).abs().max() > 1e-3  # the rotation did something
    with torch.no_grad():
        own = lab.model(lab.to_tokens(CLEAN), output_attentions=True).attentions[L]
    torch.testing.assert_close(run.cache["pattern", L], own, atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_queries_and_keys_decide_the_pattern(labs, arch):
    lab = labs[arch]
    pairs = [("q", "k")] + ([] if arch == "gpt2" else [("rot_q", "rot_k")])
    clean = lab.run(CLEAN, cache=[(s, L) for pair in pairs for s in pair] + [("pattern", L)])
    corrupt = lab.run(CORRUPT, cache=[("pattern", L)])
    assert (corrupt.cache["pattern", L] - clean.cache["pattern", L]).abs().max() > 1e-2
    for pair in pairs:
        run = lab.run(CORRUPT, edits=[ilab.patch(s, L, source=clean) for s in pair], cache=[("pattern", L)])
        torch.testing.assert_close(run.cache["pattern", L], clean.cache["pattern", L], atol=TOL, rtol=0)
        half = lab.run(CORRUPT, edits=[ilab.patch(pair[0], L, source=clean)], cache=[("pattern", L)])
        assert (half.cache["pattern", L] - clean.cache["pattern", L]).abs().max() > 1e-3  # keys matter too


@pytest.mark.parametrize("arch", ARCHS)
def test_an_edited_pattern_is_what_the_head_writes(labs, arch):
    lab = labs[arch]
    H, d = lab.n_heads, lab.engine.d_head
    clean = lab.run(CLEAN, cache=[("pattern", L), ("v", L), ("z", L), ("attn_out", L)])
    corrupt = lab.run(CORRUPT, cache=[("z", L), ("attn_out", L)])
    # a head's output is its pattern times its values: patch both and the head writes the clean output
    run = lab.run(CORRUPT, edits=[ilab.patch("pattern", L, source=clean), ilab.patch("v", L, source=clean)],
                  cache=[("z", L), ("attn_out", L)])
    torch.testing.assert_close(run.cache["attn_out", L], clean.cache["attn_out", L], atol=TOL, rtol=0)
    assert (corrupt.cache["attn_out", L] - clean.cache["attn_out", L]).abs().max() > 1e-2
    # zero one head's pattern: that head writes nothing, the others are untouched
    z0 = lab.run(CORRUPT, edits=[ilab.zero("pattern", L, head=1)], cache=[("z", L)]).cache["z", L]
    z0, zc = z0.view(*z0.shape[:2], H, d), corrupt.cache["z", L].view(*z0.shape[:2], H, d)
    assert z0[..., 1, :].abs().max() == 0
    torch.testing.assert_close(z0[..., [0, 2, 3], :], zc[..., [0, 2, 3], :], atol=0, rtol=0)
    # doubling it at one query position doubles what it writes there (linear in the pattern)
    z2 = lab.run(CORRUPT, edits=[ilab.scale("pattern", L, 2.0, head=2, pos=-1)], cache=[("z", L)]).cache["z", L]
    z2 = z2.view(*z2.shape[:2], H, d)
    torch.testing.assert_close(z2[:, -1, 2], 2 * zc[:, -1, 2], atol=TOL, rtol=0)
    torch.testing.assert_close(z2[:, :-1], zc[:, :-1], atol=0, rtol=0)


def test_the_model_is_left_as_it_was(labs, tokenizer):
    """The probes and the attention function exist only during a run that reads or edits inside attention; an
    sdpa model stays sdpa (and its pattern is still the eager weights)."""
    model = build_model("llama")
    model.set_attn_implementation("sdpa")
    lab = ilab.Lab(model, tokenizer)
    names = [n for n, _ in model.named_modules()]
    run = lab.run(CLEAN, edits=[ilab.scale("pattern", 0, 0.5, head=0)], cache=[("pattern", 1), ("rot_q", 0)])
    assert [n for n, _ in model.named_modules()] == names
    assert model.config._attn_implementation == "sdpa"
    assert lab.hooks() == []
    torch.testing.assert_close(run.cache["pattern", 1].sum(-1), torch.ones(1, lab.n_heads, run.logits.shape[1]))


def test_gradients_reach_queries_keys_and_patterns(labs):
    lab = labs["llama"]
    run = lab.run(CLEAN, cache=[("q", L), ("rot_k", L), ("pattern", L)], grad=True)
    run.logits[0, -1].max().backward()
    for key in [("q", L), ("rot_k", L), ("pattern", L)]:
        g = run.cache[key].grad
        assert g is not None and g.abs().max() > 0, key


def test_bad_requests_say_what_to_do(labs):
    gpt2, llama = labs["gpt2"], labs["llama"]
    with pytest.raises(ilab.UnsupportedSiteError, match="no rotary embedding.*use site 'q'"):
        gpt2.run(CLEAN, cache=[("rot_q", 0)])
    with pytest.raises(ilab.OutOfRangeError, match="2 key-value heads"):
        llama.run(CLEAN, edits=[ilab.zero("k", 0, head=3)])
    llama.run(CLEAN, edits=[ilab.zero("q", 0, head=3)])  # queries have all 4 heads
    with pytest.raises(ilab.UnsupportedSiteError, match="full forwards"):
        llama.generate(CLEAN, edits=[ilab.zero("pattern", 0, head=0)], max_new_tokens=2)
    assert llama.hooks() == []


@pytest.mark.parametrize("site", ["q", "k", "v", "rot_q", "rot_k", "pattern"])
@pytest.mark.parametrize("by", [("layer", "head"), ("layer", "head", "pos")])
def test_sweeps_by_head_equal_one_patched_run_per_cell(labs, site, by):
    """Every cell of a batched, resumed sweep equals lab.run with that one head (and position) patched; k, v and
    rot_k sweep the key-value heads. Attribution runs on the same sites and layouts."""
    lab = labs["llama"]
    metric = ilab.logit_diff(" Mary", " John")
    res = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric)
    heads = 2 if site in ("k", "v", "rot_k") else lab.n_heads
    assert res.raw.shape[:2] == (lab.n_layers, heads)
    clean = lab.run(CLEAN)
    cells = [(0, 1, None), (2, heads - 1, None)] if len(by) == 2 else [(1, 0, -1), (2, 1, 5), (0, heads - 1, 3)]
    for layer, head, pos in cells:
        run = lab.run(CORRUPT, edits=[ilab.patch(site, layer, head=head, pos=pos, source=clean)])
        last = run.last_logits[0]
        want = float(last[lab.token_id(" Mary")] - last[lab.token_id(" John")])  # the metric, by hand
        got = res.raw[(layer, head) if pos is None else (layer, head, pos % res.raw.shape[-1])]
        assert abs(float(got) - want) < 1e-4, (layer, head, pos, float(got), want)
    moved = (res.raw - res.corrupt_value).abs().max()
    assert moved > 1e-3, "no cell moved the metric: the sweep patched nothing"
    est = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric, method="attribution")
    assert est.raw.shape == res.raw.shape and torch.isfinite(est.raw).all()
    if "pos" in by:  # position 0 ("When") is the same in both prompts: nothing to patch there, in either method
        torch.testing.assert_close(est.raw[..., 0], torch.full_like(est.raw[..., 0], est.corrupt_value))
        torch.testing.assert_close(res.raw[..., 0], torch.full_like(res.raw[..., 0], res.corrupt_value))
        assert (est.raw[..., 1:] - est.corrupt_value).abs().max() > 1e-4


def test_every_part_of_every_head_in_one_call(labs):
    lab = labs["llama"]
    metric = ilab.logit_diff(" Mary", " John")
    every = lab.patch_sweep_heads(CLEAN, CORRUPT, metric)
    assert list(every.results) == ["z", "q", "k", "v", "pattern"]
    for site in every.results:
        alone = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=("layer", "head"), metric=metric)
        torch.testing.assert_close(every[site].raw, alone.raw)
    assert every["k"].raw.shape[1] == 2 and every["q"].raw.shape[1] == lab.n_heads
    fig = every.figure()
    assert len(fig.data) == 5 and [a.text for a in fig.layout.annotations] == ["z", "q", "k", "v", "pattern"]
    with pytest.raises(ilab.InterplabError, match="choose among"):
        lab.patch_sweep_heads(CLEAN, CORRUPT, metric, sites=("z", "resid_pre"))

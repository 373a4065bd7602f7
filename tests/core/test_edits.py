"""Every edit kind changes exactly what it should: logits and the edited site vs hand-written hooks.

The reference applies the same arithmetic in a plain `register_forward_hook` / `register_forward_pre_hook` on the
module the site maps to (mapping written by hand in test_sites.MAPPING), with explicit per-row / per-position /
per-head loops, so selection semantics (int, list, slice, None, negative positions, heads, batch rows) are checked
independently of interplab's mask code.
"""

import json

import pytest
import torch

import interplab as ilab
from interplab.edits import Edit, edits_from_json, edits_to_json

from ._hand import hand_run
from .test_sites import MAPPING

ATOL = 1e-5
P1 = "When Mary and John went to the store, John gave a drink to"
P2 = "When John and Mary went to the store, Mary gave a drink to"
P3 = "After the party, Alice gave a book to Bob because Bob asked"


def _sel(sel, n):
    """Reference meaning of a selection over n items (None = all; negatives count from the end)."""
    if sel is None:
        return list(range(n))
    if isinstance(sel, slice):
        return list(range(n))[sel]
    items = sel if isinstance(sel, (list, tuple)) else [sel]
    return [i + n if i < 0 else i for i in items]


def edit_rows(t, fn, pos=None, head=None, batch=None, d_head=8):
    """t with fn(vector, row, position) applied at each selected (row, position[, head]) — a plain loop."""
    t = t.clone()
    for b in _sel(batch, t.shape[0]):
        for p in _sel(pos, t.shape[1]):
            if head is None:
                t[b, p] = fn(t[b, p], b, p)
            else:
                for h in _sel(head, t.shape[-1] // d_head):
                    cols = slice(h * d_head, (h + 1) * d_head)
                    t[b, p, cols] = fn(t[b, p, cols], b, p)
    return t


def _point(arch, site, layer):
    path, io, _ = MAPPING[arch][site]
    return path.format(L=layer), io


def check(lab, arch, prompts, edits, hand_edits, sites):
    """Run interplab with `edits`; run the plain model with `hand_edits` [(site, layer, fn)]; compare logits and
    every (site, layer) in `sites` (after the edit)."""
    model = lab.model
    ids, mask, _ = lab.engine.encode(prompts)  # token ids only; the reference forward is plain PyTorch
    hooks = []
    for site, layer, fn in hand_edits:
        if site == "resid_mid":  # no module outputs it: change what attention adds to the block's input
            hooks += _mid_edit(arch, layer, fn)
            continue
        path, io = _point(arch, site, layer)
        hooks.append((path, io, fn))
    cap = []
    for site, layer in sites:
        path, io = _point(arch, site, layer)
        cap.append(((site, layer), path, io, 0))
    want_logits, want = hand_run(model, ids, mask, edits=hooks, capture=cap)
    run = lab.run(prompts, edits=edits, cache=[s if s[0] == "embed" else s for s in sites])
    assert torch.allclose(run.logits, want_logits, atol=ATOL), (run.logits - want_logits).abs().max()
    clean = lab.run(prompts).logits
    assert not torch.allclose(run.logits, clean, atol=1e-4), "the edit changed nothing: a vacuous test"
    for key, w in want.items():
        got = run.cache[key[0] if key[0] == "embed" else key]
        assert torch.allclose(got, w, atol=ATOL), (key, (got - w).abs().max())
    return run


def _mid_edit(arch, layer, fn):
    """Hand edits that set the mid-layer residual to fn(resid_pre + attn_out): the block input is kept, and
    attention's output becomes fn(...) - resid_pre, so the block's own add yields the edited residual everywhere."""
    block, _ = _point(arch, "resid_pre", layer)
    attn, _ = _point(arch, "attn_out", layer)
    pre = {}

    def keep(t):
        pre["x"] = t
        return t
    return [(block, "input", keep), (attn, "output", lambda t: fn(pre["x"] + t) - pre["x"])]


def _capture(lab, arch, prompts, site, layers):
    ids, mask, _ = lab.engine.encode(prompts)
    cap = []
    for L in layers:
        path, io = _point(arch, site, L)
        cap.append((L, path, io, 0))
    return hand_run(lab.model, ids, mask, capture=cap)[1]


@pytest.fixture(params=["gpt2", "llama"])
def arch_lab(request, models, tokenizer):
    return request.param, ilab.Lab(models[request.param], tokenizer)


def test_equal_length_prompts(tokenizer):
    assert len(tokenizer(P1)["input_ids"]) == len(tokenizer(P2)["input_ids"])


# ---- one test per edit kind ------------------------------------------------------------------------------------

def test_zero(arch_lab):
    arch, lab = arch_lab
    check(lab, arch, P1, [ilab.zero("resid_pre", 1)],
          [("resid_pre", 1, lambda t: edit_rows(t, lambda v, b, p: v * 0))], [("resid_pre", 1)])
    # several layers (list), one negative position, one head of z
    check(lab, arch, P1, [ilab.zero("z", [0, 2], pos=-1, head=1)],
          [("z", L, lambda t: edit_rows(t, lambda v, b, p: v * 0, pos=-1, head=1)) for L in (0, 2)],
          [("z", 0), ("z", 2)])
    # a slice of positions on mlp_out, all layers (None)
    check(lab, arch, P1, [ilab.zero("mlp_out", None, pos=slice(2, 5))],
          [("mlp_out", L, lambda t: edit_rows(t, lambda v, b, p: v * 0, pos=slice(2, 5))) for L in range(3)],
          [("mlp_out", L) for L in range(3)])


def test_patch_from_run(arch_lab):
    arch, lab = arch_lab
    src_run = lab.run(P2)
    src = _capture(lab, arch, P2, "resid_post", [0, 1])
    check(lab, arch, P1, [ilab.patch("resid_post", slice(0, 2), pos=[1, 3], source=src_run)],
          [("resid_post", L, lambda t, L=L: edit_rows(t, lambda v, b, p: src[L][0, p], pos=[1, 3])) for L in (0, 1)],
          [("resid_post", 0), ("resid_post", 1)])
    # per-head z patch: heads [0, 3], every position, one layer
    srcz = _capture(lab, arch, P2, "z", [1])[1]
    check(lab, arch, P1, [ilab.patch("z", 1, head=[0, 3], source=src_run)],
          [("z", 1, lambda t: _patch_heads(t, srcz, [0, 3]))],
          [("z", 1)])


def _patch_heads(t, src, heads, d_head=8):
    t = t.clone()
    for h in heads:
        t[..., h * d_head:(h + 1) * d_head] = src[..., h * d_head:(h + 1) * d_head]
    return t


def test_patch_from_tensor(arch_lab):
    arch, lab = arch_lab
    T = lab.to_tokens(P1).shape[1]
    g = torch.Generator().manual_seed(1)
    value = torch.randn(1, T, lab.d_model, generator=g)
    check(lab, arch, P1, [ilab.patch("attn_out", 2, pos=-2, source=value)],
          [("attn_out", 2, lambda t: edit_rows(t, lambda v, b, p: value[0, p], pos=-2))], [("attn_out", 2)])
    # a [pos, width] tensor (no batch dim) broadcasts over rows
    check(lab, arch, [P1, P2], [ilab.patch("resid_pre", 0, source=value[0])],
          [("resid_pre", 0, lambda t: edit_rows(t, lambda v, b, p: value[0, p]))], [("resid_pre", 0)])


def test_mean_ablate(arch_lab):
    arch, lab = arch_lab
    ref_a, ref_b = lab.run([P1, P2]), lab.run(P2)
    acts = _capture(lab, arch, [P1, P2], "mlp_out", [0])[0]
    acts_b = _capture(lab, arch, P2, "mlp_out", [0])[0]
    mean = torch.cat([acts, acts_b]).mean(0)  # equal lengths: per-position mean over the 3 rows
    check(lab, arch, P1, [ilab.mean_ablate("mlp_out", 0, pos=[0, -1], reference=[ref_a, ref_b])],
          [("mlp_out", 0, lambda t: edit_rows(t, lambda v, b, p: mean[p], pos=[0, -1]))], [("mlp_out", 0)])
    # references of different lengths: the mean over every real token
    short = "The capital of France is"
    r1, r2 = lab.run(short), lab.run(P3)
    a1 = _capture(lab, arch, short, "resid_mid", [1])[1][0]
    a2 = _capture(lab, arch, P3, "resid_mid", [1])[1][0]
    tok_mean = torch.cat([a1, a2]).mean(0)
    check(lab, arch, P1, [ilab.mean_ablate("resid_mid", 1, reference=[r1, r2])],
          [("resid_mid", 1, lambda t: edit_rows(t, lambda v, b, p: tok_mean))], [("resid_mid", 1)])


def test_scale(arch_lab):
    arch, lab = arch_lab
    check(lab, arch, P1, [ilab.scale("embed", factor=0.5)],
          [("embed", None, lambda t: t * 0.5)], [("embed", None)])
    check(lab, arch, P1, [ilab.scale("z", None, 2.0, head=slice(1, 3))],
          [("z", L, lambda t: edit_rows(t, lambda v, b, p: v * 2.0, head=slice(1, 3))) for L in range(3)],
          [("z", L) for L in range(3)])


def test_steer(arch_lab):
    arch, lab = arch_lab
    g = torch.Generator().manual_seed(2)
    v = torch.randn(lab.d_model, generator=g)
    check(lab, arch, P1, [ilab.steer("resid_post", -1, v, alpha=3.0, pos=-1)],
          [("resid_post", 2, lambda t: edit_rows(t, lambda x, b, p: x + 3.0 * v, pos=-1))], [("resid_post", 2)])
    vh = torch.randn(lab.engine.d_head, generator=g)  # per-head steering on z takes a d_head vector
    check(lab, arch, P1, [ilab.steer("z", 0, vh, alpha=-2.0, pos=[-1, -3], head=2)],
          [("z", 0, lambda t: edit_rows(t, lambda x, b, p: x - 2.0 * vh, pos=[-1, -3], head=2))], [("z", 0)])


def test_project(arch_lab):
    arch, lab = arch_lab
    g = torch.Generator().manual_seed(3)
    d = torch.randn(lab.d_model, generator=g)
    u = d / d.norm()
    for coeff in (0.0, 0.5):
        def fn(x, b, p, coeff=coeff):
            c = x @ u
            return x - c * u + coeff * c * u
        check(lab, arch, P1, [ilab.project("resid_mid", 1, d, coeff=coeff)],
              [("resid_mid", 1, lambda t, fn=fn: edit_rows(t, fn))], [("resid_mid", 1)])


def test_clamp(arch_lab):
    arch, lab = arch_lab
    g = torch.Generator().manual_seed(4)
    d = torch.randn(lab.d_model, generator=g)
    u = d / d.norm()

    def fn(x, b, p):
        c = x @ u
        return x + (c.clamp(0.2, 0.3) - c) * u
    check(lab, arch, P1, [ilab.clamp("resid_pre", 2, d, lo=0.2, hi=0.3)],
          [("resid_pre", 2, lambda t: edit_rows(t, fn))], [("resid_pre", 2)])

    def fn_hi(x, b, p):
        c = x @ u
        return x + (torch.clamp(c, max=-1.0) - c) * u  # only an upper bound
    check(lab, arch, P1, [ilab.clamp("resid_post", 0, d, hi=-1.0, pos=slice(None, None, 2))],
          [("resid_post", 0, lambda t: edit_rows(t, fn_hi, pos=slice(None, None, 2)))], [("resid_post", 0)])


def test_set_value(arch_lab):
    arch, lab = arch_lab
    g = torch.Generator().manual_seed(5)
    v = torch.randn(lab.d_model, generator=g)
    check(lab, arch, P1, [ilab.set_value("mlp_out", 1, v, pos=0)],
          [("mlp_out", 1, lambda t: edit_rows(t, lambda x, b, p: v, pos=0))], [("mlp_out", 1)])


def test_batch_selection(arch_lab):
    arch, lab = arch_lab
    for batch in (1, [0], None, slice(1, None)):
        check(lab, arch, [P1, P2], [ilab.scale("resid_pre", 0, 0.0, batch=batch, pos=[2, -1])],
              [("resid_pre", 0, lambda t, batch=batch: edit_rows(t, lambda x, b, p: x * 0, pos=[2, -1], batch=batch))],
              [("resid_pre", 0)])


def test_edits_compose_in_program_order(arch_lab):
    arch, lab = arch_lab
    g = torch.Generator().manual_seed(6)
    v = torch.randn(lab.d_model, generator=g)
    # steer then scale at one point: (h + v) * 2 at the last position, h * 2 elsewhere
    check(lab, arch, P1, [ilab.steer("resid_pre", 1, v, pos=-1), ilab.scale("resid_pre", 1, 2.0)],
          [("resid_pre", 1, lambda t: edit_rows(t, lambda x, b, p: x + v, pos=-1) * 2.0)], [("resid_pre", 1)])


# ---- JSON round trip ---------------------------------------------------------------------------------------------

def _every_kind(lab):
    g = torch.Generator().manual_seed(7)
    v = torch.randn(lab.d_model, generator=g)
    T = lab.to_tokens(P1).shape[1]
    src_run = lab.run(P2)
    return [
        ilab.patch("resid_post", slice(0, 2), pos=[1, 3], source=src_run),
        ilab.patch("z", 1, head=[0, 3], source=src_run),
        ilab.patch("attn_out", 2, pos=-2, source=torch.randn(1, T, lab.d_model, generator=g)),
        ilab.zero("z", [0, 2], pos=-1, head=1),
        ilab.mean_ablate("mlp_out", 0, reference=[lab.run([P1, P2]), src_run]),
        ilab.scale("embed", factor=0.5),
        ilab.steer("resid_post", 2, v, alpha=3.0, pos=-1),
        ilab.project("resid_mid", 1, v, coeff=0.25),
        ilab.clamp("resid_pre", 2, v, lo=-0.1, hi=0.1),
        ilab.set_value("mlp_out", 1, v, pos=0),
        ilab.zero("resid_pre", 1, pos=slice(2, None, 2), batch=0),
    ]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def test_json_round_trip_every_kind(models, tokenizer):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    edits = _every_kind(lab)
    assert {e.op for e in edits} >= {"patch", "zero", "mean", "scale", "steer", "project", "clamp", "set"}
    for e in edits:
        d = Edit.from_json(e.to_json())
        for f in ("op", "site", "layer", "pos", "head", "batch", "factor", "alpha", "coeff", "lo", "hi", "vector"):
            assert _same(getattr(e, f), getattr(d, f)), (e.op, f, getattr(e, f), getattr(d, f))
        assert d.to_json() == e.to_json()  # stable
        # each edit alone: decoded edit, run on a fresh Lab (no memo, no cached source runs), same logits
        fresh = ilab.Lab(lab.model, tokenizer)
        want = lab.run([P1, P2], edits=[e]).logits
        got = fresh.run([P1, P2], edits=[d]).logits
        assert torch.equal(got, want), e.describe()
    # a patch from a Run serialises as the source prompts (and their edits) and re-runs them
    j = json.loads(edits[0].to_json())
    assert j["source"]["__source__"] == [P2]
    # the whole list
    s = edits_to_json(edits)
    decoded = edits_from_json(s)
    assert edits_to_json(decoded) == s
    fresh = ilab.Lab(lab.model, tokenizer)
    assert torch.equal(fresh.run(P1, edits=decoded).logits, lab.run(P1, edits=edits).logits)


def test_json_patch_source_with_its_own_edits(models, tokenizer):
    """A patch whose source run was itself edited: the decoded patch re-runs the source with those edits."""
    lab = ilab.Lab(models["gpt2"], tokenizer)
    src = lab.run(P2, edits=[ilab.zero("mlp_out", 0)])
    e = ilab.patch("resid_pre", 2, source=src)
    d = Edit.from_json(e.to_json())
    fresh = ilab.Lab(lab.model, tokenizer)
    want = lab.run(P1, edits=[e]).logits
    assert torch.equal(fresh.run(P1, edits=[d]).logits, want)
    plain_src = lab.run(P1, edits=[ilab.patch("resid_pre", 2, source=lab.run(P2))]).logits
    assert not torch.allclose(plain_src, want)  # the source's own edit mattered


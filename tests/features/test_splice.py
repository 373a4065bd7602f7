"""Splicing an SAE: edits on features against hooks written out here with register_forward_hook /
register_forward_pre_hook on ioi-tiny's own modules, computing the SAE by hand (tests/features/_saes.py); the
unchanged splice gives the model's own logits; generation, bound edits, the log and bad input."""

import json

import pytest
import torch

import interplab as ilab
from interplab.errors import (
    InterplabError,
    LoadError,
    NumberError,
    OutOfRangeError,
    UnsupportedSiteError,
    VectorError,
)

from ._saes import hand_decode, hand_encode, random_sae

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def _ids(lab, prompt):
    return torch.tensor([lab.tokenizer(prompt)["input_ids"]])


def hand(lab, prompt, where, fn, generate=0):
    """Logits (or greedy tokens) of ioi-tiny with fn applied to the site by a hook written here. where: (block,
    'pre' | 'post' | 'mlp' | 'z')."""
    block, kind = where
    h = lab.model.transformer.h[block]
    if kind == "pre":
        handle = h.register_forward_pre_hook(
            lambda m, args, kw: ((fn(args[0]), *args[1:]), kw) if args else (args, {**kw, "hidden_states": fn(
                kw["hidden_states"])}), with_kwargs=True)
    elif kind == "post":
        handle = h.register_forward_hook(lambda m, a, out: fn(out) if isinstance(out, torch.Tensor) else (
            fn(out[0]), *out[1:]))
    elif kind == "mlp":
        handle = h.mlp.register_forward_hook(lambda m, a, out: fn(out))
    elif kind == "attn":
        handle = h.attn.register_forward_hook(lambda m, a, out: (fn(out[0]), *out[1:]))
    elif kind == "wte":  # the token embedding (interplab's embed: GPT-2 adds positions after it)
        handle = lab.model.transformer.wte.register_forward_hook(lambda m, a, out: fn(out))
    else:  # z: the input of the attention's output projection
        handle = h.attn.c_proj.register_forward_pre_hook(lambda m, args: (fn(args[0]), *args[1:]))
    try:
        with torch.no_grad():
            ids = _ids(lab, prompt)
            if generate:
                out = lab.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=generate,
                                         do_sample=False, pad_token_id=lab.engine.pad_id)
                return out[0, ids.shape[1]:]
            return lab.model(input_ids=ids).logits.float()
    finally:
        handle.remove()


def spliced(sae, change):
    """x -> decode(change(encode(x))) + (x - decode(encode(x))), all by hand, in float64."""
    def fn(x):
        f = hand_encode(sae, x)
        return (hand_decode(sae, change(f.clone(), x)) + (x.double() - hand_decode(sae, f))).to(x.dtype)
    return fn


def test_unchanged_splice_gives_the_models_own_logits(lab):
    sae = random_sae("standard", "resid_pre", 2)
    own = lab.run(CLEAN).logits
    for e in (ilab.scale(sae, 1.0, feature=None), ilab.patch(sae, source=lab.run(CLEAN)),
              ilab.scale(sae, 1.0, feature=[3, 5], pos=-1)):
        assert torch.equal(lab.run(CLEAN, [e]).logits, own), e.describe()
    # written out by hand: decode(encode(x)) + error = x up to rounding
    assert (hand(lab, CLEAN, (2, "pre"), spliced(sae, lambda f, x: f)) - own).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ["standard", "topk", "jumprelu", "gated"])
@pytest.mark.parametrize("site, where", [("resid_pre", "pre"), ("resid_post", "post"), ("mlp_out", "mlp"),
                                         ("z", "z"), ("attn_out", "attn"), ("embed", "wte")])
def test_feature_edits_equal_hand_written_hooks(lab, arch, site, where):
    layer = None if site == "embed" else 1
    sae = random_sae(arch, site, layer, seed=3)
    x = lab.run(CLEAN, cache=[(site, layer)]).cache[site, layer]
    acts = sae.encode(x)[0]
    live = int((acts > 0).sum(0).argmax())  # a feature that fires somewhere: its edits change something
    pos = int(acts[:, live].argmax())

    def zero_at(f, x):
        f[:, pos, live] = 0
        return f

    def times(f, x):
        f[..., live] *= 3.0
        return f

    def set_to(f, x):
        f[..., [live, 0]] = torch.tensor([2.5, 1.0], dtype=f.dtype)
        return f

    src = hand_encode(sae, lab.run(CORRUPT, cache=[(site, layer)]).cache[site, layer])
    moved = int((src[0] - acts.double()).abs().sum(0).argmax())  # the feature the corrupt prompt changes most

    def patched(f, x):
        f[..., moved] = src[..., moved]
        return f

    cases = [(ilab.zero(sae, feature=live, pos=pos), spliced(sae, zero_at)),
             (ilab.scale(sae, 3.0, feature=live), spliced(sae, times)),
             (ilab.set_value(sae, [2.5, 1.0], feature=[live, 0]), spliced(sae, set_to)),
             (ilab.patch(sae, feature=moved, source=lab.run(CORRUPT)), spliced(sae, patched)),
             (ilab.steer(sae, feature=live, alpha=-2.0, pos=[1, 2]),
              lambda x: torch.cat([x[:, :1], x[:, 1:3] - 2.0 * sae.W_dec[live], x[:, 3:]], 1))]
    own = lab.run(CLEAN).logits
    for e, fn in cases:
        got = lab.run(CLEAN, [e]).logits
        want = hand(lab, CLEAN, (1, where), fn)  # (the block is not read for embed)
        assert (got - want).abs().max() <= 1e-4, e.describe()
        assert (got - own).abs().max() > 1e-3, f"{e.describe()} changed nothing: the comparison proves nothing"
    assert lab.hooks() == []


def test_feature_acts_and_top_features(lab):
    sae = random_sae("topk", "resid_pre", 2, k=6)
    acts = lab.feature_acts([CLEAN, "When Mary went"], sae)
    n = len(lab.to_str_tokens(CLEAN))
    assert acts.shape == (2, n, 64)
    x = lab.run(CLEAN, cache=[("resid_pre", 2)]).cache["resid_pre", 2][0]
    assert torch.allclose(acts[0].double(), hand_encode(sae, x), atol=1e-5)
    assert (acts[1, 3:] == 0).all() and (acts[1, :3] != 0).any()  # padding reads 0
    top = lab.features(CLEAN, sae, k=3)
    assert top.ids.shape == (n, 3) and top.at(0)[0][0] == int(acts[0, 0].argmax())


def test_generation_bound_edits_and_the_last_logits_path(lab):
    sae = random_sae("standard", "resid_post", 2, seed=1)
    steer = ilab.steer(sae, feature=8, alpha=300.0)  # ioi-tiny's answer holds against weaker pushes
    want = hand(lab, CLEAN, (2, "post"), lambda x: x + 300.0 * sae.W_dec[8], generate=4)
    gen = lab.generate(CLEAN, [steer], max_new_tokens=4, do_sample=False)
    assert gen.ids[0].tolist() == want.tolist()
    plain = lab.generate(CLEAN, [], max_new_tokens=4, do_sample=False)
    assert plain.ids[0].tolist() != want.tolist()  # the steer matters here
    zero = ilab.zero(sae, feature=None, pos=-1)
    full = lab.run(CLEAN, [zero]).last_logits
    assert torch.allclose(lab.engine.last_logits(CLEAN, [zero]), full, atol=1e-5)  # the click path (resumed forward)
    with lab.edit([zero]):
        with torch.no_grad():
            bound = lab.model(input_ids=_ids(lab, CLEAN)).logits[:, -1].float()
    assert torch.allclose(bound, full, atol=1e-5)
    assert lab.hooks() == []


def test_edits_serialise_by_the_saes_folder(lab, tmp_path):
    sae = random_sae("jumprelu", "resid_pre", 3, seed=2)
    sae.save(tmp_path / "sae")
    loaded = ilab.SAE.load(tmp_path / "sae")
    edits = [ilab.zero(loaded, feature=[1, 2], pos=-1), ilab.steer(loaded, feature=4, alpha=2.0)]
    text = ilab.edits_to_json(edits)
    assert json.loads(text)[0]["sae"]["__sae__"]["source"] == str((tmp_path / "sae").resolve())
    back = ilab.edits_from_json(text)
    assert torch.equal(lab.run(CLEAN, back).logits, lab.run(CLEAN, edits).logits)
    fresh = ilab.Lab.load("ioi-tiny")  # a log of this run only (the module's lab logged in-memory SAEs too)
    fresh.run(CORRUPT, edits)  # logged: the intervention log's code re-runs it from the SAE's folder
    code = fresh.log.to_code()
    assert "edits_from_json" in code and str(tmp_path / "sae") in code
    scope = {}
    exec(code, scope)
    last = max((k for k in scope if k.startswith("run_")), key=lambda k: int(k[4:]))
    assert torch.equal(scope[last].logits, lab.run(CORRUPT, edits).logits)
    # an SAE built in memory is logged, but cannot be read back: the error says to save it
    with pytest.raises(LoadError, match="sae.save"):
        ilab.edits_from_json(ilab.edits_to_json([ilab.zero(sae, feature=1)]))


def test_bad_input_is_refused_and_leaves_nothing_behind(lab):
    sae = random_sae("standard", "resid_pre", 2)
    before = [p.detach().clone() for p in lab.model.parameters()]
    with pytest.raises(OutOfRangeError, match="feature 64 out of range"):
        ilab.zero(sae, feature=64)
    for make in (lambda: ilab.zero(sae, feature=-1), lambda: ilab.steer(sae, feature=[3, -1], alpha=1.0),
                 lambda: lab.feature(sae, -1)):  # -1 is not the last feature: refused, with the index to write
        with pytest.raises(OutOfRangeError, match="negative feature indices are refused.*write feature=63"):
            make()
    with pytest.raises(NumberError, match="not a finite number"):
        ilab.steer(sae, feature=1, alpha=float("nan"))
    with pytest.raises(InterplabError, match="needs feature="):
        ilab.steer(sae, alpha=1.0)
    with pytest.raises(VectorError, match="not vector="):
        ilab.steer(sae, vector=torch.ones(128), feature=1)
    with pytest.raises(UnsupportedSiteError, match="mean_ablate on an SAE|mean on an SAE"):
        ilab.mean_ablate(sae, reference=lab.run(CLEAN), feature=1)
    with pytest.raises(InterplabError, match="needs an SAE"):
        ilab.zero("resid_pre", 2, feature=1)
    with pytest.raises(InterplabError, match="drop layer="):
        ilab.zero(sae, 2, feature=1)
    wide = random_sae("standard", "resid_pre", 2, d_in=64)
    with pytest.raises(OutOfRangeError, match="d_in=64 but resid_pre of this model is 128"):
        lab.run(CLEAN, [ilab.zero(wide, feature=1)])
    deep = random_sae("standard", "resid_pre", 7)
    with pytest.raises(OutOfRangeError, match="the model has 4 layers"):
        lab.run(CLEAN, [ilab.zero(deep, feature=1)])
    with pytest.raises(OutOfRangeError, match="d_in=64"):
        lab.feature_acts(CLEAN, wide)
    with pytest.raises(UnsupportedSiteError, match="not 'embed'"):
        lab.patch_sweep(CLEAN, CORRUPT, random_sae("standard", "embed", None), by=("feature", "pos"),
                        metric=ilab.logit_diff(" Mary", " John"))
    assert lab.hooks() == []
    assert all(torch.equal(a, b) for a, b in zip(before, lab.model.parameters()))

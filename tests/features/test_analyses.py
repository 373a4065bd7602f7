"""Feature analyses on ioi-tiny with its shipped SAE: attribution over every feature x position against exact
feature patching, exact sweep cells against lab.run with ilab.patch(sae, ...), logit effects against the model's
own weights and a real steer, top contexts against a brute-force scan."""

import pytest
import torch

import interplab as ilab
from interplab.errors import InterplabError, OutOfRangeError
from interplab.zoo import corpus_repeated_name
from interplab.zoo.train_ioi_tiny_sae import corpus_texts

from ._saes import random_sae


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def sae():
    return ilab.SAE.load("ioi-tiny-sae")


def _pairs(lab, n=4):
    data = corpus_repeated_name.ioi_dataset(400, "test", seed=3)
    n_tok = len(lab.to_str_tokens(data[0]["clean"]))
    same = [d for d in data if len(lab.to_str_tokens(d["clean"])) == n_tok][:n]
    return ([d["clean"] for d in same], [d["corrupt"] for d in same],
            ilab.logit_diff([d["answer"] for d in same], [d["wrong"] for d in same]))


def test_attribution_against_exact_feature_patching(lab, sae):
    clean, corrupt, metric = _pairs(lab)
    est = ilab.analyses.features.feature_attribution(lab, clean, corrupt, sae, metric)
    via_sweep = lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), metric, method="attribution")
    assert torch.equal(via_sweep.raw, est.raw)
    n_pos = len(lab.to_str_tokens(clean[0]))
    assert est.raw.shape == (sae.d_sae, n_pos) and est.by == ("feature", "pos") and est.sae is sae
    top = est.raw.sub(est.corrupt_value).abs().amax(1).topk(16).indices.tolist()
    exact = lab.patch_sweep(clean, corrupt, sae, by=("feature", "pos"), metric=metric, features=top,
                            progress=False)
    assert exact.labels["feature"] == top and exact.clean_value == pytest.approx(est.clean_value, abs=1e-4)
    a = est.raw[top] - est.corrupt_value
    b = exact.raw - exact.corrupt_value
    corr = float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])
    print(f"attribution vs exact feature patching, {len(top)} features x {n_pos} positions: r = {corr:.3f}")
    assert corr > 0.8
    # an exact cell is the patched run itself
    row, pos = divmod(int(b.abs().argmax()), n_pos)
    patched = lab.run(corrupt, [ilab.patch(sae, feature=top[row], pos=pos, source=lab.run(clean))], log=False)
    value = float(metric.bind(lab.token_id)(patched.last_logits, torch.arange(len(clean))).mean())
    assert value == pytest.approx(float(exact.raw[row, pos]), abs=1e-4)
    assert abs(value - exact.corrupt_value) > 0.1  # the compared cell moves the metric
    assert exact.cells.meaning(row, pos) == (top[row], pos, None)


def test_feature_sweeps_refuse_what_they_cannot_take(lab, sae):
    clean, corrupt, metric = _pairs(lab, 1)
    with pytest.raises(InterplabError, match="swept by \\('feature', 'pos'\\)"):
        lab.patch_sweep(clean, corrupt, sae, by=("layer", "pos"), metric=metric)
    with pytest.raises(InterplabError, match="pass site=sae"):
        lab.patch_sweep(clean, corrupt, "resid_pre", by=("feature", "pos"), metric=metric)
    with pytest.raises(OutOfRangeError, match="feature 512 out of range"):
        lab.patch_sweep(clean, corrupt, sae, by=("feature", "pos"), metric=metric, features=[512])
    assert lab.hooks() == []


def test_logit_effects_through_the_final_norm_and_unembedding(lab, sae):
    eff = lab.feature(sae, 5).logit_effects(k=4)
    m = lab.model
    d = sae.W_dec[5]
    by_hand = m.lm_head.weight.detach() @ ((d - d.mean()) * m.transformer.ln_f.weight.detach())
    assert torch.allclose(eff.values, by_hand, atol=1e-4)
    assert [t for t, _ in eff.raised] == [lab.to_string([int(i)]) for i in by_hand.topk(4).indices]
    # a small steer of that direction at the last layer's output moves the logits the same way
    last = random_sae("standard", "resid_post", 3)
    last.W_dec = sae.W_dec.clone()
    prompt = "When Mary and John went to the store, John gave a drink to"
    base = lab.run(prompt, log=False).last_logits[0]
    moved = lab.run(prompt, [ilab.steer(last, feature=5, alpha=0.05, pos=-1)], log=False).last_logits[0] - base
    corr = float(torch.corrcoef(torch.stack([moved, eff.values]))[0, 1])
    assert corr > 0.95, corr
    with pytest.raises(OutOfRangeError, match="feature 999 out of range"):
        lab.feature(sae, 999)


def test_top_contexts_equal_a_brute_force_scan(lab, sae):
    prompts = corpus_texts(120, seed=5)
    feats = lab.feature_acts(prompts[:10], sae).sum((0, 1)).topk(4).indices.tolist()  # features that fire
    calls = []
    top = ilab.analyses.features.top_contexts(lab, prompts, sae, features=feats, k=5, batch_size=16,
                                              memory_budget="2MiB",
                                              progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (120, 120) and len(calls) > 120 // 16  # batched, and the budget cut the batches smaller
    every = [(float(v), i, p) for i, text in enumerate(prompts)
             for p, v in enumerate(lab.feature_acts(text, sae)[0, :, feats[0]])]
    want = sorted(every, key=lambda e: -e[0])[:5]
    assert torch.allclose(top.values[0], torch.tensor([v for v, _, _ in want]), atol=1e-4)
    for v, i, p in zip(top.values[0], top.prompt_index[0], top.pos[0]):  # each found where it says (ties allowed)
        assert float(lab.feature_acts(prompts[int(i)], sae)[0, int(p), feats[0]]) == pytest.approx(float(v), abs=1e-4)
    ex = top.examples(feats[0], n=1)[0]
    (one,) = lab.feature(sae, feats[0]).top_contexts(prompts, k=1, progress=False)  # other batches, same top
    assert one["value"] == pytest.approx(ex["value"], abs=1e-4)  # (equal prefixes tie: the prompt may differ)
    assert one["acts"][one["pos"]] == pytest.approx(one["value"], abs=1e-4)
    assert ex["acts"][ex["pos"]] == pytest.approx(ex["value"], abs=1e-4) and len(ex["tokens"]) == len(ex["acts"])
    assert lab.hooks() == []


@pytest.mark.parametrize("site, layer", [("embed", None), ("resid_mid", 1), ("z", 3), ("attn_out", 0),
                                         ("mlp_out", 2), ("resid_post", 3)])
def test_top_contexts_and_acts_on_every_site(lab, site, layer):
    sae = random_sae("standard", site, layer)
    prompts = ["When Mary and John went to the store, John gave a drink to", "After Tom and Sue left, Sue called"]
    top = ilab.analyses.features.top_contexts(lab, prompts, sae, [1, 2], k=3, progress=False)
    acts = lab.feature_acts(prompts, sae)
    assert float(top.values[0, 0]) == pytest.approx(float(acts[..., 1].max()), abs=1e-4)
    assert lab.hooks() == []

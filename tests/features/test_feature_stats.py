"""Feature statistics (interplab.analyses.feature_stats) against a dense computation written out here: the SAE's
activations at every token read by a hook on the model's own block (not interplab's sites), every statistic from its
definition; the disk cache (a second call reads it; a file made for another SAE or model is refused)."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from interplab.analyses.feature_stats import FeatureStats, feature_stats
from interplab.errors import EmptyPromptError, LoadError, OutOfRangeError
from interplab.zoo.train_ioi_tiny_sae import corpus_texts


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def sae():
    return ilab.SAE.load("ioi-tiny-sae")


@pytest.fixture(scope="module")
def docs():
    return corpus_texts(120, seed=3)


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_CACHE", str(tmp_path))
    return tmp_path


def dense_acts(lab, sae, docs) -> tuple[torch.Tensor, list[list[int]]]:
    """[tokens, d_sae] in corpus order, by a pre-hook on block 2 of the transformers model, one document at a time."""
    got, ids_all = [], []
    block = lab.model.transformer.h[2]
    h = block.register_forward_pre_hook(lambda m, args: got.append(args[0][0].detach().clone()))
    try:
        with torch.no_grad():
            for doc in docs:
                ids = lab.tokenizer(doc)["input_ids"]
                ids_all.append(ids)
                lab.model(torch.tensor([ids]))
    finally:
        h.remove()
    return sae.encode(torch.cat(got)), ids_all


def test_statistics_equal_their_definitions(lab, sae, docs, cache_dir):
    stats = feature_stats(lab, docs, sae, progress=False, top_k=5, n_bands=4, per_band=3, context=4)
    acts, ids = dense_acts(lab, sae, docs)
    assert stats.n_tokens == len(acts) == sum(map(len, ids))
    fires = acts > 0
    assert torch.allclose(stats.density, fires.float().mean(0), atol=1e-6)
    mx = acts.max(0).values
    assert torch.allclose(stats.max, mx, rtol=1e-4, atol=1e-4)
    mean = (acts.sum(0) / fires.sum(0).clamp(min=1))
    assert torch.allclose(stats.mean, mean, rtol=1e-4, atol=1e-4)
    assert int(stats.hist_counts.sum()) == int(fires.sum())  # every firing in one bin
    starts = torch.tensor([0] + [len(x) for x in ids]).cumsum(0)
    for f in [int(i) for i in fires.sum(0).argsort(descending=True)[:3]] + [int(fires.sum(0).argmin())]:
        page = stats.feature(f)
        col = acts[:, f]
        # the histogram: log10 bins from max/1000 to max
        lo, hi = float(col.max()) / 1000, float(col.max())
        n_bins = len(page["hist_counts"])
        edges = torch.logspace(torch.log10(torch.tensor(lo)), torch.log10(torch.tensor(hi)), n_bins + 1)
        vals = col[col > 0]
        want = torch.bucketize(vals.clamp(min=lo, max=hi * (1 - 1e-7)), edges[1:-1], right=True)
        counts = torch.bincount(want, minlength=len(edges) - 1)
        assert (torch.tensor(page["hist_counts"]) - counts).abs().sum() <= 2  # (a value on an edge may fall either way)
        # the top examples are the largest activations, with their context
        top = [e["act"] for e in page["top"]]
        assert top == sorted(top, reverse=True)
        assert torch.allclose(torch.tensor(top), col.topk(len(top)).values, rtol=1e-4, atol=1e-4)
        for e in page["top"] + [x for band in page["bands"] for x in band]:
            tok = int(starts[e["doc"]]) + e["pos"]
            assert abs(float(col[tok]) - e["act"]) <= 1e-4 * max(1.0, e["act"])
            assert lab.tokenizer.decode([ids[e["doc"]][e["pos"]]]) == e["tokens"][e["at"]]
        # bands: equal intervals of (0, max], each example inside its own
        for b, band in enumerate(page["bands"]):
            n_in = int(((col > b * hi / 4) & (col <= (b + 1) * hi / 4 + 1e-6)).sum())
            assert len(band) == min(3, n_in)
            assert all(b * hi / 4 - 1e-4 <= e["act"] <= (b + 1) * hi / 4 + 1e-4 for e in band)


def test_the_second_call_reads_the_cache_and_another_sae_is_refused(lab, sae, docs, cache_dir):
    first = feature_stats(lab, docs, sae, progress=False)
    files = list(cache_dir.rglob("*.safetensors"))
    assert len(files) == 1
    again = feature_stats(lab, docs, sae, progress=False)
    assert torch.equal(first.density, again.density) and torch.equal(first.ex_context, again.ex_context)
    other = ilab.SAE(sae.W_enc * 1.01, sae.b_enc, sae.W_dec, sae.b_dec, site="resid_pre", layer=2,
                     architecture="topk", k=sae.k)
    with pytest.raises(LoadError, match="another SAE"):
        FeatureStats.load(files[0], lab, other)
    changed = ilab.Lab.load("ioi-tiny")  # the same model with one weight changed
    with torch.no_grad():
        changed.model.transformer.wte.weight[5, 0] += 1.0
    with pytest.raises(LoadError, match="another model"):
        FeatureStats.load(files[0], changed, sae)
    assert FeatureStats.load(files[0], lab, sae).n_tokens == first.n_tokens


def test_bad_input(lab, sae, cache_dir):
    with pytest.raises(EmptyPromptError):
        feature_stats(lab, [], sae)
    with pytest.raises(EmptyPromptError):
        feature_stats(lab, "one string", sae)
    with pytest.raises(OutOfRangeError, match="budget_mb"):
        feature_stats(lab, corpus_texts(400, seed=5), sae, budget_mb=1, progress=False, cache=False)
    stats = feature_stats(lab, corpus_texts(20, seed=5), sae, progress=False, cache=False)
    with pytest.raises(OutOfRangeError, match="negative"):
        stats.feature(-1)


def test_the_shipped_statistics_are_ioi_tiny_saes_over_its_training_corpus(lab, sae):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("ship", Path(__file__).parents[2] / "scripts/ship_feature_stats.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    from interplab.analyses.feature_stats import corpus_digest

    stats = feature_stats(lab, None, sae)  # the shipped file, checked to be this SAE's and this model's
    corpus = ship.training_corpus()
    assert stats.key["corpus"] == corpus_digest(corpus) and stats.n_docs == len(corpus)
    # feature 321 (notebook 05's): a dense feature; its strongest example is where the SAE reads that value
    page = stats.feature(321)
    assert page["density"] > 0.1 and 321 in stats.dense(0.1)
    top = page["top"][0]
    acts, ids = dense_acts(lab, sae, [corpus[top["doc"]]])
    assert abs(float(acts[top["pos"], 321]) - top["act"]) <= 1e-4 * top["act"]
    assert abs(top["act"] - page["max"]) <= 1e-6 * page["max"]
    with pytest.raises(EmptyPromptError, match="ships no statistics"):
        feature_stats(lab, None, ilab.SAE(sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec, site="resid_pre", layer=2,
                                          architecture="topk", k=sae.k))


def test_feature_search_by_token_over_the_corpus_and_by_logit_effect(lab, sae, docs, cache_dir):
    stats = feature_stats(lab, docs, sae, progress=False)
    acts, ids = dense_acts(lab, sae, docs)
    token_ids = torch.tensor([t for doc in ids for t in doc])
    john = lab.token_id(" John")
    found = stats.features_for_token(john, k=5)
    assert found
    for f, mass in found:  # the activation summed over every occurrence of the token, by the dense computation
        want = float(acts[token_ids == john, f].sum())
        assert abs(mass - want) <= 1e-3 * max(1.0, want)
        page_tokens = dict(stats.feature(f)["top_tokens"])
        assert " John" in page_tokens
    # by logit effect: each feature's decoder direction through ln_f's weight (centred) and the unembedding
    from interplab.analyses.features import features_by_logit_effect

    got = features_by_logit_effect(lab, sae, " Mary", k=3)
    ln_f, W_U = lab.model.transformer.ln_f, lab.model.lm_head.weight
    d = sae.W_dec - sae.W_dec.mean(-1, keepdim=True)
    want = ((d * ln_f.weight) @ W_U[lab.token_id(" Mary")]).detach()
    assert [f for f, _ in got["raise"]] == want.topk(3).indices.tolist()
    assert [f for f, _ in got["lower"]] == (-want).topk(3).indices.tolist()
    assert abs(got["raise"][0][1] - float(want.max())) <= 1e-4 * abs(float(want.max()))

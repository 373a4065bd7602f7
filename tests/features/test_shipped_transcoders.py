"""The transcoders shipped with ioi-tiny: their card (interplab/zoo/ioi_tiny_transcoders/card.json, measured by the
training script with plain hooks on the transformers model) recomputed through interplab's Lab and
ilab.analyses.replacement, and the issue's thresholds (FVE >= 0.9 per layer, loss recovered >= 0.9 with all four
spliced, mean L0 <= 32, dead <= 10%)."""

import json

import pytest
import torch

import interplab as ilab
from interplab.zoo.train_ioi_tiny_sae import corpus_texts
from interplab.zoo.train_ioi_tiny_transcoders import DEFAULT_OUT

CARD = json.loads((DEFAULT_OUT / "card.json").read_text())


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def tcs():
    return ilab.Transcoders.load("ioi-tiny-transcoders")


def test_they_load_one_per_layer(lab, tcs):
    assert len(tcs) == lab.n_layers == len(CARD["layers"])
    assert all((t.layer, t.activation, t.k, t.d_in, t.d_out) == (i, "topk", 16, 128, 128) for i, t in enumerate(tcs))


def test_the_card_recomputed_through_the_lab(lab, tcs):
    texts = corpus_texts(CARD["held-out documents"], seed=1)
    sites = [(s, layer) for layer in range(lab.n_layers) for s in ("mlp_in", "mlp_out")]
    xs = {layer: [] for layer in range(lab.n_layers)}
    ys = {layer: [] for layer in range(lab.n_layers)}
    ce = {"clean": [0.0, 0], "spliced": [0.0, 0], "zero": [0.0, 0]}
    for i in range(0, len(texts), 100):
        batch = texts[i:i + 100]
        run = lab.run(batch, cache=sites, log=False)
        real = run.attention_mask.bool()
        for layer in range(lab.n_layers):
            xs[layer].append(run.cache["mlp_in", layer][real])
            ys[layer].append(run.cache["mlp_out", layer][real])
        spliced = ilab.analyses.replacement.replacement(lab, batch, tcs, errors=False)
        zeroed = lab.run(batch, [ilab.zero("mlp_out", layer) for layer in range(lab.n_layers)], log=False)
        keep = real[:, 1:]
        target = run.input_ids[:, 1:][keep]
        for name, logits in (("clean", run.logits), ("spliced", spliced.logits), ("zero", zeroed.logits)):
            ce[name][0] += float(torch.nn.functional.cross_entropy(logits[:, :-1][keep], target, reduction="sum"))
            ce[name][1] += int(keep.sum())
        lab.engine.clear_memo()
    for layer, want in CARD["layers"].items():
        x, y = torch.cat(xs[int(layer)]), torch.cat(ys[int(layer)])
        f = tcs[int(layer)].encode(x)
        fve = float(1 - (y - tcs[int(layer)](x)).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
        l0 = float((f > 0).sum(-1).float().mean())
        dead = float(((f > 0).sum(0) == 0).float().mean())
        assert fve == pytest.approx(want["fraction of variance explained"], abs=2e-4)
        assert l0 == pytest.approx(want["mean L0"], abs=0.01)
        assert dead == pytest.approx(want["dead share"], abs=1e-3)
        assert fve >= 0.9 and l0 <= 32 and dead <= 0.1
    clean, spliced, zero = (ce[n][0] / ce[n][1] for n in ("clean", "spliced", "zero"))
    assert zero == pytest.approx(CARD["loss"]["all MLPs zero-ablated"], abs=2e-4)
    assert clean == pytest.approx(CARD["loss"]["clean"], abs=2e-4)
    assert spliced == pytest.approx(CARD["loss"]["all four transcoders spliced"], abs=2e-4)
    recovered = (zero - spliced) / (zero - clean)
    assert recovered >= 0.9

"""The SAE shipped with ioi-tiny: its card (interplab/zoo/ioi_tiny_sae/card.json, measured by the training script
with plain hooks on the transformers model) recomputed here through interplab's Lab, SAE and edits, and the card's
thresholds (issue: FVE >= 0.90, CE loss recovered >= 0.90, mean L0 <= 32, dead features <= 10%)."""

import json

import pytest
import torch

import interplab as ilab
from interplab.zoo import corpus_repeated_name
from interplab.zoo.train_ioi_tiny_sae import DEFAULT_OUT, corpus_texts

CARD = json.loads((DEFAULT_OUT / "card.json").read_text())


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def sae():
    return ilab.SAE.load("ioi-tiny-sae")


def test_it_loads_as_a_saelens_folder_on_the_ioi_circuit(sae):
    assert (sae.site, sae.layer, sae.architecture, sae.d_in, sae.d_sae, sae.k) == ("resid_pre", 2, "topk", 128,
                                                                                   CARD["d_sae"], CARD["k"])
    assert sae.hook_name == CARD["hook_name"] == "blocks.2.hook_resid_pre"


def test_the_card_recomputed_through_the_lab(lab, sae):
    texts = corpus_texts(CARD["documents"], seed=1)
    sq_err = sq_dev = 0.0
    xs, fs, ce = [], [], {"clean": [0.0, 0], "spliced": [0.0, 0], "zero_ablated": [0.0, 0]}
    for i in range(0, len(texts), 50):
        batch = texts[i:i + 50]
        run = lab.run(batch, cache=[("resid_pre", 2)], log=False)
        real = run.attention_mask.bool()
        x = run.cache["resid_pre", 2]
        f = sae.encode(x)
        recon = sae.decode(f)
        xs.append(x[real])
        fs.append(f[real])
        spliced = lab.run(batch, [ilab.set_value("resid_pre", 2, value=recon)], log=False)
        zeroed = lab.run(batch, [ilab.zero("resid_pre", 2)], log=False)
        keep = real[:, 1:]
        target = run.input_ids[:, 1:][keep]
        for name, r in (("clean", run), ("spliced", spliced), ("zero_ablated", zeroed)):
            loss = torch.nn.functional.cross_entropy(r.logits[:, :-1][keep], target, reduction="sum")
            ce[name][0] += float(loss)
            ce[name][1] += int(keep.sum())
        lab.engine.clear_memo()  # each batch's logits once, not kept for the rest of the session
    x, f = torch.cat(xs), torch.cat(fs)
    assert len(x) == CARD["tokens"]
    sq_err = (x - sae.decode(f)).pow(2).sum()
    sq_dev = (x - x.mean(0)).pow(2).sum()
    fve = float(1 - sq_err / sq_dev)
    l0 = float((f > 0).sum(-1).float().mean())
    dead = 1 - float((f > 0).any(0).float().mean())
    loss = {k: v[0] / v[1] for k, v in ce.items()}
    recovered = (loss["zero_ablated"] - loss["spliced"]) / (loss["zero_ablated"] - loss["clean"])
    print(f"FVE {fve:.4f}  CE recovered {recovered:.4f} (clean {loss['clean']:.4f}, spliced {loss['spliced']:.4f}, "
          f"zero {loss['zero_ablated']:.4f})  mean L0 {l0:.2f}  dead {dead:.2%}")
    assert fve == pytest.approx(CARD["fraction_of_variance_explained"], abs=2e-4)
    assert recovered == pytest.approx(CARD["ce_loss_recovered"], abs=2e-4)
    assert l0 == pytest.approx(CARD["mean_l0"], abs=0.01)
    assert dead == pytest.approx(CARD["dead_features_share"], abs=1e-4)
    assert fve >= 0.90 and recovered >= 0.90 and l0 <= 32 and dead <= 0.10


def test_the_ioi_feature_evidence_through_the_lab(lab, sae):
    card = CARD["ioi_feature"]
    feature, s2 = card["feature"], card["s2_position"]
    data = corpus_repeated_name.ioi_dataset(4000, "test", seed=0)
    pairs = [d for d in data if len(lab.to_str_tokens(d["clean"])) == len(lab.to_str_tokens(card["example"]))
             and lab.to_str_tokens(d["clean"])[s2] != lab.to_str_tokens(d["corrupt"])[s2]
             and lab.to_str_tokens(d["clean"])[:s2] == lab.to_str_tokens(d["corrupt"])[:s2]][:card["pairs"]]
    assert pairs[0]["clean"] == card["example"] and len(pairs) == card["pairs"]
    clean = [d["clean"] for d in pairs]
    metric = ilab.logit_diff([d["answer"] for d in pairs], [d["wrong"] for d in pairs])

    def logit_diff(edits):
        bound = metric.bind(lab.token_id)
        return float(bound(lab.run(clean, edits, log=False).last_logits, torch.arange(len(pairs))).mean())

    acts = lab.feature_acts(clean, sae)[..., feature]  # where it fires
    assert float(acts[:, s2].mean()) == pytest.approx(card["where_it_fires"]["mean at S2"], rel=1e-4)
    assert float((acts[:, s2] > 0).float().mean()) == card["where_it_fires"]["share of pairs firing at S2"]
    assert logit_diff([]) == pytest.approx(card["logit_diff_clean"], abs=2e-3)
    ablated = logit_diff([ilab.zero(sae, feature=feature, pos=s2)])
    steered = logit_diff([ilab.steer(sae, feature=feature, alpha=card["steer_alpha_at_s2"], pos=s2)])
    assert ablated == pytest.approx(card["logit_diff_feature_ablated_at_s2"], abs=2e-3)
    assert steered == pytest.approx(card["logit_diff_steered_at_s2"], abs=2e-3)
    print(f"feature {feature} at S2 ({card['s2_token']}): logit diff {card['logit_diff_clean']:.2f}, ablated "
          f"{ablated:.2f}, steered {steered:.2f}")
    # it is tied to the task: ablating it at S2 lowers the logit difference, more than any other feature there
    assert ablated < card["logit_diff_clean"] and steered < ablated
    assert card["logit_diff_clean"] - ablated > card["ablation_drop_of_runner_up"]

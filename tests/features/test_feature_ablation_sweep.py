"""An ablation sweep over an SAE's features x positions (lab.patch_sweep(prompt, None, sae, ("feature", "pos"),
metric, baseline="zero" | "mean", ...)) against hooks written here: zeroing feature i at position p is the site's
value minus f_i * W_dec[i] there, a mean ablation sets f_i to its mean over the reference, the attribution estimate
is (baseline - f_i) * (gradient . W_dec[i]) with the gradient from autograd, and a click runs that ablation."""

import pytest
import torch

import interplab as ilab

from ._saes import hand_encode, random_sae
from .test_splice import CLEAN, CORRUPT, hand

METRIC = ilab.logit_diff(" Mary", " John")
WHERE = (1, "post")  # the SAE's site, resid_post of block 1, as the hand hook names it


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def sae():
    return random_sae(site="resid_post", layer=1, d_in=128, d_sae=64, seed=3)


def _acts(lab, sae, prompt):
    """[pos, d_sae]: the features of the site's value, encoded by hand."""
    got = {}
    hand(lab, prompt, WHERE, lambda x: got.setdefault("x", x))
    return hand_encode(sae, got["x"])[0]


def _metric(lab, logits):
    return float(logits[0, -1, lab.token_id(" Mary")] - logits[0, -1, lab.token_id(" John")])


def _set_feature(sae, feature, pos, value):
    """x -> x + (value - f) * W_dec[feature] at pos: the feature set to `value` there, the error term kept."""
    def fn(x):
        f = hand_encode(sae, x)
        out = x.double().clone()
        out[0, pos] += (value - f[0, pos, feature]) * sae.W_dec[feature].double()
        return out.to(x.dtype)
    return fn


def _live(lab, sae, n=4):
    """n features that fire on the clean prompt (their ablations change the site)."""
    f = _acts(lab, sae, CLEAN)
    return f.amax(0).topk(n).indices.tolist()


@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_feature_ablation_cells_equal_a_hand_hook_setting_the_feature(lab, sae, baseline):
    """Zero: f_i -> 0; mean: f_i -> its mean at that position over reference prompts of the prompt's length."""
    rows = _live(lab, sae)
    reference = [CLEAN, CORRUPT]
    kw = {"reference": reference} if baseline == "mean" else {}
    res = lab.patch_sweep(CLEAN, None, sae, ("feature", "pos"), METRIC, baseline=baseline, features=rows,
                          progress=False, **kw)
    mean = torch.stack([_acts(lab, sae, p) for p in reference]).mean(0)  # [pos, d_sae]
    clean = _metric(lab, hand(lab, CLEAN, WHERE, lambda x: x))
    n_pos = res.raw.shape[1]
    want = torch.empty(len(rows), n_pos)
    for r, i in enumerate(rows):
        for p in range(n_pos):
            value = 0.0 if baseline == "zero" else float(mean[p, i])
            want[r, p] = _metric(lab, hand(lab, CLEAN, WHERE, _set_feature(sae, i, p, value)))
    assert torch.allclose(res.raw, want, atol=1e-4), (res.raw - want).abs().max()
    assert torch.allclose(res.values, want - clean, atol=1e-4)
    assert float((want - clean).abs().max()) > 1e-2  # the ablations move the metric (the check can fail)
    assert f"{baseline}-ablated (each cell's feature" in res.describe()
    assert lab.hooks() == []


def test_feature_attribution_is_baseline_minus_activation_times_the_gradient_along_the_decoder(lab, sae):
    ids = torch.tensor([lab.tokenizer(CLEAN)["input_ids"]])
    got = {}
    handle = lab.model.transformer.h[1].register_forward_hook(lambda m, a, out: got.setdefault(
        "x", out if isinstance(out, torch.Tensor) else out[0]))
    try:
        logits = lab.model(input_ids=ids).logits
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(_metric_t(lab, logits), [got["x"]])
    lab.model.zero_grad(set_to_none=True)
    f = hand_encode(sae, got["x"].detach())[0]  # [pos, d_sae]
    along = grad[0].double() @ sae.W_dec.double().T  # [pos, d_sae]: d metric / d f_i
    for baseline, reference in (("zero", None), ("mean", [CORRUPT, "The capital of France is"])):
        res = lab.patch_sweep(CLEAN, None, sae, ("feature", "pos"), METRIC, method="attribution", baseline=baseline,
                              reference=reference)
        if baseline == "zero":
            target = torch.zeros_like(f)
        else:  # another length: the mean over every token of the reference
            target = torch.cat([_acts(lab, sae, p) for p in reference]).mean(0).expand_as(f)
            assert "over every token" in res.describe()
        want = ((target - f) * along).T  # [d_sae, pos]
        assert torch.allclose(res.values.double(), want, rtol=1e-3, atol=1e-6), (res.values - want).abs().max()
        assert float(want.abs().max()) > 1e-3
    assert lab.hooks() == []


def _metric_t(lab, logits):
    return logits[0, -1, lab.token_id(" Mary")] - logits[0, -1, lab.token_id(" John")]


def test_a_click_on_a_feature_ablation_cell_ablates_that_feature_there(lab, sae):
    """The heatmap of a mean-ablation sweep of features: a click sets that feature to its mean at that position,
    equal to the hand hook and to the sweep's cell."""
    rows = _live(lab, sae)
    reference = [CLEAN, CORRUPT]
    res = lab.patch_sweep(CLEAN, None, sae, ("feature", "pos"), METRIC, baseline="mean", reference=reference,
                          features=rows, progress=False)
    ex = res.show()
    lab.engine.worker.join()
    row, col = divmod(int(res.values.abs().argmax()), res.values.shape[1])
    feature = rows[row]
    assert ex.heatmap.y_labels[row] == f"F{feature}" and "mean-ablated" in ex.heatmap.title
    ex.heatmap.send_test_message({"type": "click", "row": row, "col": col, "shift": False})
    lab.engine.worker.join()
    mean = float(torch.stack([_acts(lab, sae, p)[col, feature] for p in reference]).mean())
    want = _metric(lab, hand(lab, CLEAN, WHERE, _set_feature(sae, feature, col, mean)))
    values = ex.logits.metric["values"]
    assert values["ablated"] == pytest.approx(want, abs=1e-4)
    assert values["ablated"] == pytest.approx(float(res.raw[row, col]), abs=1e-4)
    assert abs(values["change"]) > 1e-2
    assert ex.heatmap.active_edits[0]["label"].startswith(f"mean-ablate F{feature}")
    assert lab.hooks() == []

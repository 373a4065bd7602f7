"""A click on the heatmap of a sweep of an SAE's features (lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"),
...).show()) runs the exact patch of that feature at that position, against a hook written here."""

import pytest

import interplab as ilab

from ._saes import hand_encode, random_sae
from .test_splice import CLEAN, CORRUPT, hand

METRIC = ilab.logit_diff(" Mary", " John")


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def test_a_click_on_a_feature_sweeps_cell_patches_that_feature_there(lab):
    sae = random_sae(site="resid_post", layer=1, d_in=128, d_sae=64, seed=3)
    """The heatmap of lab.patch_sweep(clean, corrupt, sae, ("feature", "pos"), ...): a click runs the exact patch of
    that feature at that position (its source value into the corrupt run), equal to the hand hook."""
    res = lab.patch_sweep(CLEAN, CORRUPT, sae, ("feature", "pos"), METRIC, method="attribution")
    ex = res.show()
    lab.engine.worker.join()
    row, col = divmod(int(res.values.nan_to_num(0).abs().argmax()), res.values.shape[1])
    feature = res.labels["feature"][row]
    assert ex.heatmap.y_labels[row] == f"F{feature}" and ex.heatmap.y_title == "feature"
    assert ex.heatmap.title == "SAE resid_post L1 (64 features): denoise (attribution)"  # the SAE, not only its site
    # columns are the clean prompt's tokens (they read "H0:When", as one head's block, before), and the position
    # where the prompts differ, and the last, are columns a long axis always labels
    tokens = lab.to_str_tokens(CLEAN)
    assert ex.heatmap.x_labels == tokens and ex.heatmap.x_title == "position"
    differ = [p for p, (a, b) in enumerate(zip(lab.to_tokens(CLEAN)[0].tolist(), lab.to_tokens(CORRUPT)[0].tolist()))
              if a != b]
    assert differ and ex.heatmap.key_cols == [*differ, len(tokens) - 1]
    assert list(res.figure().layout.xaxis.ticktext) == [f"{i}: {t}" for i, t in enumerate(tokens)]
    ex.heatmap.send_test_message({"type": "click", "row": row, "col": col, "shift": False})
    lab.engine.worker.join()
    f_src = _acts(lab, sae, CLEAN)[col, feature]

    def patched(x):
        f = hand_encode(sae, x)
        out = x.double().clone()
        out[0, col] += (f_src - f[0, col, feature]) * sae.W_dec[feature].double()
        return out.to(x.dtype)

    logits = hand(lab, CORRUPT, (1, "post"), patched)
    mary, john = lab.token_id(" Mary"), lab.token_id(" John")
    assert ex.logits.metric["values"]["patched"] == pytest.approx(float(logits[0, -1, mary] - logits[0, -1, john]),
                                                                  abs=1e-4)
    assert f"F{feature}" in ex.heatmap.active_edits[0]["label"]
    assert lab.hooks() == []


def _acts(lab, sae, prompt):
    got = {}
    hand(lab, prompt, (1, "post"), lambda x: got.setdefault("x", x))
    return hand_encode(sae, got["x"])[0].float()

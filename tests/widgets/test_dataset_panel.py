"""A dataset sweep's logit panel in Chromium, bridged to the real explorer: picking a pair in its menu shows that
pair's values under that pair's name (its own answers), never under the mean's "over 8 pairs"; the values are the
model's own forward for that pair, read by hand."""

from __future__ import annotations

import pytest
from bridge import Bridge  # tests/widgets/bridge.py

import interplab as ilab
from interplab.zoo.evaluate_ioi_tiny import fixed_template_dataset

pytestmark = pytest.mark.browser


def test_the_pair_menu_names_the_pair_it_shows(page, mount, monkeypatch):
    lab = ilab.Lab.load("ioi-tiny")
    pairs = fixed_template_dataset(8)
    clean, corrupt = [p["clean"] for p in pairs], [p["corrupt"] for p in pairs]
    answers, wrongs = [p["answer"] for p in pairs], [p["wrong"] for p in pairs]
    assert len(set(zip(answers, wrongs))) > 1  # pair 5's answers are not pair 0's: the label must say which
    res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"),
                          metric=ilab.logit_diff(answers, wrongs), progress=False)
    ex = res.show()
    lab.engine.worker.join()
    b = Bridge(ex, mount, monkeypatch)
    w = b.w
    b.pump(lab)
    metric = w.sel(".interplab-logits .il-metric")
    page.wait_for_function("(s) => document.querySelector(s).textContent.includes('clean =')", arg=metric,
                           timeout=10000)
    assert page.locator(metric).text_content().startswith("mean logit diff over 8 pairs")

    page.locator(w.sel(".interplab-logits select.il-pair")).select_option(label=ex.logits.pairs[5])
    w.wait_sent(1)
    b.pump(lab)
    b.pump(lab)
    page.wait_for_function("(s) => document.querySelector(s).textContent.includes('pair 5 of 8')", arg=metric,
                           timeout=10000)
    text = page.locator(metric).text_content()
    assert text.startswith(f"logit diff {answers[5]!r} - {wrongs[5]!r}, pair 5 of 8: "), text
    assert "over 8 pairs" not in text
    # the values are pair 5's: the model's own forward, the metric by hand
    ids = lab.tokenizer([answers[5], wrongs[5]], add_special_tokens=False)["input_ids"]
    logits = lab.model(**lab.tokenizer([clean[5]], return_tensors="pt")).logits[0, -1]
    want = float(logits[ids[0][0]] - logits[ids[1][0]])
    shown = float(text.split("clean = ")[1].split()[0])
    assert shown == pytest.approx(want, abs=1e-3), (shown, want)

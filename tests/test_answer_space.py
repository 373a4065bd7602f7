"""An answer word without its leading space ('Mary') is a token a model rarely predicts after a space: when the
spaced form (' Mary') is one token too, the metric warns, naming ' Mary' (the sweep still runs, on 'Mary'), every
time (not once per kernel, Python's default), and the views say it under their metric line. No warning for the
spaced word, a token id, punctuation, or a word whose spaced form is not one token."""

from __future__ import annotations

import warnings

import pytest

import interplab as ilab

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def test_an_answer_without_its_leading_space_warns_and_names_the_spaced_one(lab):
    assert lab.token_id("Mary") != lab.token_id(" Mary")  # both single tokens, two different words to the model
    with pytest.warns(UserWarning, match=r"answer 'Mary' has no leading space.*Use ' Mary'") as caught:
        dash = lab.show(CLEAN, CORRUPT, "Mary", " John", sweep=False)
    assert not any("' John'" in str(w.message) for w in caught)  # the spaced one is fine
    # what it warns about is real: 'Mary' and ' Mary' give different clean logit differences
    logits = lab.run(CLEAN).last_logits[0]
    spaced = float(logits[lab.token_id(" Mary")] - logits[lab.token_id(" John")])
    bare = float(logits[lab.token_id("Mary")] - logits[lab.token_id(" John")])
    assert abs(spaced - bare) > 1.0, (spaced, bare)
    assert dash.explorer.session.metric(lab.run(CLEAN).last_logits).item() == pytest.approx(bare, abs=1e-4)
    assert lab.engine.worker.join(120)  # the view's own jobs (its first logit panel) end inside this test
    # the view says it too, under its metric line (the logit panel's metric trait, drawn by js/src/plot.js)
    notes = dash.explorer.logits.metric.get("notes", [])
    assert len(notes) == 1 and "answer 'Mary' has no leading space" in notes[0] and "' Mary'" in notes[0], notes
    dash.close()


def test_the_warning_is_shown_every_time_and_by_the_feature_view(lab):
    """In a fresh interpreter with Python's default warning filters (a kernel's): three binds from one line warn
    three times; a bound metric bound again (a view taking a bound metric) warns no more."""
    import os
    import subprocess
    import sys

    code = ("import interplab as ilab\nfrom interplab.zoo import load_embedded\n"
            "lab = ilab.Lab(*load_embedded('ioi-tiny'))\n"
            "for _ in range(3):\n    m = ilab.logit_diff('Mary', ' John').bind(lab.token_id)\n"
            "m.bind(lab.token_id)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("AnswerSpaceWarning: answer 'Mary' has no leading space") == 3, out.stderr[-3000:]

    sae = ilab.SAE.load("ioi-tiny-sae")
    with pytest.warns(ilab.AnswerSpaceWarning):
        view = lab.features(CLEAN, sae).show(contexts=[CLEAN], metric=ilab.logit_diff("Mary", " John"))
    assert lab.engine.worker.join(120)  # its bars and metric line come from a job on the lab's worker
    assert "answer 'Mary' has no leading space" in view.metric["notes"][0], view.metric
    view.close()


@pytest.mark.parametrize("answer", [" Mary", 504, ",", "7"])
def test_no_warning_for_spaced_words_ids_punctuation_or_words_with_no_spaced_token(lab, answer):
    if isinstance(answer, str) and answer[:1].isalnum():  # '7': ' 7' is not one token in this vocabulary
        assert len(lab.tokenizer(" " + answer, add_special_tokens=False)["input_ids"]) != 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bound = ilab.logit_diff(answer, " John").bind(lab.token_id)
        ilab.prob(answer).bind(lab.token_id)
    assert bound.notes == ()

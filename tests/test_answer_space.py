"""An answer word without its leading space ('Mary') is a token a model rarely predicts after a space: when the
spaced form (' Mary') is one token too, the metric warns, naming ' Mary' (the sweep still runs, on 'Mary'). No
warning for the spaced word, a token id, punctuation, or a word whose spaced form is not one token."""

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
    dash.close()


@pytest.mark.parametrize("answer", [" Mary", 504, ",", "7"])
def test_no_warning_for_spaced_words_ids_punctuation_or_words_with_no_spaced_token(lab, answer):
    if isinstance(answer, str) and answer[:1].isalnum():  # '7': ' 7' is not one token in this vocabulary
        assert len(lab.tokenizer(" " + answer, add_special_tokens=False)["input_ids"]) != 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ilab.logit_diff(answer, " John").bind(lab.token_id)
        ilab.prob(answer).bind(lab.token_id)

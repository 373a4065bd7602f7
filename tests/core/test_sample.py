"""lab.sample on the Hugging Face model (the vLLM engine's is in tests/vllm_engine): completions under an edit, each
token's log-probability and the scored tokens', checked against the edited model's own log-softmax over the prompt
and the completion (teacher forcing, a separate forward of the whole sequence)."""

import pytest
import torch

import interplab as ilab
from interplab.errors import InterplabError, NumberError, OutOfRangeError

PROMPTS = ["When Mary and John went to the store, John gave a drink to", "The Eiffel Tower is in the city of"]


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def _teacher_forced(lab, prompt: str, ids: list[int], edits) -> torch.Tensor:
    """[len(ids), vocab] log-softmax at the positions that predict each new token."""
    full = torch.tensor([lab.to_tokens(prompt)[0].tolist() + ids])
    n = lab.to_tokens(prompt).shape[1]
    with lab.edit(edits), torch.no_grad():
        logits = lab.model(full).logits[0].float()
    return logits.log_softmax(-1)[n - 1:n - 1 + len(ids)]


def test_sampled_log_probabilities_are_the_edited_models_own(lab):
    # (not a constant vector: GPT-2's LayerNorms remove any c * ones from the stream)
    edits = [ilab.steer("resid_post", 1, torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0)),
                        alpha=2.0)]
    s = lab.sample(PROMPTS, edits, n=3, max_new_tokens=4, temperature=1.0, seed=5, score=[" Mary", " John"])
    assert s.backend == "hf" and s.scores.shape == (2, 3, 4, 2) and len(s.texts[0]) == 3
    mary, john = lab.token_id(" Mary"), lab.token_id(" John")
    for i, p in enumerate(PROMPTS):
        for k in range(3):
            ids = s.ids[i][k]
            assert ids, "an empty completion checks nothing"
            logp = _teacher_forced(lab, p, ids, edits)
            assert torch.allclose(torch.tensor(s.logprobs[i][k]), logp[torch.arange(len(ids)), torch.tensor(ids)],
                                  atol=1e-4)
            assert torch.allclose(s.scores[i, k, :len(ids)], logp[:, [mary, john]], atol=1e-4)
    plain = lab.sample(PROMPTS, [], n=3, max_new_tokens=4, temperature=1.0, seed=5, score=[" Mary", " John"])
    assert not torch.allclose(plain.scores.nan_to_num(0), s.scores.nan_to_num(0))  # the edit is in the numbers


def test_samples_are_reproducible_by_seed_and_differ_between_samples(lab):
    # a roll call goes on with any name: samples that differ need a prompt whose next token is open
    open_prompt = "Roll call: Mary, John,"
    assert float(lab.run(open_prompt).last_logits[0].softmax(-1).max()) < 0.5
    a = lab.sample(open_prompt, n=4, max_new_tokens=5, seed=1)
    b = lab.sample(open_prompt, n=4, max_new_tokens=5, seed=1)
    assert a.ids == b.ids
    assert len({tuple(x) for x in a.ids[0]}) > 1
    assert a.mean_logprob().shape == (1, 4) and (a.mean_logprob() <= 0).all()


def test_greedy_sample_is_lab_generate(lab):
    s = lab.sample(PROMPTS, [ilab.ban_token(" Mary")], temperature=None, max_new_tokens=3)
    g = lab.generate(PROMPTS, [ilab.ban_token(" Mary")], max_new_tokens=3)
    assert [t[0] for t in s.texts] == g.texts


@pytest.mark.parametrize("kw,error", [
    ({"n": 0}, OutOfRangeError), ({"max_new_tokens": 0}, OutOfRangeError), ({"temperature": -1.0}, NumberError),
    ({"temperature": None, "n": 2}, InterplabError), ({"backend": "tpu"}, InterplabError),
    ({"backend": "vllm"}, InterplabError),
])
def test_bad_arguments_say_what_to_give(lab, kw, error):
    with pytest.raises(error):
        lab.sample(PROMPTS[0], **kw)


def test_force_token_is_refused_with_the_way_to_do_it(lab):
    with pytest.raises(InterplabError, match="end of the prompt"):
        lab.sample(PROMPTS[0], [ilab.force_token(" the", 0)])

"""Batched runs of prompts with different lengths (right-padded) equal one-by-one runs of the plain model."""

import pytest
import torch

import interplab as ilab

from ._hand import encode, hand_run
from .test_edits import edit_rows
from .test_sites import MAPPING

ATOL = 1e-5
PROMPTS = [
    "When Mary and John went to the store, John gave a drink to",
    "The capital of France is",
    "After the party, Alice gave a book to Bob",
]
SITES = [("resid_pre", 0), ("resid_post", 1), ("attn_out", 2), ("mlp_out", 0), ("z", 1), ("resid_mid", 2)]


def _point(arch, site, layer):
    path, io, _ = MAPPING[arch][site]
    return path.format(L=layer), io


@pytest.fixture(params=["gpt2", "llama", "gpt_neox"])
def arch_lab(request, models, tokenizer):
    return request.param, ilab.Lab(models[request.param], tokenizer)


def test_prompts_have_different_lengths(tokenizer):
    assert len({len(tokenizer(p)["input_ids"]) for p in PROMPTS}) == len(PROMPTS)


def test_batched_equals_one_by_one(arch_lab, tokenizer):
    arch, lab = arch_lab
    run = lab.run(PROMPTS, cache=[s for s in SITES] + ["logits"])
    assert run.lengths == [len(tokenizer(p)["input_ids"]) for p in PROMPTS]
    for i, p in enumerate(PROMPTS):
        n = run.lengths[i]
        ids, mask = encode(tokenizer, p)
        cap = [((s, L), *_point(arch, s, L), 0) for s, L in SITES]
        want_logits, want = hand_run(lab.model, ids, mask, capture=cap)
        assert torch.allclose(run.logits[i, :n], want_logits[0], atol=ATOL), (arch, i)
        assert torch.allclose(run.last_logits[i], want_logits[0, -1], atol=ATOL)
        assert torch.allclose(run.cache["logits"][i, :n], want_logits[0], atol=ATOL)
        for key, w in want.items():
            assert torch.allclose(run.cache[key][i, :n], w[0], atol=ATOL), (arch, i, key)
        # and the Lab's own one-prompt run agrees
        single = lab.run(p)
        assert torch.allclose(single.last_logits[0], run.last_logits[i], atol=ATOL)


def _edit_cases(lab):
    g = torch.Generator().manual_seed(11)
    v = torch.randn(lab.d_model, generator=g)
    return [
        ([ilab.zero("resid_pre", 1, pos=-1)],
         [("resid_pre", 1, lambda t: edit_rows(t, lambda x, b, p: x * 0, pos=-1))]),
        ([ilab.steer("resid_post", 0, v, alpha=2.0, pos=-1)],
         [("resid_post", 0, lambda t: edit_rows(t, lambda x, b, p: x + 2.0 * v, pos=-1))]),
        ([ilab.zero("z", 2, pos=[0, -2], head=[1, 3])],
         [("z", 2, lambda t: edit_rows(t, lambda x, b, p: x * 0, pos=[0, -2], head=[1, 3]))]),
        ([ilab.scale("mlp_out", [0, 1], 3.0, pos=slice(-3, None))],
         [("mlp_out", L, lambda t: edit_rows(t, lambda x, b, p: x * 3.0, pos=slice(-3, None))) for L in (0, 1)]),
    ]


def test_batched_edits_with_negative_positions(arch_lab, tokenizer):
    """pos=-1 is each row's own last real token, not the last column of the padded batch."""
    arch, lab = arch_lab
    for edits, hand in _edit_cases(lab):
        run = lab.run(PROMPTS, edits=edits, cache=[("resid_post", 2)])
        for i, p in enumerate(PROMPTS):
            n = run.lengths[i]
            ids, mask = encode(tokenizer, p)
            hooks = [(*_point(arch, s, L), fn) for s, L, fn in hand]
            want_logits, want = hand_run(lab.model, ids, mask, edits=hooks,
                                         capture=[("rp", *_point(arch, "resid_post", 2), 0)])
            assert torch.allclose(run.logits[i, :n], want_logits[0], atol=ATOL), (arch, edits[0].describe(), i)
            assert torch.allclose(run.last_logits[i], want_logits[0, -1], atol=ATOL)
            assert torch.allclose(run.cache["resid_post", 2][i, :n], want["rp"][0], atol=ATOL)
        clean = lab.run(PROMPTS)
        assert not torch.allclose(run.logits, clean.logits, atol=1e-4)  # the edit did something


def test_position_beyond_the_shortest_prompt_is_an_error(arch_lab):
    arch, lab = arch_lab
    with pytest.raises(ilab.OutOfRangeError, match="shortest prompt"):
        lab.run(PROMPTS, edits=[ilab.zero("resid_pre", 0, pos=10)])


def test_a_position_only_the_selected_longer_prompts_have_is_allowed(arch_lab, tokenizer):
    """batch= limits an edit to prompt 0 (the longest): a position beyond the shorter prompts is checked against
    the rows the edit selects, and the run equals the hand-hooked run of each prompt alone."""
    arch, lab = arch_lab
    pos = len(tokenizer(PROMPTS[1])["input_ids"]) + 2  # past prompt 1's end, inside prompt 0
    run = lab.run(PROMPTS, edits=[ilab.zero("resid_pre", 1, pos=pos, batch=0)])
    for i, p in enumerate(PROMPTS):
        ids, mask = encode(tokenizer, p)
        hooks = [(*_point(arch, "resid_pre", 1), lambda t: edit_rows(t, lambda x, b, q: x * 0, pos=pos))] if i == 0 \
            else []
        want_logits, _ = hand_run(lab.model, ids, mask, edits=hooks, capture=[])
        assert torch.allclose(run.last_logits[i], want_logits[0, -1], atol=ATOL), (arch, i)
    with pytest.raises(ilab.OutOfRangeError, match="batch= selects has"):
        lab.run(PROMPTS, edits=[ilab.zero("resid_pre", 0, pos=pos, batch=[0, 1])])

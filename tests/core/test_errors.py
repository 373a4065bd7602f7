"""Every user mistake raises an InterplabError (a ValueError) whose message says what, the allowed values, and how."""

import pytest
import torch

import interplab as ilab

P = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture()
def lab(models, tokenizer):
    return ilab.Lab(models["gpt2"], tokenizer)


def _raises(cls, fn, *words):
    with pytest.raises(cls) as ei:
        fn()
    assert isinstance(ei.value, ilab.InterplabError) and isinstance(ei.value, ValueError)
    msg = str(ei.value)
    for w in words:
        assert w in msg, f"{w!r} not in message: {msg}"
    return msg


def test_hierarchy():
    for cls in (ilab.UnknownSiteError, ilab.UnsupportedSiteError, ilab.OutOfRangeError, ilab.LengthMismatchError,
                ilab.MultiTokenAnswerError, ilab.VectorError, ilab.EmptyPromptError, ilab.LoadError):
        assert issubclass(cls, ilab.InterplabError) and issubclass(cls, ValueError)


def test_unknown_site_lists_allowed_names(lab):
    for fn in (lambda: lab.run(P, cache=["resid_psot"]), lambda: lab.run(P, edits=[ilab.zero("resid_psot", 0)])):
        msg = _raises(ilab.UnknownSiteError, fn, "resid_psot", "module_names")
        for name in ilab.SITE_NAMES:
            assert name in msg


def test_layer_out_of_range(lab):
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("resid_pre", 3)]),
            "layer=3 out of range", "has 3 layers (0..2")
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, cache=[("resid_post", 7)]), "has 3 layers (0..2")
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("mlp_out", [0, 5])]), "layer=5")


def test_head_out_of_range(lab):
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("z", 0, head=4)]),
            "head 4 out of range", "4 heads per layer (0..3)")


def test_position_out_of_range(lab):
    n = len(lab.to_str_tokens(P))
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("resid_pre", 0, pos=100)]),
            "position 100 out of range", f"{n} tokens")
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("resid_pre", 0, pos=[0, -n - 1])]),
            f"position {-n - 1}")
    _raises(ilab.OutOfRangeError, lambda: lab.run(P, edits=[ilab.zero("resid_pre", 0, batch=2)]),
            "batch row 2", "1 prompt")


def test_clean_corrupt_length_mismatch_shows_both_tokenizations(lab):
    corrupt = "When Mary and Zanzibarquux went to the store, John gave a drink to"
    msg = _raises(ilab.LengthMismatchError, lambda: lab.check_pair(P, corrupt), "clean:", "corrupt:",
                  "different lengths")
    assert "|".join(lab.to_str_tokens(P)) in msg and "|".join(lab.to_str_tokens(corrupt)) in msg
    lab.check_pair(P, "When John and Mary went to the store, Mary gave a drink to")  # equal lengths: fine


def test_multi_token_answer(lab):
    msg = _raises(ilab.MultiTokenAnswerError, lambda: lab.token_id(" Zanzibar"), "' Zanzibar'", "not one",
                  "single")
    pieces = [lab.tokenizer.decode([i]) for i in lab.tokenizer(" Zanzibar", add_special_tokens=False)["input_ids"]]
    assert "|" + "|".join(pieces) + "|" in msg
    assert "space" in _raises(ilab.MultiTokenAnswerError, lambda: lab.token_id("Zanzibar"))
    _raises(ilab.OutOfRangeError, lambda: lab.token_id(10_000), "10000")


def test_vector_of_wrong_size_and_silent_dtype_cast(lab):
    _raises(ilab.VectorError, lambda: lab.run(P, edits=[ilab.steer("resid_post", 1, torch.ones(31))]),
            "size 31", "32")
    _raises(ilab.VectorError, lambda: lab.run(P, edits=[ilab.project("resid_pre", 1, torch.ones(64))]), "64")
    _raises(ilab.VectorError, lambda: lab.run(P, edits=[ilab.steer("z", 1, torch.ones(32), head=0)]),
            "d_head", "8")
    v = torch.randn(32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = lab.run(P, edits=[ilab.steer("resid_post", 1, v.float(), alpha=2.0)]).logits
    got = lab.run(P, edits=[ilab.steer("resid_post", 1, v, alpha=2.0)]).logits  # float64: cast, no complaint
    assert got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_inf_in_a_vector(bad):
    v = torch.ones(32)
    v[3] = bad
    for make in (lambda: ilab.steer("resid_post", 1, v), lambda: ilab.project("resid_post", 1, v),
                 lambda: ilab.clamp("resid_post", 1, v, lo=0), lambda: ilab.set_value("resid_post", 1, v)):
        _raises(ilab.VectorError, make, "NaN/Inf")


def test_empty_prompt_and_empty_list(lab):
    _raises(ilab.EmptyPromptError, lambda: lab.run(""), "empty prompt")
    _raises(ilab.EmptyPromptError, lambda: lab.run("   "), "empty prompt")
    _raises(ilab.EmptyPromptError, lambda: lab.run([]), "no prompts")
    _raises(ilab.EmptyPromptError, lambda: lab.run(["ok", ""]), "empty prompt")
    _raises(ilab.EmptyPromptError, lambda: lab.to_tokens([]), "no prompts")


def test_edit_on_a_site_the_architecture_lacks(models, tokenizer):
    lab = ilab.Lab(models["gpt_neox_parallel"], tokenizer)
    _raises(ilab.UnsupportedSiteError, lambda: lab.run(P, edits=[ilab.zero("resid_mid", 0)]),
            "parallel residual", "resid_pre")


def test_head_on_a_site_without_heads(lab):
    _raises(ilab.InterplabError, lambda: lab.run(P, edits=[ilab.zero("resid_pre", 0, head=1)]), "no heads", "'z'")
    _raises(ilab.InterplabError, lambda: lab.run(P, edits=[ilab.zero("mlp_out", 0, head=0)]), "no heads")


def test_loading_pickle_only_directory_needs_allow_pickle(tmp_path, models):
    models["gpt2"].config.save_pretrained(tmp_path)
    torch.save({"x": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    _raises(ilab.LoadError, lambda: ilab.Lab.load(str(tmp_path)), "pickle", "allow_pickle=True", "safetensors")


def test_loading_unknown_hub_id_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _raises(ilab.LoadError, lambda: ilab.Lab.load("no-such-org/no-such-model-xyz"),
            "no-such-org/no-such-model-xyz", "How to fix", "offline")

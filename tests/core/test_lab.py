"""Lab: memo, the intervention log's to_code(), tokens helpers."""

import pytest
import torch

import interplab as ilab

P1 = "When Mary and John went to the store, John gave a drink to"
P2 = "When John and Mary went to the store, Mary gave a drink to"


@pytest.fixture()
def lab(models, tokenizer):
    return ilab.Lab(models["gpt2"], tokenizer, model_id="tiny-gpt2")


@pytest.fixture()
def forwards(lab):
    """Counts forwards of the model with a plain hook of the test's own."""
    n = {"n": 0}
    h = lab.model.register_forward_hook(lambda m, a, o: n.__setitem__("n", n["n"] + 1))
    yield n
    h.remove()


def test_memo_same_prompt_and_edits_same_run(lab, forwards):
    a = lab.run(P1, edits=[ilab.zero("resid_pre", 1, pos=-1)], cache=["z"])
    assert forwards["n"] == 1
    b = lab.run(P1, edits=[ilab.zero("resid_pre", 1, pos=-1)], cache=["z"])  # equal, newly built edit
    assert b is a and forwards["n"] == 1  # no forward at all
    c = lab.run(P1, edits=[ilab.zero("resid_pre", 1, pos=-2)], cache=["z"])
    d = lab.run(P1, edits=[ilab.zero("resid_pre", 2, pos=-1)], cache=["z"])
    e = lab.run(P1, cache=["z"])
    f = lab.run(P2, edits=[ilab.zero("resid_pre", 1, pos=-1)], cache=["z"])
    g = lab.run(P1, edits=[ilab.zero("resid_pre", 1, pos=-1)], cache=["resid_post"])
    h = lab.run(P1, edits=[ilab.steer("resid_pre", 1, torch.ones(32), alpha=2.0)])
    i = lab.run(P1, edits=[ilab.steer("resid_pre", 1, torch.ones(32), alpha=3.0)])
    runs = [a, c, d, e, f, g, h, i]
    assert len({id(r) for r in runs}) == len(runs) and forwards["n"] == len(runs)
    assert not torch.equal(h.logits, i.logits)
    lab.clear_memo()
    again = lab.run(P1, edits=[ilab.zero("resid_pre", 1, pos=-1)], cache=["z"])
    assert again is not a and torch.equal(again.logits, a.logits)


def test_memo_does_not_confuse_sources(lab):
    """Two patches from different source runs must not share a memo entry."""
    s1, s2 = lab.run(P2), lab.run(P1, edits=[ilab.scale("embed", factor=3.0)])
    r1 = lab.run(P1, edits=[ilab.patch("resid_post", 0, source=s1)])
    r2 = lab.run(P1, edits=[ilab.patch("resid_post", 0, source=s2)])
    assert r1 is not r2 and not torch.allclose(r1.logits, r2.logits)


def test_log_to_code_reproduces_logged_runs(lab, monkeypatch):
    g = torch.Generator().manual_seed(0)
    v = torch.randn(32, generator=g)
    lab.run(P1)  # no edits: not logged
    src = lab.run(P2)
    logged = [
        lab.run(P1, edits=[ilab.patch("resid_pre", [0, 2], pos=-1, source=src)]),
        lab.run([P1, P2], edits=[ilab.steer("resid_post", 1, v, alpha=4.0, pos=-1), ilab.zero("z", 2, head=1)]),
        lab.run(P1, edits=[ilab.project("resid_mid", 0, v), ilab.clamp("mlp_out", 1, v, lo=0.5),
                           ilab.mean_ablate("attn_out", 1, reference=[src])]),
    ]
    assert len(lab.log) == 3
    code = lab.log.to_code()
    compile(code, "<to_code>", "exec")
    assert "edits_from_json" in code and "Lab.load('tiny-gpt2'" in code
    lab.clear_memo()  # the replay must compute, not look up
    monkeypatch.setattr(ilab.Lab, "load", staticmethod(lambda *a, **k: lab))
    ns: dict = {}
    exec(code, ns)
    for i, run in enumerate(logged, 1):
        replay = ns[f"run_{i}"]
        assert replay is not run
        assert torch.equal(replay.logits, run.logits), i


def test_tokens(lab, tokenizer):
    ids = tokenizer(P1)["input_ids"]
    assert lab.to_tokens(P1).tolist() == [ids]
    strs = lab.to_str_tokens(P1)
    assert strs == [tokenizer.decode([i]) for i in ids] and "".join(strs) == P1
    batch = lab.to_tokens([P1, "The capital of France is"])
    short = tokenizer("The capital of France is")["input_ids"]
    assert batch.shape == (2, len(ids))
    assert batch[1, : len(short)].tolist() == short
    assert (batch[1, len(short):] == tokenizer.pad_token_id).all()  # right padding
    assert lab.to_string(ids) == P1


def test_token_id(lab, tokenizer):
    mary = tokenizer(" Mary", add_special_tokens=False)["input_ids"]
    assert len(mary) == 1
    assert lab.token_id(" Mary") == mary[0]
    assert lab.token_id(mary[0]) == mary[0]
    assert isinstance(lab.token_id(" Mary"), int)
    with pytest.raises(ilab.MultiTokenAnswerError):
        lab.token_id(" Maryxyzzy")


def test_facts_and_repr(lab):
    assert (lab.n_layers, lab.n_heads, lab.d_model, lab.d_head) == (3, 4, 32, 8)
    assert "gpt2" in repr(lab) and "layers=3" in repr(lab)
    assert lab.hooks() == []

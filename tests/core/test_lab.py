"""Lab: memo, the intervention log's to_code(), tokens helpers."""

import os

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
    lab.engine.clear_memo()
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
    lab.engine.clear_memo()  # the replay must compute, not look up
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
    assert (lab.n_layers, lab.n_heads, lab.d_model, lab.engine.d_head) == (3, 4, 32, 8)
    assert "gpt2" in repr(lab) and "layers=3" in repr(lab)
    assert lab.hooks() == []


@pytest.fixture()
def own_lab(tokenizer):
    """A lab on a model of its own: these tests change weights, hooks and modes."""
    from _tiny_models import make_model

    return ilab.Lab(make_model("gpt2"), tokenizer, model_id="tiny-gpt2")


def _direct(lab, prompt):
    """The model's own forward, no interplab code path: what lab.run must equal."""
    with torch.no_grad():
        return lab.model(input_ids=lab.to_tokens(prompt)).logits.float()


@pytest.mark.parametrize("change", ["no_grad_write", "optimizer_step", "load_state_dict", "new_parameter",
                                    "user_hook", "global_hook", "train_mode", "dtype"])
def test_memo_is_never_stale(own_lab, change):
    """Whatever decides a forward's result besides its inputs is in the memo key: after each change lab.run
    equals the model's own forward again (and differs from before, so the check is not vacuous)."""
    lab = own_lab
    before = lab.run(P1).logits
    assert torch.allclose(before, _direct(lab, P1), atol=1e-5)
    w = lab.model.transformer.h[-1].mlp.c_proj.weight
    cleanup = []
    if change == "no_grad_write":
        with torch.no_grad():
            w.zero_()
    elif change == "optimizer_step":
        opt = torch.optim.SGD(lab.model.parameters(), lr=1.0)
        lab.model.train()
        lab.model(input_ids=lab.to_tokens(P1), labels=lab.to_tokens(P1)).loss.backward()
        opt.step()
        lab.model.zero_grad(set_to_none=True)
        lab.model.eval()
    elif change == "load_state_dict":
        state = {k: v * 1.5 for k, v in lab.model.state_dict().items()}
        lab.model.load_state_dict(state)
    elif change == "new_parameter":
        lab.model.transformer.h[-1].mlp.c_proj.weight = torch.nn.Parameter(w.detach() * -1.0)
    elif change == "user_hook":
        h = lab.model.transformer.h[1].register_forward_hook(lambda m, a, o: o * 2.0)
        cleanup.append(h.remove)
    elif change == "global_hook":
        h = torch.nn.modules.module.register_module_forward_hook(
            lambda m, a, o: o * 0.5 if m is lab.model.transformer.h[0].mlp else None)
        cleanup.append(h.remove)
    elif change == "train_mode":
        lab.model.config.resid_pdrop = 0.5  # dropout changes the result only in train mode
        for m in lab.model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.5
        lab.model.train()
        cleanup.append(lab.model.eval)
    elif change == "dtype":
        lab.model.to(torch.bfloat16)
        cleanup.append(lambda: lab.model.to(torch.float32))
    try:
        if change == "train_mode":  # dropout draws anew each forward: check only that it was not looked up
            again = lab.run(P1)
            assert not torch.equal(again.logits, before)
            return
        after = lab.run(P1).logits
        assert not torch.allclose(after, before, atol=1e-4), "the change changed nothing: a vacuous test"
        assert torch.allclose(after, _direct(lab, P1), atol=1e-5)
        assert lab.run(P1).logits is after  # and the new result is memoised in its turn
    finally:
        for f in cleanup:
            f()
    assert torch.allclose(lab.run(P1).logits, _direct(lab, P1), atol=1e-5)


def test_a_tokenizer_without_pad_token_is_left_as_it_was(models, tokenizer):
    """GPT-2's tokenizer has no pad token: the lab pads with its eos id and does not set one on the caller's object;
    a padded batch gives each prompt the logits and greedy text it gets alone (the padding is masked)."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.pad_token = None
    assert tok.pad_token_id is None and tok.eos_token_id is not None
    lab = ilab.Lab(models["gpt2"], tok, model_id="tiny-gpt2")
    short = "The capital of France is"
    batch = lab.to_tokens([P1, short])
    n = len(tok(short)["input_ids"])
    assert (batch[1, n:] == tok.eos_token_id).all()
    assert tok.pad_token is None  # still none after the lab used it
    together = lab.run([P1, short]).logits
    alone = lab.run(short).logits
    torch.testing.assert_close(together[1, :n], alone[0], rtol=1e-4, atol=1e-4)
    gen = lab.generate([P1, short], max_new_tokens=4, greedy=True)
    assert gen.texts[1] == lab.generate(short, max_new_tokens=4, greedy=True).text
    assert tok.pad_token is None


PLUMBING = {"plan_edit", "contexts", "kv_prefix", "paired", "resolve", "warm", "worker", "residuals", "memo",
            "clear_memo", "encode", "pad_id", "as_hooked", "last_logits", "module_names", "load_options", "seed",
            "vllm", "dtype_name", "device_name"}


def test_the_lab_is_a_face_holding_an_engine(lab):
    """Tab completion is where a notebook user learns the API: at most 40 names, each documented, none of the
    engine's plumbing (a new analysis adds none: it is ilab.analyses.<module>.<function>(lab, ...),
    docs/ARCHITECTURE.md "Where to add things"); the engine is lab.engine, and its names answer there only (no
    alias on the Lab). The names are read in a fresh interpreter, as a notebook's kernel sees them (no other test's
    patches)."""
    import json
    import subprocess
    import sys

    from interplab.engine import Engine

    assert not isinstance(lab, Engine) and isinstance(lab.engine, Engine)
    code = ("import json, interplab as ilab\n"
            "from interplab.zoo import load_embedded\n"
            "lab = ilab.Lab(*load_embedded('ioi-tiny'))\n"
            "names = [n for n in dir(lab) if not n.startswith('_')]\n"
            "docs = {n: bool((getattr(type(lab), n, None).__doc__ or '').strip()) for n in names}\n"
            "print(json.dumps(docs))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    docs = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(docs) <= 40, sorted(docs)
    assert not PLUMBING & set(docs)
    assert [n for n, documented in docs.items() if not documented and n != "engine"] == []
    here = {n for n in dir(lab) if not n.startswith("_")}
    assert here >= set(docs), "this test's Lab lacks a name a fresh one has"
    for name in PLUMBING:
        assert hasattr(lab.engine, name), name
        with pytest.raises(AttributeError):
            getattr(lab, name)
    with pytest.raises(AttributeError):
        lab.no_such_name  # noqa: B018

"""Fault injection: whatever goes wrong mid-run, no interplab hook stays behind, the user's own hooks survive, and
no weight changes. Checked on the module tree itself (every module's _forward_hooks / _forward_pre_hooks)."""

import pytest
import torch
from _tiny_models import make_model

import interplab as ilab
import interplab.engine as engine

from ._hand import hooks_everywhere, param_hash

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


class Setup:
    """A fresh model with one user forward hook and one user pre-hook registered before interplab touches it."""

    def __init__(self, arch, tokenizer):
        self.model = make_model(arch)
        self.lab = ilab.Lab(self.model, tokenizer)
        self.calls = {"fwd": 0, "pre": 0}
        block = self.lab.sites.point("resid_post", 1).module
        self.user_fwd = self.model.get_submodule(block).register_forward_hook(self._fwd)
        self.user_pre = self.model.get_submodule(block).register_forward_pre_hook(self._pre)
        self.user_hooks = {id(h) for _, _, h in hooks_everywhere(self.model)}
        assert len(self.user_hooks) == 2
        self.hash = param_hash(self.model)
        self.clean_logits = self.lab.run(CLEAN).logits

    def _fwd(self, module, args, output):
        self.calls["fwd"] += 1

    def _pre(self, module, args):
        self.calls["pre"] += 1

    def assert_intact(self):
        left = [(name, kind) for name, kind, h in hooks_everywhere(self.model) if id(h) not in self.user_hooks]
        assert left == [], f"interplab hooks left on the model: {left}"
        assert {id(h) for _, _, h in hooks_everywhere(self.model)} == self.user_hooks  # the user's are still there
        assert engine.attached_hooks() == []
        assert self.lab.hooks() == []
        before = dict(self.calls)
        with torch.no_grad():
            self.model(input_ids=self.lab.to_tokens(CLEAN))
        assert self.calls["fwd"] == before["fwd"] + 1 and self.calls["pre"] == before["pre"] + 1  # and fire
        assert param_hash(self.model) == self.hash
        assert all(p.grad is None for p in self.model.parameters())
        self.lab.engine.clear_memo()
        assert torch.equal(self.lab.run(CLEAN).logits, self.clean_logits)  # the next run is a clean one


@pytest.fixture(params=["gpt2", "llama"])
def setup(request, tokenizer):
    return Setup(request.param, tokenizer)


def test_error_inside_an_edit_wrong_source_length(setup):
    short = setup.lab.run("The capital of France is")
    with pytest.raises(ilab.InterplabError, match="positions"):
        setup.lab.run(CLEAN, edits=[ilab.scale("resid_pre", 0, 2.0), ilab.patch("resid_post", 2, source=short)],
                      cache=["resid_pre", "z"])
    setup.assert_intact()


def test_error_inside_apply(setup, monkeypatch):
    calls = {"n": 0}
    real = engine.hooks.apply_edit  # the hooks module applies every edit

    def flaky(edit, h, ctx):
        calls["n"] += 1
        if calls["n"] == 2:  # the second edit, in a middle layer, after the first hook has already fired
            raise RuntimeError("boom inside apply")
        return real(edit, h, ctx)

    monkeypatch.setattr(engine.hooks, "apply_edit", flaky)
    with pytest.raises(RuntimeError, match="boom"):
        setup.lab.run(CLEAN, edits=[ilab.zero("resid_pre", 0), ilab.zero("mlp_out", 1), ilab.zero("z", 2, head=1)],
                      cache=["resid_post"])
    assert calls["n"] == 2
    monkeypatch.undo()
    setup.assert_intact()


def test_keyboard_interrupt_mid_forward(setup):
    """A Ctrl-C while a middle layer runs (simulated by a user hook raising KeyboardInterrupt once)."""
    mid = setup.model.get_submodule(setup.lab.sites.point("mlp_out", 1).module)
    fired = {"n": 0}

    def interrupt(module, args, output):
        if fired["n"] == 0:
            fired["n"] += 1
            raise KeyboardInterrupt

    h = mid.register_forward_hook(interrupt)
    setup.user_hooks.add(id(mid._forward_hooks[h.id]))
    try:
        with pytest.raises(KeyboardInterrupt):
            setup.lab.run(CLEAN, edits=[ilab.zero("resid_pre", 0), ilab.scale("z", 2, 0.5, head=0),
                                        ilab.steer("resid_post", 2, torch.ones(setup.lab.d_model))],
                          cache=["resid_pre", "pattern", "logits"])
        assert fired["n"] == 1
        # the lock is free and a second run works while the interrupting hook is still attached
        ok = setup.lab.run(CLEAN, edits=[ilab.zero("resid_pre", 0)])
        assert torch.isfinite(ok.logits).all()
    finally:
        h.remove()
    setup.user_hooks = {id(x) for _, _, x in hooks_everywhere(setup.model)}
    assert len(setup.user_hooks) == 2
    setup.assert_intact()


def test_error_in_a_metric_callback_mid_sweep(setup):
    n = {"calls": 0}

    def bad_metric(logits):
        n["calls"] += 1
        if n["calls"] > 2:  # clean and corrupt values pass; the first patched cell fails
            raise ValueError("metric exploded")
        return logits[:, 5] - logits[:, 7]

    for method in ("exact", "attribution"):
        n["calls"] = 0
        with pytest.raises(ValueError, match="metric exploded"):
            setup.lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=bad_metric, method=method,
                                  progress=False)
        setup.assert_intact()


def test_error_in_a_user_callback_mid_sweep(setup):
    def on_partial(result):
        raise RuntimeError("callback exploded")

    with pytest.raises(RuntimeError, match="callback exploded"):
        setup.lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head"),
                              metric=lambda lg: lg[:, 5] - lg[:, 7], on_partial=on_partial, progress=False)
    setup.assert_intact()

    def progress(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        setup.lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=lambda lg: lg[:, 5] - lg[:, 7],
                              progress=progress)
    setup.assert_intact()


def test_runs_never_change_a_weight(setup):
    lab = setup.lab
    g = torch.Generator().manual_seed(0)
    v = torch.randn(lab.d_model, generator=g)
    src = lab.run(CORRUPT, cache=["resid_pre", "z"])
    T = lab.to_tokens(CLEAN).shape[1]
    every = [
        ilab.patch("resid_pre", None, source=src),
        ilab.patch("z", 1, head=[0, 2], source=src),
        ilab.patch("mlp_out", 1, source=torch.randn(T, lab.d_model, generator=g)),
        ilab.zero("attn_out", 0), ilab.zero("z", 2, head=3, pos=-1),
        ilab.mean_ablate("resid_mid", 1, reference=[src, lab.run("The capital of France is")]),
        ilab.scale("embed", factor=0.0), ilab.scale("resid_post", 2, 5.0),
        ilab.steer("resid_post", 1, v, alpha=10.0), ilab.project("resid_pre", 2, v),
        ilab.clamp("mlp_out", 0, v, lo=1.0, hi=2.0), ilab.set_value("resid_mid", 0, v, pos=[0, -1]),
        ilab.zero("logits"),
    ]
    for e in every:
        lab.run([CLEAN, CORRUPT], edits=[e], cache=["resid_post", "z", "pattern"])
        assert param_hash(setup.model) == setup.hash, e.describe()
    lab.run(CLEAN, edits=every, cache=["resid_pre"])
    r = lab.run(CLEAN, edits=every[:4], cache=["resid_pre"], grad=True)  # a gradient-enabled run, no backward
    assert r.logits.requires_grad
    lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=lambda lg: lg[:, 5] - lg[:, 7], progress=False)
    lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", metric=lambda lg: lg[:, 5] - lg[:, 7], method="attribution",
                    progress=False)
    setup.assert_intact()

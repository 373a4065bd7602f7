"""Where tensors live when the model is not on the CPU, checked without a GPU.

tests/_fake_device.py tags a model as living on cuda:0 while it computes on the CPU and raises CUDA's own error
when an op mixes a tensor on that device with one left on the host (issue #46: AtP*'s QK fix and the student's own
lens on a cached activation failed on a GPU). Every public analysis runs under it and must give exactly the CPU's
numbers. What it cannot see (kernels, CUDA numerics, memory) is for tests/gpu/, which needs a GPU.
"""

from __future__ import annotations

import pytest
import torch
from _battery import ANSWERS, CLEAN, CORRUPT, WRONGS, battery, compare
from _fake_device import FAKE, DeviceMix, FakeDevice
from _tiny_models import make_model

import interplab as ilab


@pytest.fixture(scope="module")
def ioi():
    return ilab.Lab.load("ioi-tiny")


def _lab(which, ioi):
    if which == "ioi-tiny":
        return ilab.Lab.load("ioi-tiny")  # its own (the module's lab keeps its memo)
    return ilab.Lab(make_model(which, vocab=len(ioi.tokenizer)), ioi.tokenizer)  # GPT-2's tokens, IOI's names


@pytest.mark.parametrize("which", ["ioi-tiny", "llama"])
def test_every_analysis_on_another_device_gives_the_cpu_numbers(which, ioi):
    lab = _lab(which, ioi)
    on_cpu = battery(lab)
    lab.engine.clear_memo()  # (nothing computed on the CPU is reused)
    with FakeDevice(lab.model) as fake:
        assert lab.engine.device == FAKE
        elsewhere = battery(lab)
    assert fake.violations == []
    assert compare(on_cpu, elsewhere, 1e-6) == []
    assert sum(isinstance(v, str) for v in on_cpu.values()) == 0  # every analysis ran on both


def test_runs_stay_on_the_models_device_until_read(ioi):
    lab = _lab("ioi-tiny", ioi)
    plain = lab.run(CLEAN, cache=["resid_post", "pattern"], log=False)
    lab.engine.clear_memo()
    with FakeDevice(lab.model):
        run = lab.run(CLEAN, cache=["resid_post", "pattern"], log=False)
        assert run.cache["resid_post", 2].device == FAKE and run.cache["pattern", 1].device == FAKE
        assert run.held_logits.device == FAKE
        logits, last = run.logits, run.last_logits  # read: on the host, float32, the same numbers
        assert logits.device.type == "cpu" and logits.dtype == torch.float32 and last.device.type == "cpu"
        # the student's lens of notebook 03 on the cached stream: the cache is where the modules are
        m = lab.model.transformer
        with torch.no_grad():
            lens = lab.model.lm_head(m.ln_f(run.cache["resid_post", 1]))
        assert lens.device == FAKE
        with pytest.raises(DeviceMix, match="same device"):  # as it failed when the cache was on the host
            m.ln_f(run.cache["resid_post", 1].cpu())
    assert torch.equal(logits, plain.logits) and torch.equal(last, plain.last_logits)
    assert run.str_tokens == [lab.to_str_tokens(p) for p in CLEAN]  # decoded when read
    assert torch.equal(lens.cpu(), lab.model.lm_head(m.ln_f(plain.cache["resid_post", 1])).detach())


def test_a_tensor_left_on_the_host_is_caught(ioi):
    """The simulator itself: what CUDA refuses, it refuses; what CUDA allows, it allows."""
    lab = _lab("ioi-tiny", ioi)
    with FakeDevice(lab.model):
        w = lab.model.lm_head.weight
        with pytest.raises(DeviceMix):
            torch.zeros(3, w.shape[1]) @ w.T  # torch.zeros without device=: on the host
        with pytest.raises(DeviceMix):
            w.detach().numpy()
        ok = torch.zeros(3, w.shape[1], device=w.device) @ w.T
        assert ok.device == FAKE and (w[torch.tensor([0, 1])] * 2).device == FAKE  # host indices, 0-dim scalars ok
        assert (w.sum() + torch.tensor(1.0)).device == FAKE
        assert w.cpu().device.type == "cpu" and w.cpu().to(w.device).device == FAKE


def test_a_click_and_a_sweep_under_the_fake_device_leave_no_hooks(ioi):
    lab = _lab("ioi-tiny", ioi)
    metric = ilab.logit_diff(ANSWERS, WRONGS)
    with FakeDevice(lab.model):
        lab.patch_sweep(CLEAN, CORRUPT, "k", ("layer", "head"), metric, method="attribution", qk_fix=True,
                        progress=False)
    assert lab.hooks() == []


def test_a_bf16_sweep_is_close_to_fp32():
    """The metric and the normalisation are fp32 whatever the model's dtype: a bf16 sweep of ioi-tiny differs from
    the fp32 sweep only by what the bf16 forward rounds (about 0.006 here, on values spanning about 1.2)."""
    metric = ilab.logit_diff(" Mary", " John")
    fp32 = ilab.Lab.load("ioi-tiny").patch_sweep(CLEAN[0], CORRUPT[0], "resid_pre", metric=metric, progress=False)
    bf16 = ilab.Lab.load("ioi-tiny", dtype="bfloat16")
    assert bf16.engine.dtype_name == "bfloat16"
    low = bf16.patch_sweep(CLEAN[0], CORRUPT[0], "resid_pre", metric=metric, progress=False)
    assert low.values.dtype == torch.float32 and low.raw.dtype == torch.float32
    assert float((low.values - fp32.values).abs().max()) < 0.02
    assert float(fp32.values.max() - fp32.values.min()) > 1.0

"""Every public analysis and every teaching notebook on a CUDA GPU gives the CPU's numbers (issue #46).

Skipped without a GPU (tests/gpu/conftest.py). What runs on the CPU instead: tests/core/test_device_placement.py,
the same analyses with the model tagged as living on a second device (it finds tensors left on the host, not
kernel or numeric differences)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
from _battery import battery, compare
from _tiny_models import make_model

import interplab as ilab

TOL = 1e-4  # fp32 on the GPU against fp32 on the CPU
NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def ioi_cpu():
    return ilab.Lab.load("ioi-tiny")


def _pair(which, ioi_cpu):
    if which == "ioi-tiny":
        return ilab.Lab.load("ioi-tiny"), ilab.Lab.load("ioi-tiny", device="cuda")
    model = make_model(which, vocab=len(ioi_cpu.tokenizer))
    on_gpu = make_model(which, vocab=len(ioi_cpu.tokenizer))  # the same weights (seeded), moved
    return ilab.Lab(model, ioi_cpu.tokenizer), ilab.Lab(on_gpu, ioi_cpu.tokenizer, device="cuda")


@pytest.mark.parametrize("which", ["ioi-tiny", "llama", "gpt_neox"])
def test_every_analysis_on_cuda_gives_the_cpu_numbers(which, ioi_cpu):
    cpu, gpu = _pair(which, ioi_cpu)
    assert gpu.engine.device.type == "cuda" and gpu.engine.dtype_name == "float32"
    on_cpu, on_gpu = battery(cpu), battery(gpu)
    assert set(on_cpu) == set(on_gpu)
    bad = compare(on_cpu, on_gpu, TOL)
    assert bad == [], bad
    assert gpu.hooks() == []


def test_runs_stay_on_the_gpu_until_read(ioi_cpu):
    lab = ilab.Lab.load("ioi-tiny", device="cuda")
    prompt = "When Mary and John went to the store, John gave a drink to"
    run = lab.run(prompt, cache=["resid_post"])
    assert run.cache["resid_post", 0].is_cuda and run.held_logits.is_cuda
    assert run.logits.device.type == "cpu" and run.logits.dtype == torch.float32
    m = lab.model.transformer
    with torch.no_grad():  # notebook 03's own lens, on the cache as it is
        lens = lab.model.lm_head(m.ln_f(run.cache["resid_post", 1]))
    ref = ioi_cpu.run(prompt, cache=["resid_post"])
    with torch.no_grad():
        want = ioi_cpu.model.lm_head(ioi_cpu.model.transformer.ln_f(ref.cache["resid_post", 1]))
    assert torch.allclose(lens.cpu(), want, atol=TOL)
    assert torch.allclose(run.logits, ref.logits, atol=TOL)


def test_a_bf16_checkpoint_loads_in_bf16_on_the_gpu(tmp_path, ioi_cpu, capsys):
    model = make_model("llama", vocab=len(ioi_cpu.tokenizer)).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    ioi_cpu.tokenizer.save_pretrained(tmp_path / "bf16")
    make_model("llama", vocab=len(ioi_cpu.tokenizer)).save_pretrained(tmp_path / "fp32")
    ioi_cpu.tokenizer.save_pretrained(tmp_path / "fp32")
    assert ilab.Lab.load(str(tmp_path / "bf16"), device="cuda").engine.dtype_name == "bfloat16"
    assert "bfloat16, the checkpoint's own dtype" in capsys.readouterr().out
    assert ilab.Lab.load(str(tmp_path / "fp32"), device="cuda").engine.dtype_name == "float32"
    assert ilab.Lab.load(str(tmp_path / "bf16")).engine.dtype_name == "float32"  # the CPU: as before
    assert ilab.Lab.load(str(tmp_path / "bf16"), device="cuda", dtype="float32").engine.dtype_name == "float32"
    assert ilab.Lab.load("ioi-tiny", device="cuda").engine.dtype_name == "float32"


def test_the_memo_on_the_gpu_stays_within_its_budget(ioi_cpu):
    lab = ilab.Lab.load("ioi-tiny", device="cuda", memo_budget={"cpu": 2**30, "cuda": 3 * 2**20})
    for i in range(20):
        lab.run(" ".join(["Mary and John"] * (10 + i)), cache=["resid_post"], log=False)
        assert lab.engine.memo.held().get("cuda:0", 0) <= 3 * 2**20
    assert lab.engine.memo.held().get("cuda:0", 0) > 0


def test_bf16_sweeps_are_close_to_fp32(ioi_cpu):
    """bf16 weights and activations, metric and normalisation in fp32: the sweep within a few hundredths of fp32's
    (the issue measured 0.002-0.004 on values of 0.10-0.16 before the metric was fp32)."""
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    metric = ilab.logit_diff(" Mary", " John")
    fp32 = ilab.Lab.load("ioi-tiny", device="cuda")
    bf16 = ilab.Lab.load("ioi-tiny", device="cuda", dtype="bfloat16")
    a = fp32.patch_sweep(clean, corrupt, "resid_pre", metric=metric, progress=False).values
    b = bf16.patch_sweep(clean, corrupt, "resid_pre", metric=metric, progress=False).values
    assert b.dtype == torch.float32
    assert float((a - b).abs().max()) < 0.05, float((a - b).abs().max())


# ---- the four notebooks, every Lab.load sent to the GPU ------------------------------------------------------------

TO_CUDA = """import interplab as _ilab
_load = _ilab.Lab.load.__func__
_ilab.Lab.load = classmethod(lambda cls, *a, **k: _load(cls, *a, **({"device": "cuda"} if "device_map" not in k
                                                                   else {}), **{x: v for x, v in k.items()
                                                                                if x != "device"}))
"""
NUMBER = re.compile(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?|[-+]?\d+")


def _execute(path, tmp_path, cuda: bool) -> list[str]:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if cuda:
        nb.cells.insert(0, nbformat.v4.new_code_cell(TO_CUDA))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    cells = nb.cells[1:] if cuda else nb.cells
    return ["".join(o.get("text", "") for o in c.get("outputs", []) if o.output_type == "stream"
                    and o.get("name") == "stdout")  # (stderr: progress bars, with their rates)
            for c in cells if c.cell_type == "code"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prints_the_cpus_numbers_on_cuda(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    on_cpu = _execute(path, tmp_path, cuda=False)
    on_gpu = _execute(path, tmp_path, cuda=True)
    assert len(on_cpu) == len(on_gpu)
    for i, (a, b) in enumerate(zip(on_cpu, on_gpu)):
        if "computed in" in a or " ms" in a:  # timings differ
            continue
        na, nb_ = NUMBER.findall(a), NUMBER.findall(b)
        assert len(na) == len(nb_), (i, a, b)
        for x, y in zip(na, nb_):
            digits = len(x.split(".")[1].split("e")[0]) if "." in x else 0
            assert abs(float(x) - float(y)) <= max(TOL, 10.0 ** -digits), (i, x, y, a, b)

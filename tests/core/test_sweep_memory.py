"""An exact sweep's memory: chunks sized to a memory budget, the cached prefix shared by every row (issue #40)."""

import os
from pathlib import Path

import pytest
import torch

import interplab as ilab
from interplab import engine
from interplab.errors import NumberError

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "Then Mary and John went to the store, John gave a drink to"  # differs at token 0: nearly every cell runs


def _rows_per_forward(lab):
    """A pre-hook on the final norm, which every forward passes once: [(rows, positions computed)]."""
    seen = []
    norm = lab.model.get_submodule(lab.sites.arch.final_norm)

    def count(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        seen.append(tuple(x.shape[:2]))
    return seen, norm.register_forward_pre_hook(count, with_kwargs=True)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("site, by", [("resid_pre", ("layer", "pos")), ("z", ("layer", "head")),
                                      ("attn_out", ("layer", "pos"))])
def test_a_small_budget_runs_small_chunks_with_the_same_values(models, tokenizer, arch, site, by):
    """A budget of two full-length rows: every patched forward holds the rows its positions allow within the budget
    (row_bytes), so a few per forward; the values equal those of the default run to float rounding."""
    lab = ilab.Lab(models[arch], tokenizer)
    m = ilab.logit_diff(5, 9)
    n_pos = len(lab.to_str_tokens(CLEAN))
    expected = lab.patch_sweep(CLEAN, CORRUPT, site, by, metric=m, progress=False)
    budget = 2 * engine.row_bytes(lab.model, n_pos, n_pos)
    lab.engine.clear_memo()
    seen, handle = _rows_per_forward(lab)
    try:
        got = lab.patch_sweep(CLEAN, CORRUPT, site, by, metric=m, progress=False, memory_budget=budget)
    finally:
        handle.remove()
    patched = seen[2:]  # after the two unpatched runs of the whole prompt
    assert len(patched) > 2 and max(rows for rows, _ in patched) < expected.cells_run
    for rows, q_len in patched:
        assert rows == 1 or rows * engine.row_bytes(lab.model, q_len, n_pos) <= budget, (rows, q_len)
    assert got.cells_run == expected.cells_run
    torch.testing.assert_close(got.raw, expected.raw, atol=1e-5, rtol=1e-5)


def test_a_budget_below_one_row_runs_one_cell_per_forward_for_pairs_of_prompts(models, tokenizer):
    """Two pairs: each cell is two rows; a 1-byte budget still runs (one cell per forward), values unchanged."""
    lab = ilab.Lab(models["gpt2"], tokenizer)
    clean = [CLEAN, "When John and Mary went to the store, Mary gave a drink to"]
    corrupt = [CORRUPT, "Then John and Mary went to the store, Mary gave a drink to"]
    assert len({len(lab.to_str_tokens(p)) for p in clean + corrupt}) == 1  # no padding: the prefix path runs
    m = ilab.logit_diff([5, 6], [9, 7])
    expected = lab.patch_sweep(clean, corrupt, metric=m, progress=False).raw
    lab.engine.clear_memo()
    seen, handle = _rows_per_forward(lab)
    try:
        got = lab.patch_sweep(clean, corrupt, metric=m, progress=False, memory_budget=1).raw
    finally:
        handle.remove()
    assert {rows for rows, _ in seen[2:]} == {2}
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_larger_budget_takes_more_rows_up_to_max_batch(models, tokenizer):
    """The budget decides the rows where max_batch allows more; max_batch still caps them."""
    lab = ilab.Lab(models["gpt2"], tokenizer)
    m = ilab.logit_diff(5, 9)
    n_pos = len(lab.to_str_tokens(CLEAN))
    one_row = engine.row_bytes(lab.model, n_pos, n_pos)
    widest = {}
    for budget, max_batch in ((3 * one_row, 64), (10**12, 64), (10**12, 5)):
        lab.engine.clear_memo()
        seen, handle = _rows_per_forward(lab)
        try:
            lab.patch_sweep(CLEAN, CORRUPT, metric=m, progress=False, memory_budget=budget, max_batch=max_batch)
        finally:
            handle.remove()
        widest[budget, max_batch] = max(rows for rows, _ in seen[2:])
    assert widest[3 * one_row, 64] < widest[10**12, 64]
    assert widest[10**12, 5] == 5


def test_a_gpu_takes_bigger_chunks_by_default_within_the_budget(models, tokenizer):
    """max_batch unset: 64 rows per forward on a CPU, up to 512 on a GPU (the model tagged as living on cuda:0, see
    tests/_fake_device.py), where a 64-row forward of late cells is too small to keep the device busy; an explicit
    max_batch and the budget still decide. The values are the CPU's."""
    from _fake_device import FakeDevice

    lab = ilab.Lab(models["gpt2"], tokenizer)
    m = ilab.logit_diff(5, 9)
    n_pos = len(lab.to_str_tokens(CLEAN))
    widest, values = {}, {}
    for where, kw in (("cpu", {}), ("gpu", {}), ("gpu, max_batch=64", {"max_batch": 64}),
                      ("gpu, small budget", {"memory_budget": 100 * engine.row_bytes(lab.model, n_pos, n_pos)})):
        lab.engine.clear_memo()
        seen, handle = _rows_per_forward(lab)
        try:
            if where.startswith("gpu"):
                with FakeDevice(lab.model):
                    res = lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head", "pos"), m, progress=False, **kw)
            else:
                res = lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head", "pos"), m, progress=False, **kw)
        finally:
            handle.remove()
        widest[where], values[where] = max(rows for rows, _ in seen[2:]), res.raw
    assert widest["cpu"] == widest["gpu, max_batch=64"] == engine.default_max_rows("cpu") == 64
    assert 64 < widest["gpu"] <= engine.default_max_rows("cuda") == 512
    assert widest["gpu, small budget"] <= 100
    for where in values:
        torch.testing.assert_close(values[where], values["cpu"], atol=1e-5, rtol=1e-5)


def test_row_bytes_counts_the_last_positions_logits(models):
    """A row unembeds its last position and the metric reads it in fp32: with a 128k vocabulary that is more than a
    late cell's forward of a small model, so the estimate must hold at least those logits."""
    from types import SimpleNamespace

    config = models["gpt2"].config.to_dict()

    def model(vocab):
        return SimpleNamespace(config=models["gpt2"].config.__class__(**{**config, "vocab_size": vocab}),
                               dtype=torch.float32)
    narrow, wide = engine.row_bytes(model(1000), 1, 20), engine.row_bytes(model(128_000), 1, 20)
    assert wide - narrow >= (128_000 - 1000) * 4 and wide > 2 * narrow


@pytest.mark.parametrize("bad", [0, -1, 0.5, float("nan"), float("inf"), True, "lots", "12 parsecs", "MiB", [1]])
def test_a_bad_budget_is_a_typed_error_naming_the_argument(models, tokenizer, bad):
    lab = ilab.Lab(models["gpt2"], tokenizer)
    with pytest.raises(NumberError, match=r"memory_budget=.*'600MiB'"):
        lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False, memory_budget=bad)


@pytest.mark.parametrize("text, size", [("600MiB", 600 * 2**20), ("2 GiB", 2 * 2**30), ("1.5kib", 1536),
                                        (4096, 4096), (1e6, 10**6)])
def test_budgets_in_bytes_or_with_a_unit(text, size):
    from interplab.analyses.patching import _budget_bytes

    assert _budget_bytes(text, "cpu") == size


def test_the_default_budget_is_a_share_of_free_memory_with_a_ceiling(monkeypatch):
    cpu = engine.default_budget("cpu")
    assert 1 <= cpu <= engine.resume.BUDGET_CAP_OTHER
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * 2**30, 80 * 2**30))
    assert engine.default_budget("cuda") == 2**30  # the ceiling: a quarter of 8 GiB is more
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**30, 80 * 2**30))
    assert engine.default_budget("cuda") == 2**28  # a quarter of what is free


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_prefix_is_shared_by_every_row_and_kept_by_none(models, tokenizer, arch):
    """kv_prefix for 8 copies of a prompt holds the memoised keys/values once (a view of them, one row), and a
    forward over it keeps no joined keys: after it the cache still holds `first` positions."""
    lab = ilab.Lab(models[arch], tokenizer)
    first, repeats = 4, 8
    kw = lab.engine.kv_prefix(CLEAN, first, repeats)
    (name, cache), = kw.items()
    memo = lab.engine.kv_prefix(CLEAN, len(lab.to_str_tokens(CLEAN)))[name]
    for layer, whole in zip(cache.layers, memo.layers):
        assert layer.keys.shape[0] == 1 and layer.keys.shape[-2] == first
        assert layer.keys.untyped_storage().data_ptr() == whole.keys.untyped_storage().data_ptr()
    ids, mask, _ = lab.engine.encode([CLEAN] * repeats)
    with torch.no_grad():
        out = lab.model(input_ids=ids[:, first:], attention_mask=mask,
                        position_ids=torch.arange(first, ids.shape[1])[None].expand(repeats, -1), use_cache=True,
                        **kw)
        full = lab.model(input_ids=ids[:1]).logits
    assert cache.get_seq_length() == first and all(layer.keys.shape[0] == 1 for layer in cache.layers)
    torch.testing.assert_close(out.logits[:, -1], full[:, -1].expand(repeats, -1), atol=1e-5, rtol=1e-5)


def test_row_bytes_grows_with_positions_not_cells(models):
    """The estimate is per row: linear in the positions computed, and more for more keys."""
    model = models["gpt2"]
    one, two = engine.row_bytes(model, 10, 20), engine.row_bytes(model, 20, 20)
    assert 1 < two / one < 2 and engine.row_bytes(model, 10, 40) > one


FREED = """
import os, torch
from interplab.engine import heap
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks, pins = [], []
for _ in range(960):  # 100 KB each, below glibc's smallest mmap threshold (128 KiB): always in the heap
    blocks.append(torch.ones(25_000))  # written: resident
    pins.append(torch.ones(512))  # 2 KB, above glibc's small-block caches: carved from the heap right after it
del blocks
held = resident()
print(heap.release_free(), held - resident())
"""


@pytest.mark.skipif(engine.heap.release_free() is False, reason="no glibc malloc_trim in this process")
def test_freed_tensors_the_heap_keeps_go_back_to_the_system_between_chunks():
    """What bounds a CPU sweep's peak (issue #53 item 1): glibc keeps freed tensors below its mmap threshold in its
    heap, resident, and a small block allocated after each keeps that memory from shrinking back with the heap's top;
    a sweep's chunks, each of another shape, grew it by 1 GiB. engine.heap.release_free, which every CPU chunk of a
    sweep calls, gives those pages back. In a fresh process: in this one, what earlier tests left in the heap (its
    holes, reused by these blocks and pins) decided how much there was to give back (27 MiB in one random order)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FREED], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    released, freed = out.stdout.split()
    assert released == "True" and int(freed) >= 48 * 2**20, int(freed) / 2**20


def test_a_cpu_sweep_releases_the_heap_after_each_chunk(models, tokenizer, monkeypatch):
    """Each patched forward of a CPU sweep is followed by a release of the heap's free pages."""
    lab = ilab.Lab(models["gpt2"], tokenizer)
    released, forwards = [], []
    monkeypatch.setattr(engine.heap, "release_free", lambda: released.append(len(forwards)) or True)
    resumed = engine.resume.resumed_last_logits
    monkeypatch.setattr(engine.resume, "resumed_last_logits", lambda *a, **k: forwards.append(1) or resumed(*a, **k))
    lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), progress=False, max_batch=8)
    assert len(forwards) > 1 and released == list(range(1, len(forwards) + 1))  # one release after each forward

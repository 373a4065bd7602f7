"""How often an analysis makes the host wait for the device (issue #46, item 3: per-forward overhead).

On a GPU, Python queues kernels and the device runs them behind it; every read of a device value into Python (a
copy to the host, `bool`/`float` of a tensor, `torch.equal`, `nonzero`) stops Python until the queue is empty. A
sweep that waits once per cell runs a small model at the speed of its round trips, not of its arithmetic. The
model here is tagged as living on a second device (tests/_fake_device.py), which records every such wait.

Bounds are in the sweep's own units: per layer (the cells that need no forward are found from one small table per
layer), per chunk only where on_partial asks for every chunk, and never per cell. And what the patching analyses
copy to the host: never an activation."""

from __future__ import annotations

import pytest
import torch
from _fake_device import FakeDevice

import interplab as ilab

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
AROUND = 4  # the base and source runs' last logits and metric values, whatever the sweep's size


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.mark.parametrize("site, by", [("resid_pre", ("layer", "pos")), ("z", ("layer", "head")),
                                      ("z", ("layer", "head", "pos")), ("mlp_out", ("layer",))])
def test_an_exact_sweep_waits_per_layer_never_per_cell(lab, site, by):
    metric = ilab.logit_diff(" Mary", " John")
    plain = lab.patch_sweep(CLEAN, CORRUPT, site, by, metric, progress=False)
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        res = lab.patch_sweep(CLEAN, CORRUPT, site, by, metric, progress=False, max_batch=1)  # a chunk per cell
    torch.testing.assert_close(res.raw, plain.raw, atol=1e-5, rtol=1e-5)
    assert res.cell_runs and res.top_tokens  # the hover's and the logit panel's numbers came back too
    assert res.cells_run >= lab.n_layers  # enough chunks that a wait per chunk or per cell would show
    assert len(fake.waits) <= lab.n_layers + AROUND, fake.waits


def test_on_partial_adds_one_wait_per_chunk(lab):
    metric = ilab.logit_diff(" Mary", " John")
    partials = []
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        res = lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head", "pos"), metric, progress=False, max_batch=2,
                              on_partial=lambda r: partials.append(int((~r.raw.isnan()).sum())))
    chunks = len(partials)
    assert chunks >= res.cells_run // 2 and partials == sorted(partials) and partials[-1] == res.raw.numel()
    assert len(fake.waits) <= chunks + lab.n_layers + AROUND, fake.waits


def test_attribution_eap_and_dla_wait_a_fixed_number_of_times(lab):
    metric = ilab.logit_diff(" Mary", " John")
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head", "pos"), metric, method="attribution", progress=False)
    assert len(fake.waits) <= lab.n_layers + AROUND, fake.waits
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        scores = lab.edge_attribution(CLEAN, CORRUPT, metric)
    assert len(scores.edges) > 100 and len(fake.waits) <= AROUND, fake.waits  # not one per edge
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        dla = lab.direct_logit_attribution(CLEAN, metric)
    assert len(fake.waits) <= AROUND, fake.waits  # not one per head
    assert all(len(shape) <= 2 for shape, _ in fake.moved), fake.moved  # nor the [positions, vocab] logits
    torch.testing.assert_close(dla.parts_sum(), dla.total, atol=1e-4, rtol=1e-4)


def test_the_patching_analyses_copy_no_activation_to_the_host(lab):
    """Edge patching, path patching, the circuit and copying scores run the model with edits that carry tensors they
    computed (on the device); those runs skip the memo, whose key would copy each tensor to the host to digest it
    (an activation per edit: megabytes on a big model). What comes back is logits rows and scores, never a
    [rows, positions, width] activation."""
    metric = ilab.logit_diff(" Mary", " John")
    top = [e for e, _ in lab.edge_attribution(CLEAN, CORRUPT, metric).top(10)]
    for name, analysis in [("edge_patch", lambda: lab.edge_patch(CLEAN, CORRUPT, metric)),
                           ("path_patch", lambda: lab.path_patch(CLEAN, CORRUPT, metric)),
                           ("path_patch to queries", lambda: lab.path_patch(CLEAN, CORRUPT, metric,
                                                                            receivers=[(3, 0, "q")])),
                           ("circuit", lambda: lab.circuit(CLEAN, CORRUPT, metric, top)),
                           ("copying_scores", lambda: lab.copying_scores([CLEAN], [2, 4]))]:
        lab.engine.clear_memo()
        with FakeDevice(lab.model) as fake:
            analysis()
        assert fake.moved and all(len(shape) <= 2 for shape, _ in fake.moved), (name, fake.moved)


def test_a_run_with_memo_off_neither_reads_nor_fills_the_memo(lab):
    forwards = []
    handle = lab.model.get_submodule(lab.sites.arch.final_norm).register_forward_pre_hook(
        lambda m, a: forwards.append(1))  # (installed first: a hook is part of the memo's key)
    try:
        lab.engine.clear_memo()
        edit = [ilab.set_value("resid_pre", 1, torch.zeros(lab.d_model))]
        first = lab.engine.run(CLEAN, edit, log=False)
        held = len(lab.engine.memo)
        again = lab.engine.run(CLEAN, edit, log=False, memo=False)  # not read from the memo: a forward
        assert len(forwards) == 2 and len(lab.engine.memo) == held  # nor kept there
        torch.testing.assert_close(again.last_logits, first.last_logits, rtol=0, atol=0)
        lab.engine.run(CLEAN, edit, log=False)  # the memoised run still answers
        assert len(forwards) == 2
    finally:
        handle.remove()
    with pytest.raises(ilab.InterplabError, match="memo=1"):
        lab.engine.run(CLEAN, memo=1)

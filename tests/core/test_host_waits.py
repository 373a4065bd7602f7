"""How often an analysis makes the host wait for the device (issue #46, item 3: per-forward overhead).

On a GPU, Python queues kernels and the device runs them behind it; every read of a device value into Python (a
copy to the host, `bool`/`float` of a tensor, `torch.equal`, `nonzero`) stops Python until the queue is empty. A
sweep that waits once per cell runs a small model at the speed of its round trips, not of its arithmetic. The
model here is tagged as living on a second device (tests/_fake_device.py), which records every such wait.

Bounds are in the sweep's own units: per layer (the cells that need no forward are found from one small table per
layer), per chunk only where on_partial asks for every chunk, and never per cell."""

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


def test_attribution_and_edge_scores_wait_a_fixed_number_of_times(lab):
    metric = ilab.logit_diff(" Mary", " John")
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head", "pos"), metric, method="attribution", progress=False)
    assert len(fake.waits) <= lab.n_layers + AROUND, fake.waits
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        scores = lab.edge_attribution(CLEAN, CORRUPT, metric)
    assert len(scores.edges) > 100 and len(fake.waits) <= AROUND, fake.waits  # not one per edge

"""What a click and a sweep copy to the host and unembed (issue #46, item 2): never a full [positions, vocab] tensor.

The model is tagged as living on a second device (tests/_fake_device.py), which records every copy from that
device to the host; a hook on the unembedding counts the rows it computes."""

from __future__ import annotations

import pytest
import torch
from _fake_device import FakeDevice

import interplab as ilab
from interplab.views.patching import PatchSession

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture()
def lab():
    return ilab.Lab.load("ioi-tiny")


class Unembedded:
    """Rows (positions x batch) the unembedding computes while installed."""

    def __init__(self, model):
        self.rows = []
        self.handle = model.get_output_embeddings().register_forward_hook(
            lambda m, i, out: self.rows.append(out.shape[:-1].numel()))

    def close(self):
        self.handle.remove()


def test_a_click_unembeds_and_copies_only_what_it_shows(lab):
    n_pos, vocab = len(lab.to_str_tokens(CLEAN)), lab.model.config.vocab_size
    s = PatchSession(lab, CLEAN, CORRUPT, " Mary", " John")
    counted = Unembedded(lab.model)  # (a hook is part of the memo's key: installed before anything is memoised)
    try:
        with FakeDevice(lab.model) as fake:
            s.result = lab.patch_sweep(CLEAN, CORRUPT, "resid_pre", ("layer", "pos"), s.metric, progress=False)
            s.warm()
            s.logits_view([], log=False)  # the panel's clean and corrupt runs, once per session (memoised)
            # a layer's first click also runs the source's activation at that layer (memoised, kept on the device)
            s.logits_view([ilab.patch("resid_pre", 2, pos=3, source=CLEAN)], log=False)
            s.logits_view([s.cell_edit(2, 5)], cells=[(2, 5)], log=False)
            fake.moved.clear()
            counted.rows.clear()
            fresh = s.logits_view([ilab.patch("resid_pre", 2, pos=6, source=CLEAN)], log=False)  # not a sweep cell
            own = s.logits_view([s.cell_edit(2, 6)], cells=[(2, 6)], log=False)  # the sweep computed it
    finally:
        counted.close()
    assert counted.rows == [1]  # one resumed forward, its last position only; the sweep's cell needs none
    assert max(b for _, b in fake.moved) <= vocab * 4  # one row of logits at most, never [positions, vocab]
    assert sum(b for _, b in fake.moved) <= 2 * 3 * vocab * 4 + 1024  # per click a row each: clean, corrupt, patched
    assert all(n_pos * vocab > torch.Size(shape).numel() for shape, _ in fake.moved)
    # Position 6 comes before S2, where the two prompts are the same: either patch there leaves the corrupt run as it
    # is (an invariant of the model's math; the two code paths may differ in the last bits, or not: torch 2.6 and 2.13)
    corrupt = fresh["metric"]["values"]["corrupt"]
    assert abs(fresh["metric"]["values"]["patched"] - corrupt) < 1e-4 and abs(own["metric"]["values"]["patched"]
                                                                             - corrupt) < 1e-4


def test_a_sweep_copies_no_full_logits(lab):
    n_pos, vocab = len(lab.to_str_tokens(CLEAN)), lab.model.config.vocab_size
    metric = ilab.logit_diff(" Mary", " John")
    for method, site, by in (("exact", "resid_pre", ("layer", "pos")), ("exact", "z", ("layer", "head")),
                             ("attribution", "z", ("layer", "head"))):
        lab.engine.clear_memo()
        with FakeDevice(lab.model) as fake:
            lab.patch_sweep(CLEAN, CORRUPT, site, by, metric, method=method, progress=False)
        biggest = max(torch.Size(shape).numel() for shape, _ in fake.moved)
        assert biggest < n_pos * vocab, (method, site, biggest)


def test_reading_run_logits_copies_them_and_gives_the_same_numbers(lab):
    plain = lab.run(CLEAN, log=False)
    lab.engine.clear_memo()
    with FakeDevice(lab.model) as fake:
        run = lab.run(CLEAN, log=False)
        assert fake.moved == []  # nothing copied until read
        last = run.last_logits
        assert fake.moved == [((1, lab.model.config.vocab_size), lab.model.config.vocab_size * 4)]
        full = run.logits
    assert torch.equal(full, plain.logits) and torch.equal(last, plain.last_logits)

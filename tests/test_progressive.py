"""Progressive exact sweeps (issue #16): the attribution estimate at once, then the exact cells, largest |estimate|
first (patch_sweep's order=), each replacing its estimate; Cancel keeps the exact cells done, marked partial."""

import pytest
import torch

import interplab as ilab
from interplab.views.patching import PatchExplorer

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
METRIC = ilab.logit_diff(5, 9)


@pytest.mark.parametrize("site, by", [("resid_pre", ("layer", "pos")), ("z", ("layer", "head"))])
def test_order_changes_which_cells_run_first_never_their_values(gpt2_lab, site, by):
    plain = gpt2_lab.patch_sweep(CLEAN, CORRUPT, site, by, METRIC, progress=False)
    est = gpt2_lab.patch_sweep(CLEAN, CORRUPT, site, by, METRIC, method="attribution", progress=False)
    prio = est.values.abs()
    seen, filled = [], torch.zeros(plain.raw.shape, dtype=torch.bool)

    def partial(res):
        new = ~torch.isnan(res.raw) & ~filled
        filled.copy_(filled | new)
        seen.append(new.clone())

    ordered = gpt2_lab.patch_sweep(CLEAN, CORRUPT, site, by, METRIC, progress=False, order=prio, max_batch=1,
                                   on_partial=partial)
    torch.testing.assert_close(ordered.raw, plain.raw, atol=1e-5, rtol=1e-5)
    assert ordered.cells_run == plain.cells_run
    # one cell per chunk: after the unchanged cells (filled before the first chunk), priorities never increase
    run = [float(prio[m].max()) for m in seen[1:] if m.any()]
    assert len(run) == ordered.cells_run - 1 and run == sorted(run, reverse=True)
    shuffled = gpt2_lab.patch_sweep(CLEAN, CORRUPT, site, by, METRIC, progress=False,
                                    order=torch.rand(plain.raw.shape), max_batch=3)
    torch.testing.assert_close(shuffled.raw, plain.raw, atol=1e-5, rtol=1e-5)
    with pytest.raises(ilab.InterplabError, match="one priority per cell"):
        gpt2_lab.patch_sweep(CLEAN, CORRUPT, site, by, METRIC, progress=False, order=torch.ones(2, 2))


def test_the_explorer_shows_the_estimate_then_streams_exact_cells(gpt2_lab, monkeypatch):
    from interplab.views.patching import PatchSession

    session = PatchSession(gpt2_lab, CLEAN, CORRUPT, 5, 9)
    ex = PatchExplorer(session)
    gpt2_lab.engine.worker.join()
    shown, cells = [], []
    ex.heatmap.observe(lambda ch: shown.append(ch["new"]), "values")
    monkeypatch.setattr(ex.heatmap, "add_cells", lambda c: cells.extend(c))
    ex.sweep(wait=True, progressive=True, max_batch=4)
    frame = shown.pop(0)  # first the empty frame (shape and labels, laid out once by the page), then the estimate
    assert all(v is None for row in frame for v in row) and len(frame) == len(shown[0])
    est = session.estimate()
    exact = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False)
    assert torch.allclose(torch.tensor(shown[0]), est.cells.grid(est.values).float(), atol=1e-6)  # first: estimate
    assert torch.allclose(torch.tensor(shown[-1]), exact.cells.grid(exact.values).float(), atol=1e-5)  # last: exact
    want = exact.cells.grid(exact.values)
    assert len(cells) == want.numel()
    for row, col, value, _ in cells:
        assert value == pytest.approx(float(want[row, col]), abs=1e-5)
    assert not ex.partial and ex.heatmap.progress == 0.0 and ex.heatmap.cell_tops["cells"]
    assert not ilab.attached_hooks()


def test_cancel_keeps_the_exact_cells_done_marked_partial(gpt2_lab, monkeypatch):
    from interplab.views.patching import PatchSession

    session = PatchSession(gpt2_lab, CLEAN, CORRUPT, 5, 9)
    ex = PatchExplorer(session)
    gpt2_lab.engine.worker.join()
    cells = []

    def add_cells(c):  # the page presses Cancel once the first exact cells are shown
        cells.extend(c)
        if len(cells) >= 6:
            assert ex.heatmap.send_test_message({"type": "cancel"})["ok"]

    monkeypatch.setattr(ex.heatmap, "add_cells", add_cells)
    ex.sweep(wait=True, progressive=True, max_batch=2)
    assert ex.partial and "partial" in ex.heatmap.title and "cancelled" in ex.heatmap.status
    res, est = session.result, session.estimate()
    exact = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False)
    done = ~torch.isnan(res.cells.grid(res.raw))
    assert 6 <= int(done.sum()) < done.numel()
    shown = torch.tensor(ex.heatmap.values)
    want = torch.where(done, exact.cells.grid(exact.values), est.cells.grid(est.values)).float()
    assert torch.allclose(shown, want, atol=1e-5)
    hover = ex.heatmap.hover
    assert all(hover[r][c].startswith("attribution estimate") != bool(done[r, c])
               for r in range(done.shape[0]) for c in range(done.shape[1]))
    # the most promising cell (largest |estimate|) is among those done
    prio = session.priority(est).reshape(-1)
    assert bool(done.reshape(-1)[int(prio.argmax())])
    assert ex.heatmap.progress == 0.0 and ex.heatmap.error == "" and not ilab.attached_hooks()


def test_the_dashboard_sweeps_progressively_when_asked(gpt2_lab):
    dash = gpt2_lab.show(CLEAN, CORRUPT, 5, 9, progressive=True)
    gpt2_lab.engine.worker.join()
    exact = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False)
    assert torch.allclose(torch.tensor(dash.heatmap.values), exact.cells.grid(exact.values).float(), atol=1e-5)
    assert dash.explorer.partial is False and dash.explorer.first_paint_s >= 0

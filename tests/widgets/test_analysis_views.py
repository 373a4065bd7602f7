"""The views of issue #16's analyses: the five head sweeps side by side (one logit panel), direct logit attribution
(heads at a chosen position, the other parts as bars) and path patching (senders; a click shows each receiver). The
numbers shown are the results' own; in Chromium the real mouse clicks the page bridged to the real widget."""

from __future__ import annotations

import os
import re

import pytest
import torch
from bridge import Bridge  # tests/widgets/bridge.py

import interplab as ilab
from interplab.views.dla import DLAView
from interplab.views.patching import HeadSweepsView
from interplab.views.paths import PathView

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
METRIC = ilab.logit_diff(5, 9)
SITES = ("z", "q", "k", "v", "pattern")


def test_dla_view_shows_the_heads_at_the_chosen_position_and_the_parts_adding_up(gpt2_lab):
    res = gpt2_lab.direct_logit_attribution(CLEAN, METRIC)
    view = res.show()
    assert isinstance(view, DLAView)
    n_pos = res.total.shape[0]
    assert view.positions.values == [pytest.approx(res.total.tolist())] and view.positions.selected == [[0, n_pos - 1]]
    for pos in (n_pos - 1, 3):
        if pos != n_pos - 1:
            reply = view.positions.send_test_message({"type": "click", "row": 0, "col": pos, "shift": False})
            assert reply["ok"], reply
        assert torch.allclose(torch.tensor(view.heads.values), res.heads[:, :, pos].float(), atol=1e-7)
        bars = dict(zip(view.bars.labels, view.bars.values))
        assert bars["total"] == pytest.approx(float(res.total[pos]), abs=1e-7)
        parts = sum(v for k, v in bars.items() if k not in ("heads (sum)", "total"))
        assert parts + bars["heads (sum)"] == pytest.approx(bars["total"], abs=1e-5)
        assert bars["MLP1"] == pytest.approx(float(res.mlp[1, pos]), abs=1e-7)
    bad = view.positions.send_test_message({"type": "click", "row": 1, "col": 0, "shift": False})
    assert bad["ok"] is False and "'row'=1 is out of range 0..0" in bad["error"]


def test_path_view_shows_each_receiver_of_a_clicked_sender(gpt2_lab):
    res = gpt2_lab.path_patch(CLEAN, CORRUPT, METRIC, senders="heads+mlps",
                              receivers=[(2, 0, "q"), (2, 1, "k"), (2, 3, "v")], per_receiver=True)
    view = res.show()
    assert isinstance(view, PathView) and view.heatmap.x_labels == ["H0", "H1", "H2", "H3", "MLP"]
    shown = torch.tensor([[float("nan") if v is None else v for v in row] for row in view.heatmap.values],
                         dtype=torch.float64)  # None: no path from that sender (in the receivers' layer or after)
    assert torch.allclose(shown, res.values.double().mean(0), atol=1e-6, equal_nan=True)
    assert torch.isnan(shown[2:]).all() and torch.isfinite(shown[:2]).all()
    # the bars start on the strongest sender (selected), not on an empty row
    grid = res.values.double().mean(0).nan_to_num(0.0).abs()
    row, col = divmod(int(grid.argmax()), grid.shape[1])
    assert view.heatmap.selected == [[row, col]] and view.bars.labels == ["L2H0.q", "L2H1.k", "L2H3.v"]
    assert view.bars.values == pytest.approx(res.values[:, row, col].tolist())
    assert view.heatmap.send_test_message({"type": "click", "row": 1, "col": 4, "shift": False})["ok"]
    assert view.bars.values == pytest.approx(res.values[:, 1, 4].tolist()) and view.bars.title.startswith("MLP1")


def test_head_sweeps_five_heatmaps_one_logit_panel(gpt2_lab):
    hs = gpt2_lab.patch_sweep_heads(CLEAN, CORRUPT, METRIC)
    view = hs.show()
    assert isinstance(view, HeadSweepsView) and list(view.explorers) == list(SITES)
    assert view.get_state()["panes"] == [{"row": list(SITES)}, {"part": "logits"}]
    for site in SITES:
        want = hs[site].cells.grid(hs[site].values)
        assert torch.allclose(torch.tensor(view.explorers[site].heatmap.values), want.float(), atol=1e-6)
    gpt2_lab.engine.worker.join()
    view.send_test_message({"type": "click", "part": "q", "row": 1, "col": 2, "shift": False})
    gpt2_lab.engine.worker.join()
    view.send_test_message({"type": "click", "part": "k", "row": 2, "col": 0, "shift": False})
    gpt2_lab.engine.worker.join()
    assert view.explorers["q"].heatmap.selected == [] and view.explorers["k"].heatmap.selected == [[2, 0]]
    patched = view.logits.metric["values"]["normalised"]
    assert patched == pytest.approx(float(hs["k"].cells.grid(hs["k"].values)[2, 0]), abs=1e-5)
    assert view.logits.error == "" and not ilab.attached_hooks()


# ------------------------------------------------------------------------------------------- in Chromium
def shot(page, w, name):
    """INTERPLAB_SCREENSHOTS=dir: a picture of the view, to look at."""
    if os.environ.get("INTERPLAB_SCREENSHOTS"):
        page.locator(w.sel(".interplab-composite")).screenshot(path=f"{os.environ['INTERPLAB_SCREENSHOTS']}/{name}.png")


def heatmap_paints(page, n):
    page.wait_for_function("(n) => window.paintsOf('heatmap') >= n", arg=n)


def cell_point(w, part, row, col):
    """The cell's centre in page pixels, once the layout has settled (the same for three frames in a row: a part
    beside it that paints later may move it while the page is loaded)."""
    return w.js("""(w, [part, row, col]) => new Promise((resolve) => {
        const at = () => {
            const gd = w.el.querySelector(`.il-pane[data-part="${part}"] .js-plotly-plot`);
            const fl = gd._fullLayout, box = gd.getBoundingClientRect();
            return {x: box.left + fl.xaxis._offset + fl.xaxis.d2p(col),
                    y: box.top + fl.yaxis._offset + fl.yaxis.d2p(row)};
        };
        let last = at(), same = 0, frames = 0;
        const step = () => {
            const p = at();
            same = p.x === last.x && p.y === last.y ? same + 1 : 0;
            last = p;
            if (same >= 3 || ++frames > 120) resolve(p); else requestAnimationFrame(step);
        };
        requestAnimationFrame(step);
    })""", [part, row, col])


@pytest.mark.browser
def test_a_click_on_a_position_shows_that_positions_heads_and_parts(page, mount, gpt2_lab, monkeypatch):
    res = gpt2_lab.direct_logit_attribution(CLEAN, METRIC)
    b = Bridge(res.show(), mount, monkeypatch)
    w = b.w
    heatmap_paints(page, 2)
    p = cell_point(w, "positions", 0, 4)
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "click", "part": "positions", "row": 0, "col": 4, "shift": False}]
    b.pump()
    page.wait_for_function("() => document.querySelector('.il-pane[data-part=heads] .il-htitle-main')"
                           "?.textContent?.includes('position 4')")
    z = w.js("(w) => w.el.querySelector('.il-pane[data-part=heads] .js-plotly-plot').__interplab_grid.z")
    assert torch.allclose(torch.tensor(z), res.heads[:, :, 4].float(), atol=1e-7)
    shown = w.js("(w) => Object.fromEntries([...w.el.querySelectorAll('.il-vbar')].map("
                 "(r) => [r.dataset.label, Number(r.dataset.value)]))")
    assert shown["MLP2"] == pytest.approx(float(res.mlp[2, 4]), abs=1e-7)
    assert shown["total"] == pytest.approx(float(res.total[4]), abs=1e-7)
    hint = w.js("(w) => w.el.querySelector('.il-pane[data-part=heads] .il-edits-title').textContent")
    assert "nothing is patched" in hint
    shot(page, w, "dla")


@pytest.mark.browser
def test_a_click_on_a_sender_draws_its_receivers_bars(page, mount, gpt2_lab, monkeypatch):
    res = gpt2_lab.path_patch(CLEAN, CORRUPT, METRIC, senders="heads",
                              receivers=[(2, 0, "q"), (2, 1, "k")], per_receiver=True)
    b = Bridge(res.show(), mount, monkeypatch)
    w = b.w
    heatmap_paints(page, 1)
    p = cell_point(w, "heatmap", 0, 3)
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    b.pump()
    page.wait_for_function("() => document.querySelector('.il-vbar')?.dataset.value !== ''")
    shown = w.js("(w) => [...w.el.querySelectorAll('.il-vbar')].map((r) => [r.dataset.label, Number(r.dataset.value)])")
    assert [s[0] for s in shown] == ["L2H0.q", "L2H1.k"]
    assert [s[1] for s in shown] == pytest.approx(res.values[:, 0, 3].tolist(), abs=1e-7)
    shot(page, w, "path")


@pytest.mark.browser
def test_head_sweeps_side_by_side_one_selection_at_a_time(page, mount, gpt2_lab, monkeypatch):
    hs = gpt2_lab.patch_sweep_heads(CLEAN, CORRUPT, METRIC)
    view = hs.show()
    gpt2_lab.engine.worker.join()
    b = Bridge(view, mount, monkeypatch)
    b.pump()
    w = b.w
    heatmap_paints(page, 5)
    tops = w.js("(w) => [...w.el.querySelectorAll('.il-pane-row > .il-pane')].map((e) => [e.dataset.part, "
                "Math.round(e.getBoundingClientRect().top)])")
    assert [t[0] for t in tops] == list(SITES) and tops[0][1] == tops[1][1]  # side by side (wrapping when narrow)
    for part, row, col in (("q", 1, 2), ("v", 2, 3)):
        p = cell_point(w, part, row, col)
        page.mouse.click(p["x"], p["y"])
        page.wait_for_timeout(50)
        b.pump(gpt2_lab)
        b.pump()
    assert [m["part"] for m in w.requests] == ["q", "v"]
    assert view.explorers["q"].heatmap.selected == [] and view.explorers["v"].heatmap.selected == [[2, 3]]
    outlined = w.js("(w) => [...w.el.querySelectorAll('.il-cell-selected')].map((e) => "
                    "e.closest('.il-pane').dataset.part)")
    assert outlined == ["v"]
    metric = w.js("(w) => w.el.querySelector('.il-pane[data-part=logits] .il-metric').textContent")
    want = float(hs["v"].cells.grid(hs["v"].values)[2, 3])
    assert f"normalised = {want:.4f}" in metric
    shot(page, w, "head_sweeps")


@pytest.mark.browser
def test_an_ablation_sweeps_cell_clicked_shows_that_ablation(page, mount, gpt2_lab, monkeypatch):
    """The head sweeps of an ablation (no corrupt prompt): a real mouse click on a cell of z zeroes that head, and
    the logit panel shows the ablated run's change, the sweep's cell."""
    hs = gpt2_lab.patch_sweep_heads(CLEAN, None, METRIC, baseline="zero")
    view = hs.show()
    gpt2_lab.engine.worker.join()
    b = Bridge(view, mount, monkeypatch)
    b.pump()
    w = b.w
    heatmap_paints(page, 5)
    p = cell_point(w, "z", 1, 2)
    page.mouse.click(p["x"], p["y"])
    page.wait_for_timeout(50)
    want = float(hs["z"].cells.grid(hs["z"].values)[1, 2])
    assert abs(want) > 1e-5  # zeroing the head changes the metric: the panel below must show that change
    # painted at once from the sweep's own run of that cell, before the kernel has answered
    metric = w.js("(w) => w.el.querySelector('.il-pane[data-part=logits] .il-metric').textContent")
    shown = re.search(r"change = (\S+)", metric)
    assert shown and "ablated = " in metric, metric
    assert float(shown[1]) == pytest.approx(want, rel=1e-3), metric
    b.pump(gpt2_lab)
    b.pump()
    assert [m["part"] for m in w.requests] == ["z"] and view.explorers["z"].heatmap.selected == [[1, 2]]
    metric = w.js("(w) => w.el.querySelector('.il-pane[data-part=logits] .il-metric').textContent")
    shown = re.search(r"change = (\S+)", metric)  # as the page formats it (4 significant digits)
    assert shown and "ablated = " in metric, metric
    assert float(shown[1]) == pytest.approx(want, rel=1e-3), metric
    assert not ilab.attached_hooks()
    shot(page, w, "ablation_head_sweeps")


@pytest.mark.browser
def test_a_progressive_sweep_shows_the_estimate_and_cancel_keeps_a_partial_heatmap(page, mount, gpt2_lab,
                                                                                     monkeypatch):
    """The estimate is on the page before any exact cell; exact cells arrive as 'cells' messages; Cancel, clicked
    with the mouse while the sweep runs, leaves the exact cells done and the estimate elsewhere, marked partial."""
    import threading

    from interplab.views.patching import PatchExplorer, PatchSession

    session = PatchSession(gpt2_lab, CLEAN, CORRUPT, 5, 9)
    ex = PatchExplorer(session)
    gpt2_lab.engine.worker.join()
    b = Bridge(ex, mount, monkeypatch)
    w = b.w
    heatmap_paints(page, 1)
    reached, go = threading.Event(), threading.Event()
    add = ex.heatmap.add_cells

    def gated(cells):  # the worker waits after its first exact chunk until the page has pressed Cancel
        add(cells)
        reached.set()
        assert go.wait(30)

    monkeypatch.setattr(ex.heatmap, "add_cells", gated)
    ex.sweep(progressive=True, max_batch=2)
    assert reached.wait(60)
    b.pump()
    est = session.estimate()
    title = "() => document.querySelector('.il-pane[data-part=heatmap] .il-htitle-main')?.textContent ?? ''"
    page.wait_for_function(f"({title})().includes('exact cells replace the estimate')")
    cancel = page.locator(w.sel(".il-pane[data-part=heatmap] .il-cancel"))
    assert cancel.is_visible()
    cancel.click()
    w.wait_sent(1)
    b.pump()
    assert ex._cancel.is_set()
    go.set()
    gpt2_lab.engine.worker.join()
    b.pump()
    page.wait_for_function(f"({title})().includes('partial')")
    res = session.result
    view = session.merged(res, est)
    assert 2 <= view["n_exact"] < view["n_cells"]
    z = w.js("(w) => w.el.querySelector('.il-pane[data-part=heatmap] .js-plotly-plot').__interplab_grid.z")
    assert torch.allclose(torch.tensor(z), torch.tensor(view["values"]), atol=1e-6)
    exact = gpt2_lab.patch_sweep(CLEAN, CORRUPT, metric=METRIC, progress=False)
    done = ~torch.isnan(res.cells.grid(res.raw))
    assert torch.allclose(torch.tensor(z)[done], exact.cells.grid(exact.values)[done].float(), atol=1e-5)
    status = w.js("(w) => w.el.querySelector('.il-pane[data-part=heatmap] .il-status').textContent")
    assert "cancelled: partial" in status and not cancel.is_visible()
    assert not ilab.attached_hooks()
    shot(page, w, "progressive_partial")


def test_bad_clicks_in_the_composites_are_answered_and_change_nothing(gpt2_lab, monkeypatch):
    hs = gpt2_lab.patch_sweep_heads(CLEAN, CORRUPT, METRIC)
    view = hs.show()
    gpt2_lab.engine.worker.join()
    replies = []
    monkeypatch.setattr(view, "_send", lambda msg, buffers=None: replies.append(msg.get("content")))
    view.explorers["q"].heatmap.selected = [[1, 1]]
    for msg, text in [({"type": "click", "part": "k", "row": 99, "col": 0, "shift": False}, "out of range"),
                      ({"type": "click", "part": "zz", "row": 0, "col": 0, "shift": False}, "'part' must be one of"),
                      ({"type": "click", "part": "v", "row": 0, "col": 0}, "missing the field 'shift'")]:
        replies.clear()
        view._handle_msg({"content": {"data": {"method": "custom", "content": {**msg, "id": 7}}}, "buffers": []})
        reply = [r for r in replies if r and r.get("type") == "reply"]
        assert len(reply) == 1 and reply[0]["ok"] is False and text in reply[0]["error"], replies
    assert view.explorers["q"].heatmap.selected == [[1, 1]]  # a refused click clears no other heatmap
    dla = gpt2_lab.direct_logit_attribution(CLEAN, METRIC).show()
    before = list(dla.heads.values)
    bad = dla.positions.send_test_message({"type": "click", "row": 0, "col": 10_000, "shift": False})
    assert bad["ok"] is False and "out of range" in bad["error"] and dla.heads.values == before
    gpt2_lab.engine.worker.join()

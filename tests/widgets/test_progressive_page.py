"""A progressive sweep on the page, bridged to the real explorer: the heatmap's frame (plotly's axes, labels) is laid
out once, when the view is shown; the estimate, the streamed exact cells and the final grid (with its new title)
repaint the cells only, with no plotly call: each frame relayout was a 100-300 ms main-thread task at a progressive
sweep's start and end."""

from __future__ import annotations

import threading

import pytest
from bridge import Bridge  # tests/widgets/bridge.py

import interplab as ilab
from interplab.views.patching import PatchExplorer, PatchSession

pytestmark = pytest.mark.browser

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def test_a_progressive_sweep_never_lays_the_frame_out_again(page, mount, monkeypatch):
    lab = ilab.Lab.load("ioi-tiny")
    ex = PatchExplorer(PatchSession(lab, CLEAN, CORRUPT, " Mary", " John", "z", ("layer", "head", "pos")))
    assert lab.engine.worker.join(120)
    gate = threading.Event()
    lab.engine.worker.submit("test:gate", lambda: gate.wait(60))  # the sweep waits until the page is up
    ex.sweep(progressive=True)  # as lab.show does: the sweep starts before the view is shown
    b = Bridge(ex, mount, monkeypatch)
    w = b.w
    page.wait_for_function("() => window.paintsOf('heatmap') >= 1", timeout=20000)
    plot = ".interplab-heatmap .js-plotly-plot"
    w.js(f"(w) => {{ const gd = w.el.querySelector('{plot}'); window.__frames = 0;"
         " gd.on('plotly_afterplot', () => { window.__frames += 1; }); }")
    gate.set()
    assert lab.engine.worker.join(300)
    b.pump()  # the estimate, the exact cells, the final grid
    final = ex.heatmap.values
    assert all(v is not None for row in final for v in row) and "exact" in ex.heatmap.title
    page.wait_for_function(f"(v) => {{ const z = document.querySelector('{w.sel(plot)}').__interplab_grid.z;"
                           " return JSON.stringify(z) === JSON.stringify(v); }", arg=final, timeout=10000)
    page.wait_for_timeout(300)  # (a relayout would come in the next frames)
    assert w.js("() => window.__frames") == 0, "the sweep laid plotly's frame out again"
    assert w.js("(w) => w.el.querySelector('.il-htitle-main').textContent") == ex.heatmap.title

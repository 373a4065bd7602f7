"""Big sweeps and clicks that never wait, on the bare page (the kernel is the fake model; tests/test_controller.py
checks what the kernel sends).

- a 2000-cell sweep arrives as ~30 'cells' messages (only the new cells): no task over 100 ms, Cancel clickable
  mid-sweep, every cell painted;
- a click on a cell of an exact sweep paints the linked logit panel from the page's cell_tops before any reply.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.browser

ROWS, HEADS, POS = 16, 1, 122  # a layer x (head x pos) grid of 1952 cells, as the z sweep
COLS = HEADS * POS
TOKENS = [f" tok{i}" for i in range(POS)]
HOVER = "logit diff: 1.234\nnext: ' Mary' 0.52, ' John' 0.31, ' the' 0.02"

LONGTASKS = """() => {
  window.__longtasks = [];
  window.__lt_observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longtasks.push({ start: e.startTime, ms: e.duration });
  });
  window.__lt_observer.observe({ type: "longtask" });
}"""


def empty_grid():
    return dict(values=[[None] * COLS for _ in range(ROWS)], x_labels=TOKENS, y_labels=[f"L{r}" for r in range(ROWS)],
                x_title="head : position", y_title="layer", title="z: denoise (exact)", direction="denoise",
                metric_name="normalised logit diff", hover=[["not computed"] * COLS for _ in range(ROWS)],
                selected=[], active_edits=[], progress=0.01, zmin=None, zmax=None)


def test_a_2000_cell_sweep_keeps_the_page_responsive_and_cancel_clickable(page, mount):
    w = mount("heatmap", **empty_grid())
    w.wait_paints(1)
    page.evaluate(LONGTASKS)
    cells = [(r, c) for r in range(ROWS) for c in range(COLS)]
    batches = [cells[i:i + 65] for i in range(0, len(cells), 65)]  # ~30 progress updates
    cancel_at = len(batches) // 2
    t0 = time.monotonic()
    for k, batch in enumerate(batches):
        w.receive({"type": "cells", "cells": [[r, c, (r - c / COLS) / ROWS, f"{HOVER} {r},{c}"] for r, c in batch]})
        w.set(progress=(k + 1) / len(batches) * 0.99)
        if k == cancel_at:  # mid-sweep, a real click on the Cancel button, answered before the next update
            page.locator(w.sel(".il-cancel")).click(timeout=2000)
            w.wait_sent(1, timeout=2000)
        page.wait_for_timeout(150)  # a sweep's pace: an update every 150-300 ms
    page.wait_for_timeout(400)  # the last coalesced repaint
    assert w.requests == [{"type": "cancel"}]
    held = w.js("(w) => w.el.querySelector('.js-plotly-plot').__interplab_grid.z.flat()"
                ".filter((v) => typeof v === 'number').length")
    assert held == ROWS * COLS
    text = w.js(f"(w) => w.el.querySelector('.js-plotly-plot').__interplab_grid.hover(3, {COLS - 1})")
    assert "3," + str(COLS - 1) in text and "Mary" in text  # the cell's hover came with it
    # painted: the last cell's pixel is coloured (cells not computed are the plot's grey background)
    pixel = w.js(f"""(w) => {{ const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;
                 const cv = gd.querySelector('canvas.il-canvas'), k = cv.width / fl.xaxis._length;
                 const x = Math.round(fl.xaxis.l2p({COLS - 1}) * k), y = Math.round(fl.yaxis.l2p({ROWS - 1}) * k);
                 return [...cv.getContext('2d').getImageData(x, y, 1, 1).data]; }}""")
    assert pixel[3] == 255 and pixel[:3] != [217, 217, 217], pixel
    longest = page.evaluate("() => window.__longtasks.reduce((m, t) => Math.max(m, t.ms), 0)")
    print(f"\n{len(batches)} updates of {ROWS * COLS} cells in {time.monotonic() - t0:.1f} s; longest task "
          f"{longest:.0f} ms; {w.paints()} paints")
    assert longest <= 100, page.evaluate("() => window.__longtasks")
    # the sweep ends: the kernel sets the whole grid once
    w.set(values=[[0.5] * COLS for _ in range(ROWS)], hover=[[HOVER] * COLS for _ in range(ROWS)], progress=0.0)
    page.wait_for_function("(i) => window.W(i).el.querySelector('.js-plotly-plot').__interplab_grid.z[0][0] === 0.5",
                           arg=w.i)
    page.evaluate("() => window.__lt_observer.disconnect()")


def test_a_click_on_an_exact_sweep_paints_the_logit_panel_before_any_reply(page, mount):
    base = [{"name": "clean", "tokens": [" Mary", " John"], "probs": [0.7, 0.1]},
            {"name": "corrupt", "tokens": [" John", " Mary"], "probs": [0.6, 0.2]}]
    logits = mount("logits", series=base, metric={"name": "logit diff", "values": {"clean": 3.0, "corrupt": -1.0}},
                   title="next token", link="explorer-1")
    tops = {"metric": "logit diff", "cells": [[r, c, 1.0 + r - c / 10, f"patched: L{r} pos {c}", [" Mary", " the"],
                                               [0.4 + r / 100, 0.05]] for r in range(4) for c in range(12)]}
    from test_bare_page import click_cell, heatmap_traits

    heat = mount("heatmap", **heatmap_traits(cell_tops=tops, link="explorer-1"))
    heat.wait_paints(1)
    logits.wait_paints(1)
    n = logits.paints()
    click_cell(page, heat, 2, 4)
    logits.wait_paints(n + 1, timeout=2000)  # no reply was given: the page painted it
    assert heat.requests == [{"type": "click", "row": 2, "col": 4, "shift": False}]  # the kernel is still told
    text = page.locator(logits.sel(".interplab-logits")).inner_text()
    assert "patched: L2 pos 4" in text and "0.420" in text
    # the metric line: patched = the cell's metric, normalised against the panel's clean / corrupt
    assert "patched = 2.6000" in text and "normalised = 0.9000" in text
    outlined = "(w) => [...w.el.querySelectorAll('.il-cell-selected')].map((d) => [+d.dataset.row, +d.dataset.col])"
    assert heat.js(outlined) == [[2, 4]]  # the selection is outlined at once too, as the kernel will make it
    # a shift-click (several cells) and a click on a cell the kernel keeps disabled wait for the kernel
    n = logits.paints()
    click_cell(page, heat, 1, 1, shift=True)
    assert heat.js(outlined) == [[2, 4], [1, 1]]
    heat.receive({"type": "reply", "id": heat.sent[0]["id"], "ok": True})  # an earlier click's reply: still guessed
    assert heat.js(outlined) == [[2, 4], [1, 1]]
    heat.receive({"type": "reply", "id": heat.sent[1]["id"], "ok": True})  # the last click's: the kernel's word
    assert heat.js(outlined) == []
    heat.set(active_edits=[{"id": "r3c3", "label": "x", "enabled": False, "row": 3, "col": 3}])
    click_cell(page, heat, 3, 3)
    heat.wait_sent(3)
    page.wait_for_timeout(200)
    assert logits.paints() == n

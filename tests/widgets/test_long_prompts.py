"""Long prompts on the bare page: at 120 tokens the heatmap's tick labels never overlap (every k-th token, the hover
names each cell's), cells stay wide enough to see and click; at 488 the grid scrolls sideways and a click on the
last column still lands on it. Screenshots: artifacts/heatmap_120_tokens.png, artifacts/heatmap_488_tokens.png."""

from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.browser

ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "artifacts"


def traits(rows: int, cols: int) -> dict:
    tokens = [f" word{i}" if i % 3 else f" w{i}" for i in range(cols)]
    return dict(values=[[((r * 7 + c) % 11 - 5) / 5 for c in range(cols)] for r in range(rows)], x_labels=tokens,
                y_labels=[f"L{r}" for r in range(rows)], x_title="position", y_title="layer", title="resid_pre",
                direction="denoise", metric_name="normalised logit diff", hover=[], selected=[], active_edits=[],
                progress=0.0, zmin=None, zmax=None)


def tick_boxes(w) -> list[dict]:
    return w.js("(w) => [...w.el.querySelectorAll('.xtick text')].map((t) => { const r = t.getBoundingClientRect();"
                " return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: t.textContent }; })"
                ".sort((a, b) => a.left - b.left)")


def geometry(w) -> dict:
    return w.js("(w) => { const gd = w.el.querySelector('.js-plotly-plot'), xa = gd._fullLayout.xaxis;"
                " return { cell: Math.abs(xa.l2p(1) - xa.l2p(0)), height: gd.getBoundingClientRect().height,"
                " scroll: gd.scrollWidth, client: gd.clientWidth }; }")


@pytest.mark.parametrize("cols", [120, 488])
def test_long_prompts_stay_readable(page, mount, cols):
    w = mount("heatmap", **traits(12, cols))
    w.wait_paints(1)
    g = geometry(w)
    assert g["cell"] >= 4.5 and g["height"] > 300, g
    ticks = tick_boxes(w)
    assert 5 <= len(ticks) <= cols
    for a, b in zip(ticks, ticks[1:]):  # labels at -45°: neighbours' lines at least a 12 px font apart
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)
    if cols > 120:
        assert g["scroll"] > g["client"], g  # wider than the page: it scrolls sideways
    # a cell whose token is not labelled: its hover names it
    col = next(c for c in range(1, cols) if f"word{c}" not in {t["text"].strip("␣ ") for t in ticks})
    p = w.js("(w, col) => { const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;"
             " gd.scrollLeft = Math.max(0, fl.xaxis._offset + fl.xaxis.l2p(col) - gd.clientWidth / 2);"
             " const box = gd.getBoundingClientRect();"
             " return { x: box.left + fl.xaxis._offset + fl.xaxis.l2p(col) - gd.scrollLeft,"
             " y: box.top + fl.yaxis._offset + fl.yaxis.l2p(2) }; }", col)
    page.mouse.move(p["x"], p["y"])
    page.wait_for_function("(i) => !!window.W(i).el.querySelector('.hoverlayer .hovertext')", arg=w.i, timeout=5000)
    assert f"word{col}" in w.js("(w) => w.el.querySelector('.hoverlayer').textContent")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(w.sel(".interplab-heatmap")).screenshot(path=str(ARTIFACTS / f"heatmap_{cols}_tokens.png"))
    # and a click there lands on that cell, scrolled or not
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "click", "row": 2, "col": col, "shift": False}]


def test_the_logit_lens_labels_stay_apart_at_120_tokens(page, mount):
    cols, rows = 120, 6
    w = mount("lens", x_labels=[f" word{i}" for i in range(cols)], y_labels=[f"L{r}" for r in range(rows)],
              top_tokens=[[" x"] * cols for _ in range(rows)], probs=[[0.5] * cols for _ in range(rows)], hover=[],
              selected=[], title="logit lens")
    w.wait_paints(1)
    ticks = tick_boxes(w)
    assert 5 <= len(ticks) < cols
    for a, b in zip(ticks, ticks[1:]):
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)

"""Bare-page browser tests: the bundled ESM rendered with a fake anywidget model in Debian's Chromium.

Each test speaks in the user's terms: click a heatmap cell by its pixels -> the exact message the kernel gets.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=window.__xss=1>"
BOLD = "<b>bold</b>"
IOI = ["<|endoftext|>", "When", " Mary", " and", " John", " went", " to", " the", " store", ",", " John", " gave"]


def heatmap_traits(rows=4, cols=len(IOI), **kw):
    values = [[round((r - c / cols) / rows, 3) for c in range(cols)] for r in range(rows)]
    values[0][0] = None  # not computed yet
    t = dict(
        values=values,
        x_labels=IOI[:cols],
        y_labels=[f"L{r}" for r in range(rows)],
        x_title="position",
        y_title="layer",
        title="resid_pre patching",
        direction="denoise",
        metric_name="logit diff (normalised)",
        hover=[[f"top: ' Mary' {r},{c}" for c in range(cols)] for r in range(rows)],
        selected=[],
        active_edits=[],
        progress=0.0,
        zmin=None,
        zmax=None,
    )
    t.update(kw)
    return t


def click_cell(page, w, row, col, shift=False):
    p = w.js("(w, rc) => window.cellPixel(window.__mounted.indexOf(w), rc[0], rc[1])", [row, col])
    if shift:
        page.keyboard.down("Shift")
    page.mouse.click(p["x"], p["y"])
    if shift:
        page.keyboard.up("Shift")


def test_heatmap_paints_and_click_sends_exact_messages(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    assert w.js("(w) => !!w.el.querySelector('.js-plotly-plot .hm')")  # heatmap trace drawn
    # repeated " John" tokens stay separate columns (numeric axis, not categorical)
    assert w.js("(w) => w.el.querySelector('.js-plotly-plot')._fullData[0].z[0].length") == len(IOI)

    click_cell(page, w, 2, 4)
    w.wait_sent(1)
    assert w.sent == [{"type": "click", "row": 2, "col": 4, "shift": False}]

    click_cell(page, w, 3, 10, shift=True)  # the second " John"
    w.wait_sent(2)
    assert w.sent[1] == {"type": "click", "row": 3, "col": 10, "shift": True}

    click_cell(page, w, 0, 0)  # a not-yet-computed cell is clickable too
    w.wait_sent(3)
    assert w.sent[2] == {"type": "click", "row": 0, "col": 0, "shift": False}


def test_heatmap_kernel_update_repaints(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    n = w.paints()
    w.set(values=[[1.0] * len(IOI)] * 4)
    w.wait_paints(n + 1)
    assert w.js("(w) => w.el.querySelector('.js-plotly-plot')._fullData[0].z[1][3]") == 1.0
    # selected + active edits set from the kernel: outlines drawn and the list under the plot
    n = w.paints()
    w.set(
        selected=[[1, 2]],
        active_edits=[
            {"id": "e1", "label": "patch resid_pre L1 pos 2", "enabled": True, "row": 1, "col": 2},
            {"id": "e2", "label": "zero z L3 H4", "enabled": False, "row": 3, "col": 5},
        ],
    )
    w.wait_paints(n + 1)
    assert w.js("(w) => w.el.querySelector('.js-plotly-plot').layout.shapes.length") == 2  # enabled edit + selection
    labels = page.locator(w.sel(".il-edit-label")).all_text_contents()
    assert labels == ["patch resid_pre L1 pos 2", "zero z L3 H4"]


def test_heatmap_active_list_toggle_remove_clear_cancel(page, mount):
    w = mount(
        "heatmap",
        **heatmap_traits(
            active_edits=[
                {"id": "e1", "label": "patch L1 pos 2", "enabled": True, "row": 1, "col": 2},
                {"id": "e2", "label": "patch L3 pos 5", "enabled": False, "row": 3, "col": 5},
            ],
            progress=0.4,
        ),
    )
    w.wait_paints(1)
    page.locator(w.sel("li[data-id=e1] input[type=checkbox]")).click()
    page.locator(w.sel("li[data-id=e2] input[type=checkbox]")).click()
    page.locator(w.sel("li[data-id=e2] .il-edit-remove")).click()
    page.locator(w.sel(".il-clear")).click()
    page.locator(w.sel(".il-cancel")).click()
    w.wait_sent(5)
    assert w.sent == [
        {"type": "toggle", "id": "e1", "enabled": False},
        {"type": "toggle", "id": "e2", "enabled": True},
        {"type": "remove", "id": "e2"},
        {"type": "clear"},
        {"type": "cancel"},
    ]
    # progress bar visible while 0 < progress < 1, hidden when done
    assert page.locator(w.sel(".il-progress")).is_visible()
    w.set(progress=1.0)
    assert not page.locator(w.sel(".il-progress")).is_visible()


def test_error_and_status_are_text(page, mount):
    w = mount("heatmap", **heatmap_traits())
    w.wait_paints(1)
    assert not page.locator(w.sel(".il-error")).is_visible()
    w.set(error=f"bad message from the frontend: {XSS}", status=f"sweeping {BOLD}")
    box = page.locator(w.sel(".il-error"))
    assert box.is_visible()
    assert box.text_content() == f"bad message from the frontend: {XSS}"
    assert page.locator(w.sel(".il-status")).text_content() == f"sweeping {BOLD}"
    assert w.js("(w) => w.el.querySelectorAll('img, b').length") == 0
    assert page.evaluate("window.__xss") is None


def test_heatmap_xss_labels_are_literal_text(page, mount):
    labels = ["<|endoftext|>", XSS, BOLD, " Mary", "a&amp;b"]
    w = mount(
        "heatmap",
        **heatmap_traits(
            rows=2,
            cols=5,
            x_labels=labels,
            y_labels=[XSS, BOLD],
            title=XSS,
            metric_name=BOLD,
            hover=[[XSS] * 5, [BOLD] * 5],
            active_edits=[{"id": "x", "label": XSS, "enabled": True, "row": 0, "col": 1}],
        ),
    )
    w.wait_paints(1)
    page.wait_for_timeout(100)
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.querySelectorAll('#root img').length") == 0
    # plotly rendered no bold element from the label: the text shows the literal characters
    ticks = w.js("(w) => [...w.el.querySelectorAll('.xtick text')].map((t) => t.textContent)")
    assert XSS in ticks or any(t.startswith("<img") for t in ticks), ticks
    assert "<b>bold</b>" in ticks
    assert "a&amp;b" in ticks
    assert "␣Mary" in ticks
    assert "<|endoftext|>" in " ".join(ticks) or any(t.startswith("<|endoft") for t in ticks)
    assert w.js("(w) => w.el.querySelector('.gtitle').textContent") == XSS
    assert page.locator(w.sel(".il-edit-label")).text_content() == XSS
    # hover shows the literal text too
    p = w.js("(w) => window.cellPixel(window.__mounted.indexOf(w), 1, 2)")
    page.mouse.move(p["x"], p["y"])
    page.wait_for_selector(".hoverlayer .hovertext", timeout=3000)
    hover = page.evaluate("document.querySelector('.hoverlayer .hovertext').textContent")
    assert BOLD in hover and "\"<b>bold</b>\"" in hover
    assert page.evaluate("document.querySelectorAll('#root img').length") == 0

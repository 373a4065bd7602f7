"""The heatmap where users click it: JupyterLab 4 and Notebook 7 in Chromium, the real mouse and keyboard.

- shift-click adds cells (the notebook's own shift+mousedown, a cell range selection, swallowed the release);
- the dashboard (`lab.show`) and an explorer survive window resizes and sidebar toggles: the heatmap keeps its
  height, no panel draws over another, each cell sits under its tick in its colour (tests/geometry.py); its logit
  lens tab, opened and then widened and narrowed, keeps each top token in its cell;
- a click on an exact sweep's cell paints the logit panel at once, even while the kernel is busy with another cell.
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from geometry import judge, measure  # tests/geometry.py
from harness import LOAD_IOI, LabNotebook, write_notebook

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SOURCES = [
    LOAD_IOI + '''
res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"),
                      metric=ilab.logit_diff(" Mary", " John"), method="exact", progress=False)''',
    "explorer = res.show()\nexplorer",
    'dash = lab.show(clean, corrupt, " Mary", " John")\ndash',
]
APPS = ["lab", pytest.param("notebook", marks=pytest.mark.skipif(
    importlib.util.find_spec("notebook") is None, reason="Notebook 7 (the `notebook` package) is not installed"))]


@pytest.fixture
def heatmap_notebook(lab_server, request):
    """A notebook of its own per test: its own kernel (a page opening a path whose kernel another page's widgets
    live in fails to restore them)."""
    server, _ = lab_server
    name = f"heatmap_{request.node.name.replace('[', '_').replace(']', '')}.ipynb"
    write_notebook(server.root_dir / name, SOURCES)
    return server, name


def multi_selected_cells(nb) -> int:
    """How many notebook cells the notebook itself has selected (a shift-click range selection makes it > 1)."""
    return nb.page.evaluate("() => { const c = window.__il.nbw().content;"
                            " return c.widgets.filter((w) => c.isSelectedOrActive(w)).length; }")


@pytest.mark.parametrize("app", APPS)
def test_shift_click_adds_cells(heatmap_notebook, chromium_browser, app):
    server, name = heatmap_notebook
    nb = LabNotebook.open(chromium_browser, server, name, app=app)
    try:
        nb.run_through(1)
        nb.wait_heatmap(1)
        assert nb.exec("print(explorer.queue.join(120))").strip() == "True"
        startup_errors = list(nb.page_errors)  # Notebook 7 logs two of its own at startup (settings, file browser)
        nb.click_heatmap_cell(1, 1, 3)
        nb.wait_selected(1, [[1, 3]])
        nb.click_heatmap_cell(1, 2, 5, shift=True)
        nb.wait_selected(1, [[1, 3], [2, 5]])
        assert multi_selected_cells(nb) <= 1, "the shift-click also range-selected notebook cells"
        nb.click_heatmap_cell(1, 3, 7, shift=True)
        nb.wait_selected(1, [[1, 3], [2, 5], [3, 7]])
        nb.click_heatmap_cell(1, 2, 5, shift=True)  # a shift-click on a selected cell removes it
        nb.wait_selected(1, [[1, 3], [3, 7]])
        state = json.loads(nb.exec("import json\nprint(json.dumps(explorer.heatmap.selected))").strip())
        assert state == [[1, 3], [3, 7]]
        nb.click_heatmap_cell(1, 0, 2)  # a plain click replaces the selection
        nb.wait_selected(1, [[0, 2]])
        assert nb.page_errors == startup_errors, nb.page_errors
        assert app == "notebook" or not startup_errors, startup_errors
    finally:
        nb.close()


def panel_boxes(nb, index: int) -> dict:
    return nb.page.evaluate(
        """(i) => {
             const cell = window.__il.cellNode(i);
             const box = (el) => { const r = el.getBoundingClientRect();
                                   return { top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                                            width: r.width, height: r.height }; };
             const gd = cell.querySelector('.interplab-heatmap .js-plotly-plot');
             return { heatmap: box(gd), svg: box(gd.querySelector('.main-svg')),
                      logits: box(cell.querySelector('.interplab-logits')),
                      output: box(cell.querySelector('.jp-OutputArea')) };
           }""", index)


@pytest.mark.parametrize("app", APPS)
def test_dashboard_survives_window_resizes(heatmap_notebook, chromium_browser, app):
    server, name = heatmap_notebook
    nb = LabNotebook.open(chromium_browser, server, name, viewport=(1400, 1000), app=app)
    try:
        nb.run_through(2)
        nb.wait_heatmap(2)
        assert nb.exec("print(dash.explorer.queue.join(120))").strip() == "True"
        problems, compared = [], 0
        sidebar = "() => !document.querySelector('#jp-left-stack')?.classList.contains('lm-mod-hidden')"
        for width, toggle in ((1300, False), (1000, False), (1400, True), (1300, True), (800, False)):
            nb.page.set_viewport_size({"width": width, "height": 1000})
            # JupyterLab's left sidebar, opened or closed with its shortcut: the notebook's width jumps
            if toggle and app == "lab":
                was = nb.page.evaluate(sidebar)
                nb.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
                nb.page.keyboard.press("Control+b")
                nb.page.wait_for_function(f"() => ({sidebar})() !== {json.dumps(was)}", timeout=5000)
            time.sleep(0.8)  # the resize observer's relayout
            nb.page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
            for i in (1, 2):  # each cell under its tick, in its colour; no text clipped or over other text
                nb.page.evaluate("(i) => window.__il.cellNode(i).scrollIntoView()", i)
                where = f"cell {i} at {width} px{' after a sidebar toggle' if toggle and app == 'lab' else ''} ({app})"
                found, n = judge(measure(nb.page, "(i) => window.__il.cellNode(i).querySelector('.jp-OutputArea')",
                                         i), where)
                problems += found
                compared += n
            b = panel_boxes(nb, 2)
            assert b["heatmap"]["height"] > 250, (width, b)
            assert abs(b["svg"]["height"] - b["heatmap"]["height"]) < 2, (width, b)  # the plot fills its div
            assert b["heatmap"]["bottom"] <= b["logits"]["top"] + 1, f"the logit panel overlaps the heatmap: {b}"
            assert b["heatmap"]["right"] <= b["output"]["right"] + 1, f"the heatmap overflows its output: {b}"
        assert not problems, "\n".join(problems)
        assert compared >= 10, compared
        # the dashboard is one widget whose tabs are switched in the page: the mouse opens the logit lens
        tab = nb.page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".il-tab[data-part='lens']")
        tab.scroll_into_view_if_needed()
        t0 = nb.page.evaluate("() => performance.now()")
        tab.click()
        nb.wait_paint("lens", t0, timeout=30)
        # widened, then narrowed again: each top token stays in its cell, none runs into its neighbour (at 800 px
        # beside JupyterLab's sidebar the cells are too narrow for any: the hover names them)
        lens_texts = "() => window.__il.cellNode(2).querySelectorAll('.interplab-lens .heatmaplayer text').length"
        for width in (1300, 800):
            t0 = nb.page.evaluate("() => performance.now()")
            nb.page.set_viewport_size({"width": width, "height": 1000})
            nb.wait_paint("lens", t0, timeout=30)
            if width == 1300:  # drawn wide: its cells show their tokens
                nb.page.wait_for_function(f"() => ({lens_texts})() > 0", timeout=30_000)
            time.sleep(0.3)
            nb.page.evaluate("() => window.__il.cellNode(2).scrollIntoView()")
            found, _ = judge(measure(nb.page, "() => window.__il.cellNode(2).querySelector('.jp-OutputArea')"),
                             f"the lens tab at {width} px ({app})")
            assert not found, found
        assert nb.page.evaluate("() => window.__il.cellNode(2).querySelectorAll('.interplab-composite').length") == 1
        assert app == "notebook" or not nb.page_errors, nb.page_errors  # Notebook 7 logs two of its own at startup
    finally:
        nb.close()

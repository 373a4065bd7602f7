"""The IOI patching notebook in a real JupyterLab: click a heatmap cell in pixels -> the kernel's state changes and
the logit panel repaints with the patched series. Screenshot: artifacts/e2e_ioi_heatmap.png."""

from __future__ import annotations

import json
import pathlib
import sys
import time

import pytest
from harness import DEFINES_EXPLORER, LabNotebook  # not from conftest: tests/widgets has a conftest module too

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SCREENSHOT = ROOT / "artifacts" / "e2e_ioi_heatmap.png"


def test_click_heatmap_cell_patches_and_repaints_logits(lab_server, chromium_browser):
    server, name = lab_server
    t_start = time.monotonic()
    nb = LabNotebook.open(chromium_browser, server, name)
    try:
        # the kernel is this venv's python, running this checkout's interplab
        info = json.loads(nb.exec("import sys, json, interplab\n"
                                  "print(json.dumps([sys.executable, interplab.__file__]))").strip().splitlines()[-1])
        assert pathlib.Path(info[0]).parent == pathlib.Path(sys.executable).parent, \
            f"kernel runs {info[0]}, not the test venv's {sys.executable}"
        assert info[1].startswith(str(ROOT / "interplab")), info

        # run the notebook up to the cell defining `explorer`, the way a user does (run-all-above + run-cell)
        i = nb.find_cell(DEFINES_EXPLORER)
        nb.run_through(i)
        shown = i
        while not nb.has_widget(shown) and shown < i + 3:  # `explorer` displayed in a later cell
            shown += 1
            nb.run_cell(shown)
        assert nb.has_widget(shown), f"no heatmap under cell {i}..{shown} of {name}"
        nb.wait_heatmap(shown)
        nb.wait_paint("logits", -1, timeout=60)  # clean / corrupt bars
        assert nb.exec("print(explorer.queue.join(120))").strip() == "True"
        before = nb.series_names(shown)
        assert not any(n.startswith("patched") for n in before), before

        # click a cell in real pixels: the last layer at the final position (patching it restores the clean output)
        rows, cols = nb.heatmap_shape(shown)
        row, col = rows - 1, cols - 1
        t_click = nb.click_heatmap_cell(shown, row, col)

        # (2) the logit panel repaints after the click, with the patched series
        paint = nb.wait_paint("logits", t_click, timeout=60)
        names = nb.series_names(shown)
        assert any(n.startswith("patched") for n in names), f"no patched series after the click: {names}"
        assert "patched" in nb.logits_text(shown)
        # the click was one request, answered by the kernel with exactly one ok reply (over the real comm)
        nb.page.wait_for_function("(t) => (window.__interplab_replies || []).some((r) => r.widget === 'heatmap' "
                                  "&& r.t > t)", arg=t_click, timeout=30000)
        replies = nb.page.evaluate("(t) => window.__interplab_replies.filter((r) => r.widget === 'heatmap' "
                                   "&& r.t > t)", t_click)
        assert [r["ok"] for r in replies] == [True], replies
        # the click is outlined on the heatmap (the selection came back from the kernel)
        nb.page.wait_for_function(
            "([i, r, c]) => !!window.__il.cellNode(i).querySelector("
            "`.interplab-heatmap .il-cell-selected[data-row='${r}'][data-col='${c}']`)", arg=[shown, row, col],
            timeout=30000)

        # (1) the Python-side state changed, read through the kernel
        out = nb.exec("import json\nprint(json.dumps({'selected': explorer.heatmap.selected,"
                      " 'active': [e['id'] for e in explorer.heatmap.active_edits],"
                      " 'edits': [e.describe() for e in explorer.edits]}))")
        state = json.loads(out.strip().splitlines()[-1])
        assert state["selected"] == [[row, col]], state
        assert state["active"] == [f"r{row}c{col}"], state
        assert len(state["edits"]) == 1 and "patch" in state["edits"][0], state

        SCREENSHOT.parent.mkdir(exist_ok=True)
        nb.page.locator(".jp-Notebook .jp-Cell").nth(shown).screenshot(path=str(SCREENSHOT))
        assert not nb.page_errors, f"JS errors on the page: {nb.page_errors}"
        print(f"\ne2e: {name}, cell {shown}, clicked ({row}, {col}); click -> logits paint "
              f"{paint['t'] - t_click:.0f} ms; test body {time.monotonic() - t_start:.1f} s")
    finally:
        nb.close()

"""The workshop answers stay closed in a real JupyterLab (and Notebook 7) driven by Chromium: Run All and
Shift-Enter stepping run every answer cell without showing its answer (each prints only that it is closed, its input
stays collapsed), and a student who sets `show = True` in one answer cell and runs it sees that answer.

The notebook is notebooks/00_primer.ipynb: it has the same answer cells as the others and runs in seconds."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from harness import LabNotebook, serving

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "00_primer.ipynb"
CLOSED_MESSAGE = "Answer closed."
CLOSED_LINE = "show = False  # set to True, then run this cell, to see the answer"

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

_CELLS = """() => window.__il.nbw().content.widgets.map((c) => ({
  type: c.model.type, source: c.model.sharedModel.getSource(), inputHidden: c.inputHidden,
  text: c.model.type === "code" ? c.model.outputs.toJSON().map((o) => o.text || (o.data && o.data["text/plain"])
    || o.evalue || "").join("") : "",
  n: c.model.type === "code" ? c.model.outputs.length : 0}))"""


@pytest.fixture(scope="module")
def primer_server(tmp_path_factory, chromium_browser):
    with serving(NOTEBOOK, tmp_path_factory, "answers") as server:
        yield server


def _answers(cells) -> list[int]:
    return [i for i, c in enumerate(cells) if c["type"] == "code" and c["source"].startswith("# ANSWER")]


def _assert_closed(cells, how: str) -> None:
    answers = _answers(cells)
    assert answers, "the notebook has no answer cells"
    for i in answers:
        assert cells[i]["inputHidden"], f"answer cell {i}: its input shows after {how}"
        assert cells[i]["n"] == 1 and cells[i]["text"].startswith(CLOSED_MESSAGE), \
            f"answer cell {i} after {how}: {cells[i]['text'][:300]!r}"


APPS = ["lab", pytest.param("notebook", marks=pytest.mark.skipif(
    importlib.util.find_spec("notebook") is None, reason="Notebook 7 (the `notebook` package) is not installed"))]


@pytest.mark.parametrize("app", APPS)
def test_run_all_and_shift_enter_leave_answers_closed_until_show_is_set(primer_server, chromium_browser, app):
    nb = LabNotebook.open(chromium_browser, primer_server, NOTEBOOK.name, app=app)
    try:
        startup_errors = list(nb.page_errors)  # Notebook 7 logs two of its own at startup (settings, file browser)
        assert app == "notebook" or not startup_errors, startup_errors
        cells = nb.page.evaluate(_CELLS)
        assert all(cells[i]["inputHidden"] for i in _answers(cells)), "answer inputs collapsed on opening"

        nb.run("notebook:run-all-cells", 0, timeout=300)  # Run All
        _assert_closed(nb.page.evaluate(_CELLS), f"Run All in {app}")

        nb.run("notebook:clear-all-cell-outputs", 0)
        for i in range(len(cells)):  # Shift-Enter from the top: run the active cell, select the next
            nb.run("notebook:run-cell-and-select-next", i, timeout=180)
        _assert_closed(nb.page.evaluate(_CELLS), f"Shift-Enter through every cell in {app}")

        # the student's choice: open the first answer, set show = True, run it
        first = _answers(cells)[0]
        nb.page.evaluate("([i, a, b]) => { const m = window.__il.nbw().content.widgets[i].model.sharedModel;"
                         " m.setSource(m.getSource().replace(a, b)); }", [first, CLOSED_LINE, "show = True"])
        nb.run_cell(first)
        opened = nb.page.evaluate(_CELLS)[first]
        assert CLOSED_MESSAGE not in opened["text"] and opened["text"].startswith("right:"), opened["text"][:300]
        assert nb.page_errors == startup_errors, nb.page_errors
    finally:
        nb.close()

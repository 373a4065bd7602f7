"""Text grids (a heatmap's hover, the lens's top tokens) travel with each distinct string once; the page shows each
cell's own text, from the kernel's state and from a later update alike."""

from __future__ import annotations

import json

import pytest
import traitlets as t
from bridge import Bridge

from interplab.views.heatmap import PatchingHeatmap
from interplab.widgets.base import text_grid_from_json, text_grid_to_json

ROWS, COLS = 40, 30


def hover_grid(tag: str) -> list[list[str]]:
    """Mostly one repeated text (a sweep's unchanged cells), some cells their own (odd ones: unicode, markup)."""
    return [[f"{tag} cell {r},{c} <b>' Mary' é</b>" if (r * COLS + c) % 7 == 0 else f"{tag}: unchanged -0.25"
             for c in range(COLS)] for r in range(ROWS)]


def test_the_wire_form_keeps_each_string_once_and_reads_back_the_same():
    grid = hover_grid("a")
    wire = text_grid_to_json(grid)
    assert len(wire["strings"]) == len({s for row in grid for s in row})
    assert text_grid_from_json(json.loads(json.dumps(wire))) == grid
    assert text_grid_from_json(grid) == grid  # a plain grid passes
    view = PatchingHeatmap()
    for bad in ({"strings": ["a"], "index": [[0, 3]]}, {"strings": ["a"], "index": [["x"]]}, {"strings": 1}):
        with pytest.raises(t.TraitError, match="rows of strings"):  # a bad grid from a page: the trait refuses it
            view.set_state({"hover": bad})
    assert len(json.dumps(wire)) < len(json.dumps(grid)) / 2
    view = PatchingHeatmap(values=[[0.5] * COLS for _ in range(ROWS)], hover=grid)
    assert view.hover == grid  # Python keeps the rows
    assert view.get_state()["hover"] == wire  # the page and a saved notebook get the compact form


@pytest.mark.browser
def test_the_page_shows_each_cells_own_hover_text(page, mount, monkeypatch):
    view = PatchingHeatmap(values=[[(r - c) / 50 for c in range(COLS)] for r in range(ROWS)],
                           x_labels=[f" t{c}" for c in range(COLS)], y_labels=[f"L{r}" for r in range(ROWS)],
                           hover=hover_grid("first"))
    b = Bridge(view, mount, monkeypatch)
    b.w.wait_paints(1)
    read = "(w, rc) => w.el.querySelector('.js-plotly-plot').__interplab_grid.hover(rc[0], rc[1])"
    cells = [(0, 0), (0, 1), (3, 4), (ROWS - 1, COLS - 1), (17, 23)]
    for r, c in cells:
        assert view.hover[r][c] in b.w.js(read, [r, c]), (r, c)
    view.hover = hover_grid("second")  # an update: sent as a trait change, in the same form
    b.pump()
    b.w.page.wait_for_function("(i) => window.W(i).el.querySelector('.js-plotly-plot').__interplab_grid"
                               ".hover(0, 1).includes('second')", arg=b.w.i)
    for r, c in cells:
        assert view.hover[r][c] in b.w.js(read, [r, c]), (r, c)

"""PatchingHeatmap: a (row x col) grid of patching results; click a cell to select it, shift-click to add cells.

Traits (all synced; settable from Python, each set repaints):
    values        list[list[float | None]]  None = not computed yet (grey); NaN/inf become None; tensors accepted
    x_labels      list[str]   e.g. tokens (exact text; shown with ␣ for spaces, exact in hover)
    y_labels      list[str]   e.g. "L0".."L11"
    x_title, y_title, title, metric_name   str
    direction     "denoise" | "noise" | ""  (stated on the plot: 1 = clean restored, 0 = corrupted)
    hover         list[list[str]]  extra hover text per cell (e.g. top next tokens); may be []
    selected      list[[row, col]]  the selection (a click replaces it, a shift-click adds/removes a cell)
    active_edits  list[{id: str, label: str, enabled: bool, row: int, col: int}]  listed under the plot
    progress      float 0..1  progress bar with a Cancel button while 0 < progress < 1
    zmin, zmax    float | None  fixed colour range; default: RdBu centred at 0
    cell_tops     {metric: str, cells: [[row, col, metric, series name, tokens, probs], ...]} or {}: what a click on
                  a cell of an exact sweep shows in the logit panel, painted by the page at once (the click request
                  still goes to the kernel, which answers with the same numbers)
    link          str  the `link` of the LogitPanel the page paints those clicks on ("" = none)
    hint          str  what the view says a click does while nothing is selected ("" = patch the cell)
    key_cols      list[int]  columns whose labels are always shown on a long axis (where the prompts differ; the
                  last column is always labelled)
    status, error str

Requests from the frontend (protocol.json; each also carries its `id`) -> callbacks, called with keywords:
    {type:"click", row, col, shift}      -> on_click(fn(row=, col=, shift=))   (after `selected` is updated)
    {type:"toggle", edit_id, enabled}    -> on_toggle(fn(edit_id=, enabled=))  (edit_id: an `active_edits` id)
    {type:"remove", edit_id}             -> on_remove(fn(edit_id=))
    {type:"clear"}                       -> on_clear(fn())                     (after `selected` is emptied)
    {type:"cancel"}                      -> on_cancel(fn())

Messages to the frontend (protocol.json "messages"; no reply):
    {type:"cells", cells: [[row, col, value, hover], ...]}  add_cells(): a sweep's progress, only the new cells (the
                                                             `values`/`hover` traits are set once at the end)
"""

from __future__ import annotations

import math
from typing import Any

import traitlets as t

from ..widgets.base import Choice, Int, Labels, LabWidget, NumberGrid, TextGrid, plain

__all__ = ["PatchingHeatmap"]


def _finite(v: Any) -> float | None:
    v = plain(v)
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class PatchingHeatmap(LabWidget):
    _view_kind = t.Unicode("heatmap").tag(sync=True)
    # the requests this view accepts: {type: {field: "int" | "number" | "bool" | "string" (+ "?": optional) | [...]}}
    REQUESTS = {
        "click": {"row": "int", "col": "int", "shift": "bool"},
        "toggle": {"edit_id": "string", "enabled": "bool"},
        "remove": {"edit_id": "string"},
        "clear": {},
        "cancel": {},
    }
    MESSAGES = {"cells": {"cells": "list"}}  # kernel -> page, no reply

    values = NumberGrid().tag(sync=True)
    x_labels = Labels().tag(sync=True)
    y_labels = Labels().tag(sync=True)
    x_title = t.Unicode("position").tag(sync=True)
    y_title = t.Unicode("layer").tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    direction = t.Unicode("denoise").tag(sync=True)
    metric_name = t.Unicode("normalised metric").tag(sync=True)
    hover = TextGrid().tag(sync=True)
    selected = t.Any([]).tag(sync=True)
    active_edits = t.Any([]).tag(sync=True)
    progress = t.Float(0.0).tag(sync=True)
    zmin = t.Float(None, allow_none=True).tag(sync=True)
    zmax = t.Float(None, allow_none=True).tag(sync=True)
    cell_tops = t.Dict().tag(sync=True)
    link = t.Unicode("").tag(sync=True)
    hint = t.Unicode("").tag(sync=True)
    key_cols = t.List(t.Int()).tag(sync=True)

    def __init__(self, values: Any = None, **kwargs: Any):
        if values is not None:
            kwargs["values"] = values
        super().__init__(**kwargs)

    # -- trait validation: accept tensors/arrays, keep JSON-safe ------------------------------------------------------
    @t.validate("direction")
    def _v_direction(self, proposal):
        v = proposal["value"]
        if v not in ("denoise", "noise", ""):
            raise t.TraitError(f"direction must be 'denoise' or 'noise' (or ''), got {v!r}")
        return v

    @t.validate("progress")
    def _v_progress(self, proposal):
        return min(max(float(proposal["value"]), 0.0), 1.0)

    @t.validate("selected")
    def _v_selected(self, proposal):
        out = []
        for cell in plain(proposal["value"]):
            cell = plain(cell)
            if not (isinstance(cell, (list, tuple)) and len(cell) == 2):
                raise t.TraitError(f"selected must be a list of [row, col] pairs, got {cell!r}")
            out.append([int(cell[0]), int(cell[1])])
        return out

    @t.validate("active_edits")
    def _v_edits(self, proposal):
        out = []
        for e in plain(proposal["value"]):
            if not isinstance(e, dict) or "id" not in e:
                raise t.TraitError(f"active_edits entries must be dicts with at least 'id', got {e!r}")
            d = dict(e)
            d["id"] = str(d["id"])
            d.setdefault("label", d["id"])
            d["label"] = str(d["label"])
            d["enabled"] = bool(d.get("enabled", True))
            for k in ("row", "col"):
                if k in d and d[k] is not None:
                    d[k] = int(d[k])
            out.append(d)
        return out

    # -- shape helpers ---------------------------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return max(len(self.values), len(self.y_labels))

    @property
    def n_cols(self) -> int:
        return max(max((len(r) for r in self.values), default=0), len(self.x_labels))

    def set_cell(self, row: int, col: int, value: float | None) -> None:
        """Fill one cell (progressive sweeps); grows the grid to fit and repaints."""
        rows = [list(r) for r in self.values]
        while len(rows) <= row:
            rows.append([])
        for r in rows:
            while len(r) < max(self.n_cols, col + 1):
                r.append(None)
        rows[row][col] = value
        self.values = rows

    def add_cells(self, cells: list) -> None:
        """Paint computed cells [[row, col, value, hover], ...] without resending the grid: a one-way message (the
        traits stay as they were; set `values` and `hover` when the sweep ends)."""
        out = []
        for cell in plain(cells):
            row, col, value, hover = plain(cell)
            value = _finite(value)
            out.append([int(row), int(col), value, "" if hover is None else str(hover)])
        if out:
            self.send({"type": "cells", "cells": out})

    # -- requests --------------------------------------------------------------------------------------------------
    def _limits(self):
        edit_ids = Choice([str(e.get("id")) for e in self.active_edits])
        return {
            "click": {"row": Int(0, self.n_rows - 1), "col": Int(0, self.n_cols - 1)},
            "toggle": {"edit_id": edit_ids},
            "remove": {"edit_id": edit_ids},
        }

    def _handle_click(self, row: int, col: int, shift: bool) -> None:
        cell = [row, col]
        if not shift:
            self.selected = [cell]
        elif cell in self.selected:
            self.selected = [c for c in self.selected if c != cell]
        else:
            self.selected = [*self.selected, cell]

    def _handle_clear(self) -> None:
        self.selected = []

    def on_click(self, fn, remove: bool = False):
        """fn(row=, col=, shift=) after a cell click (``selected`` already updated)."""
        return self._register("click", fn, remove)

    def on_toggle(self, fn, remove: bool = False):
        """fn(edit_id=, enabled=) when an active edit's checkbox is changed."""
        return self._register("toggle", fn, remove)

    def on_remove(self, fn, remove: bool = False):
        """fn(edit_id=) when an active edit's × is clicked."""
        return self._register("remove", fn, remove)

    def on_clear(self, fn, remove: bool = False):
        """fn() when "Clear all" is clicked (``selected`` already emptied)."""
        return self._register("clear", fn, remove)

    def on_cancel(self, fn, remove: bool = False):
        """fn() when Cancel is clicked during a sweep."""
        return self._register("cancel", fn, remove)

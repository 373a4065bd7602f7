"""LensView (logit lens): layers x positions, cell text = the top token, colour = its probability.

Traits:
    x_labels    list[str]            tokens of the prompt (positions)
    y_labels    list[str]            layers (row 0 drawn at the bottom)
    top_tokens  list[list[str]]      [layer][position] top token, drawn as cell text (exact text in hover)
    probs       list[list[float]]    [layer][position] probability of that token (0..1, the colour)
    hover       list[list[str]]      [layer][position] extra hover text, e.g. the top-k
    selected    list[int]            [row, col] of the last clicked cell, or []
    title, status, error  str
Message -> callback:
    {type:"select", row, col}  -> on_select(fn(row, col))   (after `selected` is set)
"""

from __future__ import annotations

import traitlets as t

from .base import Int, LabWidget, plain, plain_grid, str_grid

__all__ = ["LensView"]


class LensView(LabWidget):
    _view_kind = t.Unicode("lens").tag(sync=True)

    x_labels = t.List(t.Unicode()).tag(sync=True)
    y_labels = t.List(t.Unicode()).tag(sync=True)
    top_tokens = t.List().tag(sync=True)
    probs = t.List().tag(sync=True)
    hover = t.List().tag(sync=True)
    selected = t.List().tag(sync=True)
    title = t.Unicode("").tag(sync=True)

    @t.validate("probs")
    def _v_probs(self, proposal):
        return plain_grid(proposal["value"])

    @t.validate("top_tokens", "hover")
    def _v_text(self, proposal):
        return str_grid(proposal["value"])

    @t.validate("x_labels", "y_labels")
    def _v_labels(self, proposal):
        return [str(s) for s in plain(proposal["value"])]

    @property
    def n_rows(self) -> int:
        return max(len(self.probs), len(self.top_tokens), len(self.y_labels))

    @property
    def n_cols(self) -> int:
        widths = [len(r) for r in (*self.probs, *self.top_tokens)]
        return max(max(widths, default=0), len(self.x_labels))

    def _schema(self):
        return {"select": {"row": Int(0, self.n_rows - 1), "col": Int(0, self.n_cols - 1)}}

    def _handle_select(self, row, col):
        self.selected = [row, col]

    def on_select(self, fn, remove: bool = False):
        """fn(row, col) when a cell is clicked."""
        return self._register("select", fn, remove)

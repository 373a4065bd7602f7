"""LensView (logit lens): layers x positions, cell text = the top token, colour = its probability.

Traits:
    x_labels    list[str]            tokens of the prompt (positions)
    y_labels    list[str]            layers (row 0 drawn at the bottom)
    top_tokens  list[list[str]]      [layer][position] top token, drawn as cell text (exact text in hover)
    probs       list[list[float]]    [layer][position] probability of that token (0..1, the colour)
    hover       list[list[str]]      [layer][position] extra hover text, e.g. the top-k
    selected    list[int]            [row, col] of the last clicked cell, or []
    title, status, error  str
Request (protocol.json; it also carries its `id`) -> callback, called with keywords:
    {type:"select", row, col}  -> on_select(fn(row=, col=))   (after `selected` is set)
"""

from __future__ import annotations

import traitlets as t

from ..analyses.lens import logit_lens
from ..engine import Engine, engine_of
from ..tokens import token_text
from ..widgets.base import Int, Labels, LabWidget, NumberGrid, TextGrid
from .logits import prompt_tokens

__all__ = ["LensView"]


class LensView(LabWidget):
    _view_kind = t.Unicode("lens").tag(sync=True)
    REQUESTS = {
        "select": {"row": "int", "col": "int"},
    }

    x_labels = Labels().tag(sync=True)
    y_labels = Labels().tag(sync=True)
    top_tokens = TextGrid().tag(sync=True)
    probs = NumberGrid().tag(sync=True)
    hover = TextGrid().tag(sync=True)
    selected = t.List().tag(sync=True)
    title = t.Unicode("").tag(sync=True)

    @property
    def n_rows(self) -> int:
        return max(len(self.probs), len(self.top_tokens), len(self.y_labels))

    @property
    def n_cols(self) -> int:
        widths = [len(r) for r in (*self.probs, *self.top_tokens)]
        return max(max(widths, default=0), len(self.x_labels))

    def _limits(self):
        return {"select": {"row": Int(0, self.n_rows - 1), "col": Int(0, self.n_cols - 1)}}

    def _handle_select(self, row, col):
        self.selected = [row, col]

    def on_select(self, fn, remove: bool = False):
        """fn(row=, col=) when a cell is clicked."""
        return self._register("select", fn, remove)


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
def lens_view(lab: Engine, prompt: str, k: int = 5) -> dict:
    engine = engine_of(lab)
    res = logit_lens(engine, prompt, k=k)
    texts = [[[token_text(engine.tokenizer, i) for i in cell] for cell in layer] for layer in res.top_ids.tolist()]
    top = [[cell[0] for cell in layer] for layer in texts]
    probs = res.top_probs[..., 0].tolist()
    hover = [[" | ".join(f"{t!r} {p:.2f}" for t, p in zip(cell, ps)) for cell, ps in zip(layer, lp)]
             for layer, lp in zip(texts, res.top_probs.tolist())]
    return {"x_labels": prompt_tokens(engine, prompt), "y_labels": [f"L{l}" for l in range(res.n_layers)],
            "top_tokens": top, "probs": probs, "hover": hover, "title": f"logit lens ({res.site})"}


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
def lens_widget(lab: Engine, prompt: str, *, part: bool = False) -> LensView:
    engine = engine_of(lab)
    return LensView(**lens_view(engine, prompt), part=part)

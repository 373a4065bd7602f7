"""AttentionView: one head's attention pattern, queries on y, keys on x, tokens on both axes.

Traits:
    tokens     list[str]
    n_layers, n_heads   int
    layer, head         int          the head shown (selectors in the view)
    pattern    list[list[float]]     [query][key] probabilities of that head
    title, status, error  str
Request (protocol.json; it also carries its `id`) -> callback, called with keywords:
    {type:"select", layer, head}  -> on_select(fn(layer=, head=))   (after `layer`/`head` are set; the controller
                                                                     then sets `pattern`)
"""

from __future__ import annotations

import traitlets as t

from .base import Int, Labels, LabWidget, NumberGrid

__all__ = ["AttentionView"]


class AttentionView(LabWidget):
    _view_kind = t.Unicode("attention").tag(sync=True)

    tokens = Labels().tag(sync=True)
    n_layers = t.Int(1).tag(sync=True)
    n_heads = t.Int(1).tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Int(0).tag(sync=True)
    pattern = NumberGrid().tag(sync=True)
    title = t.Unicode("").tag(sync=True)

    def _limits(self):
        return {"select": {"layer": Int(0, self.n_layers - 1), "head": Int(0, self.n_heads - 1)}}

    def _handle_select(self, layer, head):
        with self.hold_sync():
            self.layer = layer
            self.head = head

    def on_select(self, fn, remove: bool = False):
        """fn(layer=, head=) when the user picks another head."""
        return self._register("select", fn, remove)

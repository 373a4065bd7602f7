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

from ..engine import Engine, engine_of
from ..widgets.base import Int, Labels, LabWidget, NumberGrid
from ..widgets.jobs import job
from .logits import prompt_tokens

__all__ = ["AttentionView"]


class AttentionView(LabWidget):
    _view_kind = t.Unicode("attention").tag(sync=True)
    REQUESTS = {
        "select": {"layer": "int", "head": "int"},
    }

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


# ---- what the view shows, as plain numbers ----------------------------------------------------------------------
def attention_view(lab: Engine, prompt: str, layer: int, head: int) -> dict:
    engine = engine_of(lab)
    layer = engine.sites.layer_index(layer)
    engine.sites.check_head(head)
    run = engine.run(prompt, cache=[("pattern", layer)], log=False)
    return {"tokens": prompt_tokens(engine, prompt), "pattern": run.cache["pattern", layer][0, head].tolist(),
            "title": f"attention pattern L{layer} H{head}"}


# ---- the wiring: requests become jobs on the lab's worker --------------------------------------------------------
def attention_widget(lab: Engine, prompt: str, layer: int = 0, head: int = 0, *, part: bool = False) -> AttentionView:
    engine = engine_of(lab)
    view = AttentionView(n_layers=engine.n_layers, n_heads=engine.n_heads, layer=layer, head=head, part=part,
                         **attention_view(engine, prompt, layer, head))
    worker = engine.worker

    def select(layer, head):
        def show(d):
            view.pattern, view.title = d["pattern"], d["title"]
        job(worker, view, f"attention:{id(view)}", lambda: attention_view(engine, prompt, layer, head), show)

    view.on_select(select)
    return view

"""A composite on the kernel side (no browser, no model): its parts open no comm; their trait changes and messages
travel on the composite's one comm, prefixed / tagged with the part; requests come back routed by `part` and are
validated by the part; a bad one gets a readable error and the kernel goes on."""

from __future__ import annotations

import json

import pytest
from ipywidgets.widgets import widget as ipywidget

from interplab.views.attention import AttentionView
from interplab.views.heatmap import PatchingHeatmap
from interplab.views.lens import LensView
from interplab.views.logits import LogitPanel
from interplab.views.steering import SteeringPanel
from interplab.widgets import LabWidget
from interplab.widgets.base import BAD_MESSAGE, PROTOCOL
from interplab.widgets.composite import Composite


class Wire:
    """What a widget sends down its comm: ('update', state) and ('custom', content)."""

    def __init__(self, widget, monkeypatch):
        self.out = []
        monkeypatch.setattr(widget, "_send", lambda msg, buffers=None: self.out.append(
            (msg["method"], msg.get("content", msg.get("state")))))

    def updates(self):
        return [c for m, c in self.out if m == "update"]

    def customs(self):
        return [c for m, c in self.out if m == "custom"]


def frontend(widget, content) -> None:
    """A custom message from the page, through ipywidgets' own comm handler."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def explorer_like():
    heat = PatchingHeatmap(values=[[0.0, 0.5], [1.0, None]], x_labels=["a", "b"], y_labels=["L0", "L1"], part=True)
    logits = LogitPanel(title="next", part=True)
    return heat, logits, Composite({"heatmap": heat, "logits": logits})


def lab_widgets() -> set:
    return {id(w) for w in ipywidget._instances.values() if isinstance(w, LabWidget)}


def test_parts_open_no_comm_and_the_composite_carries_their_state_once():
    before = lab_widgets()
    parts = {"heatmap": PatchingHeatmap(part=True), "logits": LogitPanel(part=True),
             "steering": SteeringPanel(part=True), "lens": LensView(part=True), "attention": AttentionView(part=True)}
    comp = Composite(parts, panes=[{"part": "heatmap"}, {"part": "logits"},
                                   {"tabs": [{"title": t, "part": t} for t in ("steering", "lens", "attention")]}])
    assert all(p.comm is None and p.is_part for p in parts.values())
    assert lab_widgets() - before == {id(comp)}  # one comm for the five views
    state = comp.get_state()
    for name, part in parts.items():
        carried = {k.split(".", 1)[1] for k in state if k.startswith(f"{name}.")}
        assert carried == {*PROTOCOL["common_traits"], *PROTOCOL["views"][part._view_kind]["traits"]}
    assert not [k for k in state if "." in k and k.split(".", 1)[1] in ("_esm", "_bundle", "layout", "_css")]
    assert state["parts"][0] == {"name": "heatmap", "kind": "heatmap"}
    assert state["panes"][2]["tabs"][1]["part"] == "lens"
    code = len(json.dumps({k: v for k, v in state.items() if k != "_esm"}))
    assert code < 20_000, code  # the parts' state, not five copies of the widget code
    comp.close()


def test_trait_changes_and_messages_travel_prefixed_and_tagged(monkeypatch):
    heat, logits, comp = explorer_like()
    wire = Wire(comp, monkeypatch)
    heat.selected = [[1, 0]]
    with logits.hold_sync():  # one message for the block, as ipywidgets does it
        logits.series = [{"name": "clean", "tokens": ["a"], "probs": [1.0]}]
        logits.status = "computed"
    heat.add_cells([[1, 1, 0.25, "hover"]])
    assert wire.out == [
        ("update", {"heatmap.selected": [[1, 0]]}),
        ("update", {"logits.series": [{"name": "clean", "tokens": ["a"], "probs": [1.0]}],
                    "logits.status": "computed"}),
        ("custom", {"type": "cells", "cells": [[1, 1, 0.25, "hover"]], "part": "heatmap"}),
    ]
    comp.close()


def test_requests_are_routed_by_part_validated_by_it_and_answered_tagged(monkeypatch):
    heat, logits, comp = explorer_like()
    wire = Wire(comp, monkeypatch)
    clicks = []
    heat.on_click(lambda **kw: clicks.append(kw))
    frontend(comp, {"type": "click", "id": 1, "row": 1, "col": 0, "shift": False, "part": "heatmap"})
    assert heat.selected == [[1, 0]] and clicks == [{"row": 1, "col": 0, "shift": False}]
    assert wire.customs() == [{"type": "reply", "id": 1, "ok": True, "part": "heatmap"}]
    assert ("update", {"heatmap.selected": [[1, 0]]}) in wire.out

    # bad ones: readable errors, on the part that got it or on the composite; nothing raises
    wire.out.clear()
    frontend(comp, {"type": "click", "id": 2, "row": 9, "col": 0, "shift": False, "part": "heatmap"})
    assert wire.customs()[-1] == {"type": "reply", "id": 2, "ok": False, "error": heat.error, "part": "heatmap"}
    assert heat.error == BAD_MESSAGE + "'row'=9 is out of range 0..1"
    frontend(comp, {"type": "click", "id": 3, "row": 0, "col": 0, "shift": False, "part": "logits"})
    assert logits.error.startswith(BAD_MESSAGE + "unknown message type 'click' (allowed: pair)")
    frontend(comp, {"type": "click", "id": 4, "row": 0, "col": 0, "shift": False, "part": "lens"})
    assert comp.error == BAD_MESSAGE + "'part' must be one of 'heatmap', 'logits', got 'lens'"
    frontend(comp, {"type": "click", "id": 5, "row": 0, "col": 0, "shift": False})
    assert comp.error.startswith(BAD_MESSAGE + "a composite's request names its part: 'part' is missing")
    for bad in ("garbage", None, [1, 2], {"part": 7, "id": 6}):
        frontend(comp, bad)
        assert comp.error.startswith(BAD_MESSAGE)
    assert [c["id"] for c in wire.customs()] == [2, 3, 4, 5, None, None, None, 6]
    assert all(c["ok"] is False for c in wire.customs())
    # a good request clears the part's error and is still routed
    frontend(comp, {"type": "clear", "id": 7, "part": "heatmap"})
    assert heat.selected == [] and heat.error == ""
    comp.close()


def test_a_part_shown_on_its_own_gets_its_comm_and_both_views_follow(monkeypatch):
    heat, _, comp = explorer_like()
    wire = Wire(comp, monkeypatch)
    assert heat.comm is None
    bundle = heat._repr_mimebundle_()
    assert heat.comm is not None and not heat.is_part
    assert bundle[0]["application/vnd.jupyter.widget-view+json"]["model_id"] == heat.model_id
    own = []
    monkeypatch.setattr(heat.comm, "send", lambda data=None, buffers=None, **kw: own.append(data))
    heat.title = "shown twice"
    assert ("update", {"heatmap.title": "shown twice"}) in wire.out
    assert any(m["method"] == "update" and m["state"] == {"title": "shown twice"} for m in own)
    comp.close()
    heat.close()


def test_a_composite_refuses_what_it_cannot_show():
    with pytest.raises(ValueError, match="unknown part"):
        Composite({"heatmap": PatchingHeatmap(part=True)}, panes=[{"part": "logits"}])
    with pytest.raises(ValueError, match="lower-case"):
        Composite({"Heat Map": PatchingHeatmap(part=True)})
    with pytest.raises(TypeError, match="not a composite"):
        Composite({"inner": Composite({})})

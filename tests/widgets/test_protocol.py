"""protocol.json, the one declaration of the widget messages: the Python classes and the JS sources agree with it,
and every request gets exactly one reply (good, malformed, or with a callback that raises)."""

from __future__ import annotations

import inspect
import json
import pathlib
import re

import anywidget
import pytest

import interplab.views  # noqa: F401 (every view class defined)
from interplab.views.attention import AttentionView
from interplab.views.circuit import CircuitGraph
from interplab.views.heatmap import PatchingHeatmap
from interplab.views.lens import LensView
from interplab.views.logits import LogitPanel
from interplab.views.steering import SteeringPanel
from interplab.widgets import LabWidget
from interplab.widgets.base import BAD_MESSAGE, PROTOCOL, VIEW_CLASSES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "js" / "src"
VIEW_JS = SRC / "views"  # one file per view kind
ALL_JS = sorted([*SRC.glob("*.js"), *VIEW_JS.glob("*.js")])
VIEWS = PROTOCOL["views"]
CLASSES = VIEW_CLASSES  # kind -> class, each view class registers itself as it is defined
SCALARS = {"int", "number", "bool", "string"}


def required(fields: dict) -> set[str]:
    return {k for k, spec in fields.items() if not (isinstance(spec, str) and spec.endswith("?"))}


# ------------------------------------------------------------------------------------------- the declaration itself
def test_the_declaration_is_well_formed_and_names_every_widget():
    assert set(VIEWS) == set(CLASSES)
    for kind, view in VIEWS.items():
        assert {"requests", "traits"} <= set(view) <= {"requests", "traits", "messages"}, kind
        for mtype, fields in view.get("messages", {}).items():  # kernel -> frontend, one way
            assert re.fullmatch(r"[a-z_]+", mtype) and mtype != "reply", mtype
            assert mtype not in view["requests"], f"{kind}.{mtype}: a message and a request share a name"
            assert all(spec in SCALARS | {"list"} for spec in fields.values()), (kind, mtype, fields)
        for rtype, fields in view["requests"].items():
            assert re.fullmatch(r"[a-z_]+", rtype), rtype
            assert not {"type", "id"} & set(fields), f"{kind}.{rtype}: 'type' and 'id' are the envelope's"
            for key, spec in fields.items():
                ok = spec.removesuffix("?") in SCALARS if isinstance(spec, str) else (
                    isinstance(spec, list) and spec and all(isinstance(c, str) for c in spec))
                assert ok, f"{kind}.{rtype}.{key}: {spec!r} is not a declared field type"


# ------------------------------------------------------------------------------------------- Python agrees
@pytest.mark.parametrize("kind", list(VIEWS))
def test_every_declared_request_is_handled_and_every_handler_declared(kind):
    cls, declared = CLASSES[kind], VIEWS[kind]["requests"]
    own = set(dir(cls)) - set(dir(LabWidget))
    handlers = {n.removeprefix("_handle_") for n in own if n.startswith("_handle_")}
    registrars = {n.removeprefix("on_") for n in own if n.startswith("on_")}
    assert set(declared) <= handlers | registrars, f"{kind}: declared but neither handled nor registrable"
    assert handlers | registrars <= set(declared), f"{kind}: a handler or on_<type> for an undeclared request"
    for rtype in handlers:  # the widget's own handler takes the declared fields as keywords
        params = inspect.signature(getattr(cls, f"_handle_{rtype}")).bind_partial
        params(None, **dict.fromkeys(declared[rtype]))
        params(None, **dict.fromkeys(required(declared[rtype])))


@pytest.mark.parametrize("kind", list(VIEWS))
def test_declared_traits_are_the_synced_traits(kind):
    synced = set(CLASSES[kind].class_traits(sync=True)) - set(anywidget.AnyWidget.class_traits(sync=True))
    assert synced == set(VIEWS[kind]["traits"]) | set(PROTOCOL["common_traits"])


@pytest.mark.parametrize("kind", list(VIEWS))
def test_widget_limits_only_narrow_declared_fields(kind):
    declared = VIEWS[kind]["requests"]
    for rtype, fields in CLASSES[kind]()._limits().items():
        assert rtype in declared and set(fields) <= set(declared[rtype]), (kind, rtype, set(fields))


def test_registering_an_undeclared_request_is_an_error():
    with pytest.raises(ValueError, match="the 'heatmap' view declares no 'zap' request"):
        PatchingHeatmap()._register("zap", print)


# ------------------------------------------------------------------------------------------- JS agrees
def _balanced(src: str, i: int) -> str:
    """The text from the bracket at src[i] to its match, brackets included."""
    depth = 0
    for j in range(i, len(src)):
        depth += (src[j] in "([{") - (src[j] in ")]}")
        if depth == 0:
            return src[i: j + 1]
    raise AssertionError(f"unbalanced from {src[i:i + 60]!r}")


def _top_level(body: str) -> list[str]:
    """An object literal's body split at its top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in [*parts, cur] if p.strip()]


def _object_keys(src: str, arg: str) -> set[str]:
    """The keys of a request's fields as written at the call site: nothing, an object literal (keys, shorthands,
    `...f()` spreads) or `f()`, where f is `const f = () => ({...})` in the same file."""
    arg = arg.strip()
    if not arg:
        return set()
    call = re.fullmatch(r"(?:\.\.\.)?(\w+)\(\)", arg)
    if call:
        m = re.search(rf"const {call.group(1)} = \(\) => \(", src)
        assert m, f"cannot read the fields of {arg!r}: make it `const {call.group(1)} = () => ({{...}})`"
        return _object_keys(src, _balanced(src, m.end() - 1)[1:-1])
    assert arg.startswith("{") and arg.endswith("}"), f"request fields must be an object literal or f(): {arg!r}"
    keys = set()
    for part in _top_level(arg[1:-1]):
        m = re.fullmatch(r"(\w+)\s*(?::[\s\S]*)?", part)
        if m:
            keys.add(m.group(1))
        else:
            keys |= _object_keys(src, part)
    return keys


def js_requests() -> list[tuple[str, str, set[str]]]:
    """(file, request type, field names) of every `request("type", fields)` call in js/src."""
    out = []
    for path in ALL_JS:
        src = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\brequest\(\s*\"(\w+)\"\s*,?", src):
            args = _balanced(src, src.index("(", m.start()))[1:-1]
            fields = args.split(",", 1)[1] if "," in args else ""
            out.append((path.name, m.group(1), _object_keys(src, fields)))
    return out


def views_of(file: str) -> list[str]:
    """The views whose code a JS file is: <kind>.js itself; plot.js's shell serves the views that ask for its
    progress bar (with its Cancel button)."""
    if file == "plot.js":
        return [kind for kind in VIEWS if re.search(rf"shell\(model, el, \"{kind}\", \{{ progress: true \}}\)",
                                                    (VIEW_JS / f"{kind}.js").read_text(encoding="utf-8"))]
    return [file.removesuffix(".js")]


def test_every_js_request_is_declared_with_its_fields():
    calls = js_requests()
    assert len(calls) >= 12, calls  # the regex still finds the call sites
    sent = set()
    for file, rtype, keys in calls:
        assert views_of(file), f"{file}: a request from a file that is no view's"
        for kind in views_of(file):
            declared = VIEWS[kind]["requests"]
            assert rtype in declared, f"{file}: request({rtype!r}) is not declared for the {kind} view"
            extra = keys - set(declared[rtype])
            assert not extra, f"{file}: {rtype} with undeclared field(s) {extra}"
            missing = required(declared[rtype]) - keys
            assert not missing, f"{file}: {rtype} without its required field(s) {missing}"
            sent.add((kind, rtype))
    declared_all = {(kind, rtype) for kind, view in VIEWS.items() for rtype in view["requests"]}
    assert declared_all == sent, f"declared but never sent by the frontend: {declared_all - sent}"


def test_js_never_writes_a_trait_and_sends_only_through_request():
    for path in ALL_JS:
        src = path.read_text(encoding="utf-8")
        assert not re.search(r"\bmodel\.set\(|save_changes|\.set\(\s*\"", src), f"{path.name} writes a synced trait"
        sends = re.findall(r"\.send\(", src)
        # plot.js: state.request, the only sender; composite.js: a part's adapter, forwarding that request with `part`
        assert len(sends) == (1 if path.name in ("plot.js", "composite.js") else 0), \
            f"{path.name}: a send outside state.request"
    adapter = (VIEW_JS / "composite.js").read_text(encoding="utf-8")
    assert re.search(r"model\.send\(\{ \.\.\.msg, part: name \}", adapter), "the part adapter must only tag and forward"


def test_js_reads_only_declared_traits():
    for path in ALL_JS:
        src = path.read_text(encoding="utf-8")
        names = set(re.findall(r"\b(?:model|state)\.get\(\s*\"(\w+)\"", src))
        for m in re.finditer(r"\.watch\(\s*(\w+|\[)", src):  # state.watch(["a", "b"], ...) or watch(NAMES, ...)
            if m.group(1) == "[":
                start = m.end() - 1
            else:
                const = re.search(rf"const {m.group(1)} = \[", src)
                assert const, f"{path.name}: cannot read the trait names in watch({m.group(1)})"
                start = const.end() - 1
            names |= set(re.findall(r"\"(\w+)\"", _balanced(src, start)))
        shared = ("index.js", "bars.js", "featurepage.js", "protocol.js", "registry.js", "plotly.js")
        kinds = views_of(path.name) if path.name not in shared else []
        allowed = set(PROTOCOL["common_traits"]).union(*(VIEWS[k]["traits"] for k in kinds))
        assert names <= allowed, f"{path.name} reads undeclared trait(s) {names - allowed}"


# ------------------------------------------------------------------------------------------- one reply per request
class Wire:
    """What a widget sends to the frontend: ('update', state) for traits, ('custom', content) for replies."""

    def __init__(self, widget, monkeypatch):
        self.out = []
        monkeypatch.setattr(widget, "_send", lambda msg, buffers=None: self.out.append(
            (msg["method"], msg.get("content", msg.get("state")))))

    @property
    def replies(self):
        return [c for m, c in self.out if m == "custom"]


def heatmap():
    return PatchingHeatmap(values=[[0.0, 0.5], [1.0, None]], x_labels=["a", "b"], y_labels=["L0", "L1"],
                           active_edits=[{"id": "e1", "label": "patch L0 pos 1", "row": 0, "col": 1}])


def steering():
    return SteeringPanel(n_layers=4, sites=["resid_pre", "mlp_out"], site="resid_pre", alpha_max=8.0)


GOOD = {
    "heatmap": (heatmap, [{"type": "click", "row": 1, "col": 0, "shift": False},
                          {"type": "toggle", "edit_id": "e1", "enabled": False},
                          {"type": "remove", "edit_id": "e1"}, {"type": "clear"}, {"type": "cancel"}]),
    "steering": (steering, [{"type": "preview", "alpha": 1.0, "layer": 2, "site": "mlp_out", "positions": "last"},
                            {"type": "generate", "alpha": 1.0, "layer": 2, "site": "mlp_out", "positions": "all",
                             "max_new_tokens": 3},
                            {"type": "set_vector", "positive": "a\nb", "negative": "c"},
                            {"type": "update", "prompt": "p"}]),
    "lens": (lambda: LensView(probs=[[0.1, 0.2]], top_tokens=[["x", "y"]]), [{"type": "select", "row": 0, "col": 1}]),
    "attention": (lambda: AttentionView(n_layers=2, n_heads=2), [{"type": "select", "layer": 1, "head": 1}]),
    "circuit": (lambda: CircuitGraph(edges=[["embed -> logits", "embed", "logits", "", 0.5],
                                            ["embed -> L0H0.q", "embed", "L0H0", "q", 0.1]], count=1),
                [{"type": "threshold", "count": 2}, {"type": "edge", "edge": "embed -> L0H0.q"}, {"type": "circuit"}]),
}
BAD = [{"type": "click", "id": 5, "row": 99, "col": 0, "shift": False}, {"type": "zap", "id": 6},
       {"type": "select", "id": 7}, {"type": "cancel", "id": "8"}, {"type": "remove", "id": 9}]


@pytest.mark.parametrize("kind", list(GOOD))
def test_every_request_gets_exactly_one_reply(kind, monkeypatch):
    factory, good = GOOD[kind]
    w = factory()
    wire = Wire(w, monkeypatch)
    for i, msg in enumerate(good):
        wire.out.clear()
        reply = w.send_test_message({**msg, "id": 100 + i})
        assert wire.replies == [reply] == [{"type": "reply", "id": 100 + i, "ok": True}], (msg, w.error)
        # the state it changed goes first: the reply comes last
        assert [m for m, _ in wire.out][-1] == "custom"
    for msg in BAD:
        wire.out.clear()
        reply = w.send_test_message(msg)
        rid = msg["id"] if isinstance(msg["id"], int) else None
        assert wire.replies == [reply] and reply["id"] == rid and reply["ok"] is False, (msg, reply)
        assert reply["error"] == w.error and reply["error"].startswith(BAD_MESSAGE)
    for garbage in ["hello", None, [1, 2], 42]:  # no id to answer: the reply's id is null
        wire.out.clear()
        w.send_test_message(garbage)
        assert len(wire.replies) == 1 and wire.replies[0]["id"] is None and wire.replies[0]["ok"] is False


def test_logit_panel_rejects_every_request_but_its_pair_menu_with_one_reply(monkeypatch):
    w = LogitPanel()
    wire = Wire(w, monkeypatch)
    w.send_test_message({"type": "click", "id": 3})
    assert wire.replies == [{"type": "reply", "id": 3, "ok": False,
                             "error": BAD_MESSAGE + "unknown message type 'click' (allowed: pair)"}]
    w.send_test_message({"type": "pair", "id": 4, "index": 0})  # one pair: no menu, only the mean (-1)
    assert wire.replies[-1] == {"type": "reply", "id": 4, "ok": False,
                                "error": BAD_MESSAGE + "'index'=0 is out of range -1..-1"}


def test_raising_callbacks_get_one_reply_with_every_error(monkeypatch):
    w = heatmap()
    wire = Wire(w, monkeypatch)
    ran = []

    def broken(**_):
        raise RuntimeError("CUDA out of memory")

    def also_broken(**_):
        raise KeyError("k")

    w.on_click(broken)
    w.on_click(lambda **kw: ran.append(kw))
    w.on_click(also_broken)
    w.send_test_message({"type": "click", "id": 1, "row": 0, "col": 1, "shift": True})
    assert len(wire.replies) == 1
    reply = wire.replies[0]
    assert reply["id"] == 1 and reply["ok"] is False
    assert reply["error"] == ("error in on_click callback broken: RuntimeError: CUDA out of memory\n"
                              "error in on_click callback also_broken: KeyError: 'k'")
    assert w.error == reply["error"] and ran == [{"row": 0, "col": 1, "shift": True}] and w.selected == [[0, 1]]
    # the widget's own handler raising: one reply, and the callbacks do not run
    monkeypatch.setattr(w, "_handle_clear", lambda: 1 / 0)
    wire.out.clear()
    w.on_clear(lambda: ran.append("clear"))
    w.send_test_message({"type": "clear", "id": 2})
    assert wire.replies == [{"type": "reply", "id": 2, "ok": False,
                             "error": "error while handling 'clear': ZeroDivisionError: division by zero"}]
    assert "clear" not in ran


def test_replies_and_test_ids(monkeypatch):
    w = heatmap()
    wire = Wire(w, monkeypatch)
    a = w.send_test_message({"type": "cancel"})
    b = w.send_test_message({"type": "cancel"})
    assert a["id"] < 0 and b["id"] < a["id"], "test ids are negative: never one the frontend is waiting for"
    assert w.send_test_message({"kind": "anywidget-command", "id": "1", "name": "x", "msg": {}}) is None
    assert len(wire.replies) == 2  # anywidget's own commands are answered by anywidget


def test_the_reply_travels_as_a_custom_message():
    w = heatmap()
    sent = []
    w.send = lambda content, buffers=None: sent.append(content)
    w.send_test_message({"type": "cancel", "id": 4})
    assert sent == [{"type": "reply", "id": 4, "ok": True}]
    assert json.loads(json.dumps(sent)) == sent


def test_cells_travel_as_the_declared_one_way_message(monkeypatch):
    w = heatmap()
    wire = Wire(w, monkeypatch)
    w.add_cells([[1, 1, 0.25, "m: 0.250"], (0, 1, float("nan"), None)])
    w.add_cells([])  # nothing new: nothing sent
    assert wire.out == [("custom", {"type": "cells", "cells": [[1, 1, 0.25, "m: 0.250"], [0, 1, None, ""]]})]
    declared = VIEWS["heatmap"]["messages"]["cells"]
    assert set(wire.out[0][1]) - {"type"} == set(declared)
    assert w.values == [[0.0, 0.5], [1.0, None]]  # the traits are untouched (set once when the sweep ends)


# ------------------------------------------------------------------------------------------- declared once
def test_protocol_json_is_what_the_view_classes_declare():
    """Each view is declared once, on its class (REQUESTS, MESSAGES, its synced traits): protocol.json, which the
    bundle carries, is generated from them (python -m interplab.views) and must not drift."""
    from interplab.widgets.base import protocol

    assert PROTOCOL == json.loads(json.dumps(protocol())), "run: python -m interplab.views && cd js && npm run build"


def test_every_python_view_has_its_js_file_and_every_js_file_a_python_view():
    """The page's registry is the folder js/src/views (build.mjs lists it); the kernel's is the view classes."""
    from interplab.widgets.base import VIEW_CLASSES

    assert {p.stem for p in VIEW_JS.glob("*.js")} == set(VIEW_CLASSES) == set(VIEWS)

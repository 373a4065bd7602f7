"""Frontend requests, no browser: validators reject malformed requests by setting `.error` (never raising into the
kernel), valid requests reach the callbacks (as keyword arguments), a raising callback sets `.error`."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

from interplab.views.attention import AttentionView
from interplab.views.heatmap import PatchingHeatmap
from interplab.views.lens import LensView
from interplab.views.logits import LogitPanel
from interplab.views.steering import SteeringPanel
from interplab.widgets.base import BAD_MESSAGE, declared_requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
HUGE = "x" * 1_000_001


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):  # callbacks get keywords only
        self.calls.append(kwargs)


def heatmap():
    w = PatchingHeatmap(
        values=[[0.0, 0.5, None], [1.0, float("nan"), 0.2]],
        x_labels=["When", " Mary", " John"],
        y_labels=["L0", "L1"],
        active_edits=[{"id": "e1", "label": "patch L0 pos 1", "enabled": True, "row": 0, "col": 1}],
    )
    return w


def steering():
    return SteeringPanel(n_layers=12, sites=["resid_pre", "mlp_out"], site="resid_pre", layer=6, alpha_max=8.0)


def lens():
    return LensView(
        x_labels=["a", "b"], y_labels=["L0", "L1", "L2"], probs=[[0.1, 0.2]] * 3, top_tokens=[["x", "y"]] * 3
    )


def attention():
    return AttentionView(tokens=["a", "b", "c"], n_layers=4, n_heads=8, pattern=[[1, 0, 0], [0.5, 0.5, 0], [0.2] * 3])


# (factory, callback registrar name, malformed messages)
GENERIC_BAD = [
    "hello",
    None,
    [1, 2],
    42,
    {},
    {"row": 1},
    {"type": None},
    {"type": 5},
    {"type": "definitely-not-a-type"},
    {"type": HUGE},
]
# with a type each widget declares (filled in per widget): a bad request id
BAD_IDS = [{"id": "7"}, {"id": True}, {"id": None}, {"id": 1.5}, {"id": [1]}]

CASES = {
    "heatmap": (
        heatmap,
        "on_click",
        [
            {"type": "click", "row": 0, "col": 0},  # missing shift
            {"type": "click", "row": 2, "col": 0, "shift": False},  # row out of range
            {"type": "click", "row": -1, "col": 0, "shift": False},
            {"type": "click", "row": 0, "col": 3, "shift": False},
            {"type": "click", "row": "0", "col": 0, "shift": False},
            {"type": "click", "row": 0.5, "col": 0, "shift": False},
            {"type": "click", "row": True, "col": 0, "shift": False},
            {"type": "click", "row": float("nan"), "col": 0, "shift": False},
            {"type": "click", "row": 0, "col": 0, "shift": 1},
            {"type": "click", "row": 0, "col": 0, "shift": False, "extra": 1},
            {"type": "click", "row": 10**30, "col": 0, "shift": False},
            {"type": "toggle", "edit_id": "nope", "enabled": True},
            {"type": "toggle", "edit_id": "e1", "enabled": "yes"},
            {"type": "toggle", "edit_id": HUGE, "enabled": True},
            {"type": "toggle", "id": "e1", "enabled": True},  # the edit's id is `edit_id`; `id` is the request's
            {"type": "remove"},
            {"type": "remove", "edit_id": 1},
            {"type": "clear", "all": True},
        ],
    ),
    "steering": (
        steering,
        "on_preview",
        [
            {"type": "preview", "alpha": float("nan"), "layer": 0, "site": "resid_pre", "positions": "all"},
            {"type": "preview", "alpha": float("inf"), "layer": 0, "site": "resid_pre", "positions": "all"},
            {"type": "preview", "alpha": 9.0, "layer": 0, "site": "resid_pre", "positions": "all"},  # > alpha_max
            {"type": "preview", "alpha": "1", "layer": 0, "site": "resid_pre", "positions": "all"},
            {"type": "preview", "alpha": 1.0, "layer": 12, "site": "resid_pre", "positions": "all"},
            {"type": "preview", "alpha": 1.0, "layer": 0, "site": "attn_out", "positions": "all"},
            {"type": "preview", "alpha": 1.0, "layer": 0, "site": "resid_pre", "positions": "first"},
            {"type": "preview", "alpha": 1.0, "layer": 0, "site": "resid_pre"},
            {
                "type": "generate",
                "alpha": 1.0,
                "layer": 0,
                "site": "resid_pre",
                "positions": "all",
                "max_new_tokens": 0,
            },
            {
                "type": "generate",
                "alpha": 1.0,
                "layer": 0,
                "site": "resid_pre",
                "positions": "all",
                "max_new_tokens": 10**6,
            },
            {"type": "set_vector", "positive": HUGE, "negative": ""},
            {"type": "set_vector", "positive": ["a"], "negative": ""},
            {"type": "set_vector", "positive": "a"},
            {"type": "update", "max_new_tokens": 0},
            {"type": "update", "prompt": HUGE},
            {"type": "update", "prompt": None},
            {"type": "update", "alpha": 1.0},  # slider values travel with preview / generate only
        ],
    ),
    "lens": (
        lens,
        "on_select",
        [
            {"type": "select", "row": 3, "col": 0},
            {"type": "select", "row": 0, "col": 2},
            {"type": "select", "row": 0},
            {"type": "select", "row": 0, "col": None},
        ],
    ),
    "attention": (
        attention,
        "on_select",
        [
            {"type": "select", "layer": 4, "head": 0},
            {"type": "select", "layer": 0, "head": 8},
            {"type": "select", "layer": 0, "head": -1},
            {"type": "select", "layer": 0},
            {"type": "select", "layer": 1.0, "head": 0},
            {"type": "click", "row": 0, "col": 0, "shift": False},
        ],
    ),
    "logits": (LogitPanel, None, [{"type": "click", "row": 0, "col": 0, "shift": False}]),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_malformed_messages_set_error_and_never_raise(kind):
    factory, registrar, bad = CASES[kind]
    w = factory()
    rec = Recorder()
    if registrar:
        getattr(w, registrar)(rec)
    any_type = next(iter(declared_requests(kind)), "click")
    for msg in GENERIC_BAD + bad + [{"type": any_type, **bad_id} for bad_id in BAD_IDS]:
        w.error = ""
        w.send_test_message(msg)  # must not raise
        assert w.error.startswith(BAD_MESSAGE), (kind, msg, w.error)
        assert len(w.error) < 600, "error text must stay readable (no echo of huge payloads)"
    assert rec.calls == []


def test_error_texts_say_what_was_wrong():
    w = heatmap()
    w.send_test_message({"type": "click", "row": 5, "col": 0, "shift": False})
    assert w.error == BAD_MESSAGE + "'row'=5 is out of range 0..1"
    w.send_test_message({"row": 1})
    assert "missing 'type'" in w.error and "click" in w.error
    w.send_test_message({"type": "zap"})
    assert "unknown message type 'zap'" in w.error and "allowed: click, toggle, remove, clear, cancel" in w.error
    s = steering()
    s.send_test_message({"type": "preview", "alpha": math.nan, "layer": 0, "site": "resid_pre", "positions": "all"})
    assert "'alpha' must be a finite number" in s.error


def test_the_comm_path_validates_too():
    """The ipywidgets entry point (a comm 'custom' message) goes through the same validator; there, a request
    without an id is malformed (send_test_message gives one)."""
    w = heatmap()
    rec = Recorder()
    w.on_click(rec)

    def comm(content):
        w._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})

    comm({"type": "click", "id": 1, "row": 9})
    assert w.error.startswith(BAD_MESSAGE)
    good = {"type": "click", "row": 1, "col": 2, "shift": False}
    comm(good)
    assert w.error == BAD_MESSAGE + "'click' message is missing the field 'id'" and rec.calls == []
    comm({**good, "id": 2})
    assert rec.calls == [{"row": 1, "col": 2, "shift": False}] and w.error == ""


def test_heatmap_valid_messages_reach_callbacks_and_selection():
    w = heatmap()
    got = {k: Recorder() for k in ("click", "toggle", "remove", "clear", "cancel")}
    w.on_click(got["click"])
    w.on_toggle(got["toggle"])
    w.on_remove(got["remove"])
    w.on_clear(got["clear"])
    w.on_cancel(got["cancel"])
    w.send_test_message({"type": "click", "row": 1, "col": 2, "shift": False})
    assert w.selected == [[1, 2]]
    w.send_test_message({"type": "click", "row": 0, "col": 0, "shift": True})
    assert w.selected == [[1, 2], [0, 0]]
    w.send_test_message({"type": "click", "row": 1, "col": 2, "shift": True})  # shift on a selected cell: unselect
    assert w.selected == [[0, 0]]
    w.send_test_message({"type": "click", "row": 1, "col": 1, "shift": False})  # plain click: only that cell
    assert w.selected == [[1, 1]]
    w.send_test_message({"type": "toggle", "edit_id": "e1", "enabled": False})
    w.send_test_message({"type": "remove", "edit_id": "e1"})
    w.send_test_message({"type": "cancel"})
    w.send_test_message({"type": "clear"})
    assert w.selected == []
    assert got["click"].calls == [
        {"row": 1, "col": 2, "shift": False},
        {"row": 0, "col": 0, "shift": True},
        {"row": 1, "col": 2, "shift": True},
        {"row": 1, "col": 1, "shift": False},
    ]
    assert got["toggle"].calls == [{"edit_id": "e1", "enabled": False}]
    assert got["remove"].calls == [{"edit_id": "e1"}]
    assert got["clear"].calls == [{}] and got["cancel"].calls == [{}]
    assert w.error == ""
    # unregistering
    w.on_click(got["click"], remove=True)
    w.send_test_message({"type": "click", "row": 0, "col": 0, "shift": False})
    assert len(got["click"].calls) == 4


def test_steering_valid_messages():
    w = steering()
    prev, gen, vec = Recorder(), Recorder(), Recorder()
    w.on_preview(prev)
    w.on_generate(gen)
    w.on_set_vector(vec)
    w.send_test_message({"type": "preview", "alpha": 2, "layer": 3, "site": "mlp_out", "positions": "last"})
    assert prev.calls == [{"alpha": 2.0, "layer": 3, "site": "mlp_out", "positions": "last"}]
    assert (w.alpha, w.layer, w.site, w.positions) == (2.0, 3, "mlp_out", "last")
    w.send_test_message(
        {"type": "generate", "alpha": -1.5, "layer": 0, "site": "resid_pre", "positions": "all", "max_new_tokens": 5}
    )
    assert gen.calls == [{"alpha": -1.5, "layer": 0, "site": "resid_pre", "positions": "all", "max_new_tokens": 5}]
    assert w.max_new_tokens == 5
    w.send_test_message({"type": "set_vector", "positive": " Love\n\nJoy\n", "negative": "Hate"})
    assert vec.calls == [{"positive": [" Love", "Joy"], "negative": ["Hate"]}]
    assert w.positive == " Love\n\nJoy\n"
    # the text boxes and the token count: taken into the traits, only the fields sent
    w.send_test_message({"type": "update", "prompt": "I think", "max_new_tokens": 9})
    assert (w.prompt, w.max_new_tokens, w.negative) == ("I think", 9, "Hate")
    w.send_test_message({"type": "update"})
    assert w.prompt == "I think"
    assert w.error == ""


def test_lens_and_attention_valid_messages():
    v = lens()
    rec = Recorder()
    v.on_select(rec)
    v.send_test_message({"type": "select", "row": 2, "col": 1})
    assert rec.calls == [{"row": 2, "col": 1}] and v.selected == [2, 1]
    a = attention()
    rec = Recorder()
    a.on_select(rec)
    a.send_test_message({"type": "select", "layer": 3, "head": 7})
    assert rec.calls == [{"layer": 3, "head": 7}] and (a.layer, a.head) == (3, 7)


def test_raising_callback_sets_error_and_others_still_run():
    w = heatmap()
    after = Recorder()

    def broken(*, row, col, shift):
        raise RuntimeError("CUDA out of memory")

    w.on_click(broken)
    w.on_click(after)
    w.send_test_message({"type": "click", "row": 0, "col": 1, "shift": False})  # must not raise
    assert "on_click callback broken" in w.error and "RuntimeError: CUDA out of memory" in w.error
    assert after.calls == [{"row": 0, "col": 1, "shift": False}]
    assert w.selected == [[0, 1]]


def test_good_message_clears_only_the_message_error():
    w = heatmap()
    w.send_test_message({"type": "nope"})
    assert w.error
    w.send_test_message({"type": "cancel"})
    assert w.error == ""
    w.error = "model failed to load"  # set by the controller: kept
    w.send_test_message({"type": "cancel"})
    assert w.error == "model failed to load"


def test_anywidget_commands_are_not_errors():
    w = heatmap()
    w.send_test_message({"id": "1", "kind": "anywidget-command", "name": "x", "msg": {}})
    assert w.error == ""


def test_traits_accept_tensor_like_values_and_stay_json_safe():
    class FakeTensor:
        def __init__(self, v):
            self.v = v

        def tolist(self):
            return self.v

    w = PatchingHeatmap(values=FakeTensor([[1.0, float("nan")], [float("inf"), None]]), x_labels=["a", "b"])
    assert w.values == [[1.0, None], [None, None]]
    w.set_cell(2, 3, 0.5)
    assert w.values[2][3] == 0.5 and all(len(r) == 4 for r in w.values)
    w.selected = [(1, 1)]
    assert w.selected == [[1, 1]]
    with pytest.raises(Exception, match="direction"):
        w.direction = "sideways"
    p = LogitPanel(series=[{"name": "clean", "tokens": FakeTensor([" a"]), "probs": FakeTensor([float("nan")])}])
    assert p.series == [{"name": "clean", "tokens": [" a"], "probs": [0.0]}]
    with pytest.raises(Exception, match="must match"):
        p.series = [{"name": "x", "tokens": ["a", "b"], "probs": [1.0]}]
    for widget in (w, p, steering(), lens(), attention()):
        state = {k: v for k, v in widget.get_state().items() if k != "_esm"}
        json.dumps(state, allow_nan=False)


def test_view_kinds_match_the_bundle():
    kinds = {c()._view_kind for c in (PatchingHeatmap, LogitPanel, SteeringPanel, LensView, AttentionView)}
    assert kinds == {"heatmap", "logits", "steering", "lens", "attention"}
    text = (ROOT / "interplab" / "static" / "widgets.js").read_text(encoding="utf-8")
    assert "unknown widget kind" in text


def test_the_widget_machinery_does_not_import_torch_or_the_lab():
    """The anywidget machinery every view shares (interplab.widgets: the base class, composites, the shared code)
    loads without torch or the Lab; each view's numbers live in its own module in interplab.views."""
    code = f"""
import sys, types, importlib.util
pkg = types.ModuleType("interplab"); pkg.__path__ = [{str(ROOT / "interplab")!r}]
pkg.__spec__ = importlib.util.spec_from_loader("interplab", loader=None, is_package=True)
sys.modules["interplab"] = pkg
import interplab.widgets as w
import interplab.widgets.composite
w.LabWidget
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "interplab.lab")
print(bad)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

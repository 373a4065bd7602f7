"""The widget code is synced once per kernel: each view's _esm is the small loader, its _bundle names one shared
BundleHolder whose `code` is the bundle; the loader imports that code once per page (Chromium, bare page)."""

from __future__ import annotations

import json
import pathlib
import sys
import types

import pytest

from interplab.views.heatmap import PatchingHeatmap
from interplab.views.lens import LensView
from interplab.views.logits import LogitPanel
from interplab.widgets import base as wbase

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "interplab" / "static" / "widgets.js"
LOADER = ROOT / "interplab" / "static" / "loader.js"
ORIGIN = "http://interplab.test"


@pytest.fixture(autouse=True)
def _auto_mode(monkeypatch):
    monkeypatch.delenv(wbase.ESM_ENV, raising=False)


def test_every_view_carries_the_loader_and_names_one_shared_holder():
    views = [PatchingHeatmap(values=[[1.0]]), LogitPanel(), LensView()]
    states = [v.get_state() for v in views]
    assert {s["_bundle"] for s in states} == {f"IPY_MODEL_{wbase.bundle_holder().model_id}"}
    bundle = BUNDLE.read_text(encoding="utf-8")
    for s in states:
        assert len(s["_esm"]) < 5000, len(s["_esm"])  # the loader, not the 1.5 MB bundle
        assert "__INTERPLAB_BUNDLE_HASH__" not in s["_esm"] and wbase.bundle_holder().hash in s["_esm"]
    holder = wbase.bundle_holder().get_state()
    assert holder["code"] == bundle and len(holder["hash"]) == 16
    assert holder["_model_name"] == "WidgetModel" and holder["_view_name"] is None  # a model, never displayed


def test_a_closed_holder_is_made_again():
    first = wbase.bundle_holder()
    made_before = LogitPanel()
    before = made_before.get_state()["_bundle"]
    first.close()  # as Widget.close_all() would (only the holder here: other tests' widgets stay open)
    after = LogitPanel().get_state()["_bundle"]
    assert first.comm is None and before != after == f"IPY_MODEL_{wbase.bundle_holder().model_id}"
    # a view made before still serializes (lab.settle resends every shown view's state), naming the live holder
    assert made_before.get_state()["_bundle"] == after
    assert wbase.resend_states() >= 1


def test_inline_mode_ships_the_whole_bundle(monkeypatch):
    monkeypatch.setenv(wbase.ESM_ENV, "inline")
    state = LogitPanel().get_state()
    assert state["_esm"] == BUNDLE.read_text(encoding="utf-8") and "_bundle" not in state
    monkeypatch.setenv(wbase.ESM_ENV, "shared")
    assert wbase.esm_mode() == "shared"


def test_marimo_gets_the_whole_bundle(monkeypatch):
    """marimo's anywidget models have no widget manager: under a running marimo notebook every view carries the
    bundle (a module object standing in for marimo: only `running_in_notebook()` is read)."""
    fake = types.ModuleType("marimo")
    fake.running_in_notebook = lambda: True
    monkeypatch.setitem(sys.modules, "marimo", fake)
    assert wbase.esm_mode() == "inline"
    assert "_bundle" not in LogitPanel().get_state()
    fake.running_in_notebook = lambda: False  # marimo imported by a script, not running a notebook
    assert wbase.esm_mode() == "shared"


def test_the_declared_traits_are_unchanged():
    """_esm and _bundle are added per instance (as anywidget adds _esm): protocol.json's declaration stays whole."""
    assert "_bundle" not in PatchingHeatmap.class_traits(sync=True)
    w = PatchingHeatmap()
    assert w.keys.count("_bundle") == 1 and w.keys.count("_esm") == 1


# ------------------------------------------------------------------------------------------- the loader in a page
PAGE = """<!doctype html><html><body><div id="a"></div><div id="b"></div><div id="c"></div>
<script type="module">
function model(traits, manager) {
  const handlers = new Map();
  return {
    get: (k) => traits[k],
    on(ev, fn) { (handlers.get(ev) ?? handlers.set(ev, new Set()).get(ev)).add(fn); },
    off(ev, fn) { handlers.get(ev)?.delete(fn); },
    send() {}, save_changes() {},
    ...(manager ? { widget_manager: manager } : {}),
  };
}
window.run = async (holderState, traits, ids, withManager) => {
  const holder = model(holderState);
  let lookups = 0;
  const manager = {
    async get_model(id) { lookups++; if (id !== "holder1") throw new Error("no model " + id); return holder; },
  };
  const loader = await import("/loader.js");
  const out = [];
  for (const id of ids) {
    const el = document.getElementById(id);
    const m = model({ ...traits, _bundle: "IPY_MODEL_holder1" }, withManager ? manager : null);
    await loader.default.render({ model: m, el });
    out.push(el.innerText);
  }
  return { out, lookups, imports: window.__bundle_imports ?? 0 };
};
window.ready = true;
</script></body></html>"""


@pytest.fixture
def loader_page(browser):
    wbase.bundle_holder()
    loader = wbase._CODE.loader
    context = browser.new_context()
    page = context.new_page()
    foreign: list[str] = []

    def route(r):
        url = r.request.url
        if url == f"{ORIGIN}/":
            return r.fulfill(status=200, content_type="text/html", body=PAGE)
        if url == f"{ORIGIN}/loader.js":
            return r.fulfill(status=200, content_type="text/javascript", body=loader)
        if not url.startswith(("blob:", "data:")):
            foreign.append(url)
        return r.abort()

    page.route("**/*", route)
    page.goto(f"{ORIGIN}/")
    page.wait_for_function("window.ready === true")
    yield page
    context.close()
    assert not foreign, foreign


LOGITS = {"_view_kind": "logits", "title": "T", "series": [{"name": "clean", "tokens": [" Mary"], "probs": [0.9]}]}


def test_loader_imports_the_shared_code_once_and_renders(loader_page):
    count = "\nwindow.__bundle_imports = (window.__bundle_imports ?? 0) + 1;"  # runs once per import
    holder = {"code": BUNDLE.read_text(encoding="utf-8") + count, "hash": wbase._CODE.hash}
    res = loader_page.evaluate("([h, t]) => window.run(h, t, ['a', 'b'], true)", [holder, LOGITS])
    assert all("clean" in text and "0.900" in text for text in res["out"]), res
    assert res["lookups"] == 1 and res["imports"] == 1, res  # one lookup, one import for the page


def test_loader_without_a_widget_manager_says_what_to_do(loader_page):
    holder = {"code": "export default {}", "hash": wbase._CODE.hash}
    res = loader_page.evaluate("([h, t]) => window.run(h, t, ['c'], false)", [holder, LOGITS])
    assert "no widget manager" in res["out"][0] and "INTERPLAB_WIDGET_CODE=inline" in res["out"][0], res


def test_loader_refuses_code_of_another_version(loader_page):
    holder = {"code": "export default {}", "hash": "0" * 16}
    res = loader_page.evaluate("([h, t]) => window.run(h, t, ['c'], true)", [holder, LOGITS])
    assert "version 0000000000000000" in res["out"][0], json.dumps(res)

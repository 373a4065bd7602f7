"""The graph view (issue #56 item 5) in a real JupyterLab (and Notebook 7) and in the offline export.

JupyterLab: g.show(stats=...) renders under its cell; a real mouse click on the most influential feature node shows
its page with the numbers the kernel's g.node and stats.feature give; the geometry (tests/geometry.js) holds there.
Export: the executed notebook exported with `jupyter nbconvert --to interplab_html` draws the graph from the saved
state with no network; hovering a node shows its density from the saved summaries; a click on a node (a request)
puts the saved page's note under the view: the kernel is gone."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest
from geometry import measure  # tests/geometry.py
from harness import LabNotebook, serving, write_notebook

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
APPS = ["lab", pytest.param("notebook", marks=pytest.mark.skipif(
    importlib.util.find_spec("notebook") is None, reason="Notebook 7 (the `notebook` package) is not installed"))]

SETUP = (
    "import json\nimport interplab as ilab\nfrom interplab.zoo.train_ioi_tiny_sae import corpus_texts\n"
    "lab = ilab.Lab.load('ioi-tiny')\n"
    "tcs = ilab.Transcoders.load('ioi-tiny-transcoders')\n"
    "g = ilab.analyses.graph.attribution_graph(lab, 'When Mary and John went to the store, John gave a drink to', tcs, "
    "progress=False)\n"
    "docs = corpus_texts(40, seed=5)\n"
    "from interplab.analyses.feature_stats import feature_stats\n"
    "stats = {l: feature_stats(lab, docs, tcs[l], cache=False, progress=False, top_k=3, n_bands=3, per_band=2,"
    " context=4) for l in range(lab.n_layers)}"
)
SHOW = "view = g.show(stats=stats)\nview"


@pytest.fixture(scope="module")
def graph_server(tmp_path_factory, chromium_browser):
    nb = write_notebook(tmp_path_factory.mktemp("graph-nb") / "graph.ipynb", [SETUP, SHOW])
    with serving(nb, tmp_path_factory, "graph") as server:
        yield server


def strongest_feature_pixel(page, root_js: str, arg):
    """(node index, page x, page y) of the most influential feature node, from where the view painted it."""
    return page.evaluate(f"""(arg) => {{
        const root = ({root_js})(arg);
        const cv = root.querySelector('canvas.il-graph-canvas');
        cv.scrollIntoView({{block: 'center'}});
        const b = cv.getBoundingClientRect(), g = cv.__interplab_graph;
        return {{box: [b.left, b.top, b.width, b.height],
                 nodes: g.nodes.map((n) => [n.index, b.left + n.x, b.top + n.y])}};
    }}""", arg)


@pytest.mark.parametrize("app", APPS)
def test_in_jupyter_a_click_shows_the_feature_page_the_kernel_computes(graph_server, chromium_browser, app):
    nb = LabNotebook.open(chromium_browser, graph_server, "graph.ipynb", app=app)
    try:
        nb.run_through(1, timeout=600)
        nb.wait_widget(1, "graph", timeout=120)
        nb.page.wait_for_function("(i) => window.__il.cellNode(i).querySelector('canvas.il-graph-canvas')"
                                  "?.__interplab_graph", arg=1, timeout=60000)
        startup_errors = list(nb.page_errors)  # Notebook 7 logs two of its own at startup (settings, file browser)
        kernel = json.loads(nb.exec(
            "feats = [n for n in view.nodes if n[1] == 'feature']\n"
            "i = max(feats, key=lambda n: n[6])[0]\nnode = g.node(i)\n"
            "page = stats[node['layer']].feature(node['feature'])\n"
            "print(json.dumps({'i': i, 'act': node['activation'], 'density': page['density'],"
            " 'hist': page['hist_counts'], 'n': len(view.nodes)}))").strip().splitlines()[-1])
        px = strongest_feature_pixel(nb.page, "(i) => window.__il.cellNode(i)", 1)
        assert len(px["nodes"]) == kernel["n"]
        left, top, width, height = px["box"]
        assert all(left <= x <= left + width and top <= y <= top + height for _, x, y in px["nodes"])
        x, y = next((x, y) for i, x, y in px["nodes"] if i == kernel["i"])
        nb.page.mouse.click(x, y)
        nb.page.wait_for_function("(i) => window.__il.cellNode(i).querySelector('.il-page-density')", arg=1,
                                  timeout=60000)
        got = nb.page.evaluate("""(i) => { const r = window.__il.cellNode(i);
            return {act: Number(r.querySelector('.il-page-act').dataset.value),
                    density: Number(r.querySelector('.il-page-density').dataset.value),
                    hist: [...r.querySelectorAll('.il-histogram rect')].map((e) => Number(e.dataset.count))}; }""", 1)
        assert got["act"] == pytest.approx(kernel["act"], rel=1e-6)
        assert got["density"] == pytest.approx(kernel["density"], rel=1e-6)
        assert got["hist"] == kernel["hist"]
        assert int(nb.exec("print(view.selected)").strip().splitlines()[-1]) == kernel["i"]
        out = measure(nb.page, "(i) => window.__il.cellNode(i).querySelector('.interplab-graph')", 1)
        assert out["problems"] == [], out["problems"]
        assert nb.page_errors == startup_errors, nb.page_errors
    finally:
        nb.close()


@pytest.mark.slow
def test_the_exported_graph_draws_offline_and_its_controls_say_the_kernel_is_gone(tmp_path, chromium):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_export import OfflinePage, execute, export, saved_state

    nb = execute(write_notebook(tmp_path / "graph.ipynb", [SETUP, SHOW]), tmp_path / "graph.ipynb")
    traits = next(s["state"] for s in saved_state(nb).values() if s.get("state", {}).get("_view_kind") == "graph")
    page = OfflinePage(chromium, export(nb))
    try:
        assert not page.foreign and not page.errors, (page.foreign, page.errors)
        px = strongest_feature_pixel(page.page, "() => document.querySelector('.interplab-graph')", None)
        assert len(px["nodes"]) == len(traits["nodes"])
        feats = [n for n in traits["nodes"] if n[1] == "feature"]
        best = max(feats, key=lambda n: n[6])
        x, y = next((x, y) for i, x, y in px["nodes"] if i == best[0])
        page.page.mouse.move(x, y)
        tip = page.page.locator(".interplab-graph .il-tip.on")
        tip.wait_for()
        density = traits["summaries"][f"{best[2]}:{best[4]}"]["density"]
        shown = float(page.page.locator(".interplab-graph .il-tip.on .il-tip-density").get_attribute("data-value"))
        assert shown == pytest.approx(density, rel=1e-9)
        page.page.mouse.click(x, y)
        note = page.page.locator(".interplab-offline-note")
        note.wait_for()
        assert "kernel that would answer “select” is gone" in note.text_content()
        # the page shows what it holds: the node's summary from the saved state
        shown = page.page.locator(".interplab-graph .il-page-summary").get_attribute("data-value")
        assert float(shown) == pytest.approx(density, rel=1e-9)
        out = measure(page.page, "() => document.querySelector('.interplab-graph')")
        assert out["problems"] == [], out["problems"]
    finally:
        page.close()

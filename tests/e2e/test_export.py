"""Executed notebooks: the widget code stored once (notebook 01 <= 2 MB) and an offline HTML export
(`jupyter nbconvert --to interplab_html`) that draws the heatmaps and logit panels from the saved state in Chromium
with no network; a real mouse click on an exact sweep's cell shows that cell's stored top tokens. Screenshot:
artifacts/export_offline.png."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]  # (not `from conftest import`: tests/widgets has one too)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NOTEBOOK_01 = ROOT / "notebooks" / "01_ioi_patching.ipynb"
MAX_SIZE = 2_000_000
STATE_MIME = "application/vnd.jupyter.widget-state+json"
SCREENSHOT = ROOT / "artifacts" / "export_offline.png"

# A small notebook: an exact sweep's explorer, a plain ipywidgets widget, and the steering panel (its controls
# need the kernel: the saved page says so).
SMALL = [
    "import interplab as ilab\n"
    "lab = ilab.Lab.load('ioi-tiny')\n"
    "clean = 'When Mary and John went to the store, John gave a drink to'\n"
    "corrupt = 'When Mary and John went to the store, Mary gave a drink to'\n"
    "res = lab.patch_sweep(clean, corrupt, site='resid_pre', by=('layer', 'pos'),\n"
    "                      metric=ilab.logit_diff(' Mary', ' John'), progress=False)\n"
    "explorer = res.show()\n"
    # nbclient stores a widget update only while the cell that made it runs: the logit panel's first picture
    # (computed on the lab's worker) must arrive before this cell ends
    "assert explorer.queue.join(300)\n"
    "explorer",
    # the kernel's own numbers for the cell the test clicks (the last layer at the final position), computed
    # here by running the patch, not read from the widget
    "import json\n"
    "row, col = lab.n_layers - 1, len(lab.to_str_tokens(clean)) - 1\n"
    "edit = explorer.session.cell_edit(row, col)\n"
    "probs = lab.run(corrupt, edits=[edit]).last_logits[0].softmax(-1)\n"
    "top = probs.topk(3)\n"
    "print('REFERENCE', json.dumps({'row': row, 'col': col, 'tokens': [lab.tokenizer.decode([i]) for i in "
    "top.indices.tolist()], 'probs': top.values.tolist()}))",
    "import ipywidgets\nout = ipywidgets.Output()\nwith out:\n    print('captured by an Output widget')\n"
    "ipywidgets.VBox([ipywidgets.HTML('<b id=\"plain-html\">a plain ipywidgets HTML widget</b>'),\n"
    "                 ipywidgets.IntSlider(7, description='layers'), out])",
]


def execute(nb_path: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Run a notebook in a real kernel as `interplab export --execute` does (nbclient stores the widget state in the
    notebook's metadata; the exporter's last cell waits for the views' pending work)."""
    from interplab_export import execute as run_notebook

    nb = nbformat.read(nb_path, as_version=4)
    run_notebook(nb, timeout=600, path=str(out.parent), kernel_name="python3")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    nbformat.write(nb, out)
    return out


def export(nb_path: pathlib.Path) -> pathlib.Path:
    """`jupyter nbconvert --to interplab_html` (the entry point, in a subprocess), offline."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "interplab_html", str(nb_path)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=nb_path.parent)
    assert out.returncode == 0, (
        f"{out.stderr[-3000:]}\n(is the exporter registered? `pip install -e .` registers the entry point)")
    assert "not able to be represented" not in out.stderr, out.stderr[-3000:]  # an output the page would lose
    html = nb_path.with_suffix(".html")
    assert html.exists(), out.stderr[-2000:]
    return html


def small(tmp_path_factory, code: str) -> tuple[pathlib.Path, pathlib.Path]:
    """SMALL executed with the widget code `shared` (the loader + one holder) or `inline` (each view carries the
    bundle: marimo's way, and every notebook saved before the holder existed), and its export."""
    from harness import write_notebook

    d = tmp_path_factory.mktemp(f"export-small-{code}")
    old = os.environ.get("INTERPLAB_WIDGET_CODE")
    os.environ["INTERPLAB_WIDGET_CODE"] = code  # the kernel inherits it
    try:
        nb = execute(write_notebook(d / "small.ipynb", SMALL), d / "small.ipynb")
    finally:
        if old is None:
            os.environ.pop("INTERPLAB_WIDGET_CODE", None)
        else:
            os.environ["INTERPLAB_WIDGET_CODE"] = old
    return nb, export(nb)


@pytest.fixture(scope="module")
def small_html(tmp_path_factory):
    return small(tmp_path_factory, "shared")


@pytest.fixture(scope="module")
def small_inline_html(tmp_path_factory):
    return small(tmp_path_factory, "inline")


@pytest.fixture(scope="module")
def notebook_01(tmp_path_factory):
    d = tmp_path_factory.mktemp("export-01")
    return execute(NOTEBOOK_01, d / NOTEBOOK_01.name)


def saved_state(nb_path: pathlib.Path) -> dict:
    return json.loads(nb_path.read_text(encoding="utf-8"))["metadata"]["widgets"][STATE_MIME]["state"]


def is_bundle(text) -> bool:
    """A copy of static/widgets.js (as the kernel read it: the file may have been rebuilt since)."""
    return isinstance(text, str) and text.startswith("/* interplab-src-hash: ") and len(text) > 500_000


class OfflinePage:
    """An exported HTML file opened from disk in Chromium, every request that is not file:, data: or blob: aborted
    and recorded (there must be none)."""

    def __init__(self, browser, html: pathlib.Path):
        self.context = browser.new_context(viewport={"width": 1300, "height": 1000}, offline=True)
        self.page = self.context.new_page()
        self.foreign: list[str] = []
        self.errors: list[str] = []

        def route(r):
            if r.request.url.startswith(("file:", "data:", "blob:")):
                return r.continue_()
            self.foreign.append(r.request.url)
            return r.abort()

        self.page.route("**/*", route)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        t0 = time.monotonic()
        self.page.goto(html.as_uri())
        self.page.wait_for_function("() => window.__interplab_offline?.done === true", timeout=60000)
        self.load_s = time.monotonic() - t0
        self.log = self.page.evaluate("() => window.__interplab_offline")

    def close(self):
        self.context.close()


def heatmap_cell_pixel(page, i: int, row: int, col: int) -> tuple[float, float]:
    p = page.evaluate(
        """([i, row, col]) => {
             const gd = document.querySelectorAll('.interplab-heatmap .js-plotly-plot')[i];
             gd.scrollIntoView({ block: 'center' });
             const fl = gd._fullLayout, box = gd.getBoundingClientRect();
             return { x: box.left + fl.xaxis._offset + fl.xaxis.d2p(col),
                      y: box.top + fl.yaxis._offset + fl.yaxis.d2p(row) };
           }""", [i, row, col])
    return p["x"], p["y"]


def bars(page, logits_index: int) -> dict[str, list[tuple[str, float]]]:
    """{series name: [(token, printed probability)]} of a logit panel, read from its bars (token as JSON in the title,
    the bar's width > 0 for a positive probability)."""
    return page.evaluate(
        """(i) => {
             const panel = document.querySelectorAll('.interplab-logits')[i];
             const out = {};
             for (const s of panel.querySelectorAll('.il-series')) {
               out[s.querySelector('.il-series-name').textContent] = [...s.querySelectorAll('.il-bar-row')].map((r) => {
                 const title = r.getAttribute('title');
                 const cut = title.lastIndexOf(': ');
                 return [JSON.parse(title.slice(0, cut)), Number(title.slice(cut + 2)),
                         r.querySelector('.il-fill').getBoundingClientRect().width];
               });
             }
             return out;
           }""", logits_index)


def test_executed_notebook_01_stores_the_widget_code_once(notebook_01):
    size = notebook_01.stat().st_size
    state = saved_state(notebook_01)
    copies = [v["state"].get("code") or v["state"].get("_esm") for v in state.values()
              if is_bundle(v["state"].get("code")) or is_bundle(v["state"].get("_esm"))]
    print(f"\nexecuted {NOTEBOOK_01.name}: {size / 1e6:.2f} MB, {len(state)} widget models, "
          f"{len(copies)} cop{'y' if len(copies) == 1 else 'ies'} of the {len(copies[0]) / 1e6:.2f} MB bundle")
    assert len(copies) == 1, f"the bundle is stored {len(copies)} times"
    assert size <= MAX_SIZE, f"executed notebook 01 is {size / 1e6:.2f} MB (at most {MAX_SIZE / 1e6:.1f} MB)"


def test_export_of_notebook_01_draws_every_widget_offline(notebook_01, chromium):
    html = export(notebook_01)
    page = OfflinePage(chromium, html)
    try:
        log = page.log
        assert not page.foreign, f"the exported page tried to reach the network: {page.foreign}"
        assert not log["errors"] and not page.errors, (log["errors"], page.errors)
        kinds = [r["kind"] for r in log["rendered"]]
        n_views = sum(1 for c in nbformat.read(notebook_01, as_version=4).cells if c.cell_type == "code"
                      for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {}))
        assert len([r for r in log["rendered"] if r["id"]]) >= n_views, (n_views, log["rendered"])
        pg = page.page
        # every widget output drawn (its text fallback removed), none left as "not drawn"
        assert pg.locator(".interplab-offline-output").count() == n_views
        assert pg.locator(".interplab-offline-fallback, .interplab-offline-unsupported").count() == 0
        assert pg.locator(".interplab-heatmap .js-plotly-plot canvas.il-canvas").count() >= 2, kinds  # explorer, heads
        widths = pg.evaluate("() => [...document.querySelectorAll('.interplab-logits .il-fill')]"
                             ".map((b) => b.getBoundingClientRect().width)")
        assert widths and max(widths) > 50, widths
        # every plotly figure the notebook shows (res.figure()) drawn too, and no view saved mid-sweep
        n_figures = sum(1 for c in nbformat.read(notebook_01, as_version=4).cells if c.cell_type == "code"
                        for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {}))
        assert n_figures >= 3 and pg.locator(".interplab-offline-figure.js-plotly-plot").count() == n_figures
        assert pg.locator(".interplab-offline-figure .heatmaplayer").count() >= 3
        busy = [(k, v["state"].get(s)) for k, v in saved_state(notebook_01).items()
                for s in v["state"] if s.endswith("status") and "sweeping" in str(v["state"][s])]
        assert not busy, f"views saved mid-sweep: {busy}"
        print(f"\nexport of {NOTEBOOK_01.name}: {html.stat().st_size / 1e6:.2f} MB HTML, drawn in {page.load_s:.1f} s")
    finally:
        page.close()


@pytest.mark.parametrize("code", ["shared", "inline"])
def test_exported_exact_sweep_answers_a_real_click_from_the_stored_cell_tops(code, request, chromium):
    nb_path, html = request.getfixturevalue("small_html" if code == "shared" else "small_inline_html")
    esms = [m["state"]["_esm"] for m in saved_state(nb_path).values() if m["state"].get("_view_kind")]
    holders = [m for m in saved_state(nb_path).values() if is_bundle(m["state"].get("code"))]
    if code == "shared":
        assert len(holders) == 1 and all(len(e) < 5000 for e in esms), [len(e) for e in esms]
    else:
        assert not holders and esms and all(is_bundle(e) for e in esms)
    nb = nbformat.read(nb_path, as_version=4)
    ref_line = next(line for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                    for line in o.get("text", "").splitlines() if line.startswith("REFERENCE "))
    ref = json.loads(ref_line.removeprefix("REFERENCE "))
    # the stored cell tops (the explorer's heatmap, or its `heatmap.` part in a composite view)
    tops = next(v for m in saved_state(nb_path).values() for k, v in m["state"].items()
                if k.endswith("cell_tops") and v.get("cells"))
    stored = next(c for c in tops["cells"] if c[:2] == [ref["row"], ref["col"]])
    assert [t for t in stored[4][:3]] == ref["tokens"], (stored, ref)  # the store is the kernel's own numbers

    page = OfflinePage(chromium, html)
    try:
        pg = page.page
        assert not page.foreign, f"the exported page tried to reach the network: {page.foreign}"
        assert not page.log["errors"] and not page.errors, (page.log["errors"], page.errors)
        # drawn from the saved state: the heatmap (plotly, one cell per patch) and the logit panel's bars
        assert pg.locator(".interplab-heatmap .js-plotly-plot canvas.il-canvas").count() == 1
        shape = pg.evaluate("() => { const z = document.querySelector('.interplab-heatmap .js-plotly-plot')"
                            ".__interplab_grid.z; return [z.length, z[0].length]; }")
        assert shape == [ref["row"] + 1, ref["col"] + 1], shape
        before = bars(pg, 0)
        assert set(before) == {"clean", "corrupt"}, before
        assert all(width > 0 for rows in before.values() for _, p, width in rows if p > 0.01), before
        # plain ipywidgets: a box of an HTML widget, a slider (its saved value) and an Output widget's capture
        assert pg.locator("#plain-html").inner_text() == "a plain ipywidgets HTML widget"
        assert pg.locator(".interplab-offline-control").inner_text() == "layers: 7"
        assert "captured by an Output widget" in pg.locator(".interplab-offline-captured").inner_text()

        # a real mouse click on the cell: the logit panel shows that cell's stored top tokens
        x, y = heatmap_cell_pixel(pg, 0, ref["row"], ref["col"])
        pg.mouse.click(x, y)
        pg.wait_for_function("() => [...document.querySelectorAll('.interplab-logits .il-series-name')]"
                             ".some((d) => d.textContent.startsWith('patched'))", timeout=10000)
        after = bars(pg, 0)
        patched = next(v for k, v in after.items() if k.startswith("patched"))
        assert [t for t, _, _ in patched[:3]] == ref["tokens"], (patched, ref)
        for (_, shown, _width), want in zip(patched[:3], ref["probs"]):
            assert abs(shown - want) < 1e-3 * max(1.0, want), (patched, ref)
        assert patched[0][2] > 0, patched
        assert pg.locator(f".il-cell-selected[data-row='{ref['row']}'][data-col='{ref['col']}']").count() == 1
        assert pg.locator(".interplab-offline-note").count() == 0  # answered by the page: no "kernel gone" note
        assert [r["here"] for r in pg.evaluate("() => window.__interplab_offline.requests")] == [True]

        # a request the page cannot answer (a shift-click adds a cell: the kernel would list it) says the kernel is gone
        x, y = heatmap_cell_pixel(pg, 0, 0, 0)
        pg.keyboard.down("Shift")
        pg.mouse.click(x, y)
        pg.keyboard.up("Shift")
        note = pg.locator(".interplab-offline-note")
        note.first.wait_for(timeout=5000)
        assert "kernel" in note.first.inner_text() and "click" in note.first.inner_text(), note.first.inner_text()
        assert [r["here"] for r in pg.evaluate("() => window.__interplab_offline.requests")] == [True, False]
        SCREENSHOT.parent.mkdir(exist_ok=True)
        pg.screenshot(path=str(SCREENSHOT), full_page=True)
        assert not page.foreign and not page.errors, (page.foreign, page.errors)
    finally:
        page.close()


def test_plain_nbconvert_html_still_names_the_widgets(small_html):
    """The standard `--to html` export is untouched: it still embeds the saved state and the widget views (drawn by
    the CDN's widget manager when online), now with the bundle once."""
    nb_path, offline_html = small_html
    out = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--stdout", str(nb_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert STATE_MIME in out.stdout and "application/vnd.jupyter.widget-view+json" in out.stdout
    code = next(m["state"]["code"] for m in saved_state(nb_path).values() if is_bundle(m["state"].get("code")))
    stamp = code.split("\n", 1)[0].strip("/* ")  # "interplab-src-hash: <sha256>"; its "/" is escaped in the page
    assert stamp.startswith("interplab-src-hash: ")
    assert out.stdout.count(stamp) == 1  # the bundle once, in the shared holder's state
    assert offline_html.read_text(encoding="utf-8").count(stamp) == 1  # the offline export too: no second copy inlined


def test_a_notebook_of_plotly_figures_alone_is_drawn_offline(tmp_path, chromium):
    """No interplab widget in the page, so no widget code to borrow plotly from: the exporter inlines plotly.js once,
    and the figure (a static res.figure()-like heatmap) is drawn with no network."""
    from interplab_export import execute

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import plotly.graph_objects as go\n"
        "go.Figure(go.Heatmap(z=[[1, 2], [3, 4]])).show(renderer='plotly_mimetype')")]
    execute(nb, timeout=300, path=str(tmp_path), kernel_name="python3")
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in nb.cells[0].outputs)
    src = tmp_path / "figures.ipynb"
    nbformat.write(nb, src)
    html = export(src)
    page = OfflinePage(chromium, html)
    try:
        assert not page.foreign and not page.log["errors"] and not page.errors, (page.log, page.errors)
        assert page.page.locator(".interplab-offline-figure.js-plotly-plot .heatmaplayer").count() == 1
    finally:
        page.close()


def test_a_dashboard_run_by_plain_nbconvert_execute_is_saved_final(tmp_path, chromium):
    """The README's own `jupyter nbconvert --to notebook --execute` (nbclient, without interplab's last cell) then
    `interplab export`: the dashboard's sweep ends inside its cell (nbclient is no interactive frontend), so the saved
    page is the final heatmap with every cell painted and the logit panel's bars, not "sweeping..." over grey."""
    from harness import write_notebook

    src = write_notebook(tmp_path / "dash.ipynb", [
        "import interplab as ilab\nlab = ilab.Lab.load('ioi-tiny')\n"
        "clean = 'When Mary and John went to the store, John gave a drink to'\n"
        "corrupt = 'When Mary and John went to the store, Mary gave a drink to'\n"
        "lab.show(clean, corrupt, ' Mary', ' John')"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--output",
                          "ran.ipynb", str(src)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    ran = tmp_path / "ran.ipynb"
    dash = next(m["state"] for m in saved_state(ran).values() if "heatmap.values" in m["state"])
    assert "sweeping" not in dash["heatmap.status"] and dash["heatmap.progress"] == 0, dash["heatmap.status"]
    values = dash["heatmap.values"]
    assert values and all(v is not None for row in values for v in row), values
    assert dash["logits.series"], "the logit panel's first picture is missing"
    out = subprocess.run([sys.executable, "-m", "interplab", "export", str(ran)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    page = OfflinePage(chromium, ran.with_suffix(".html"))
    try:
        assert not page.foreign and not page.errors, (page.foreign, page.errors)
        z = page.page.evaluate("() => document.querySelector('.interplab-heatmap .js-plotly-plot').__interplab_grid.z")
        assert z and all(v is not None for row in z for v in row), z  # every cell painted: no grey grid
        assert "sweeping" not in page.page.locator(".interplab-heatmap .il-status").first.inner_text()
        assert page.page.locator(".interplab-logits .il-fill").count() > 0
    finally:
        page.close()


def test_an_exported_feature_view_answers_token_and_feature_clicks_offline(tmp_path, chromium):
    """The feature view saved and exported: with no kernel, a real click on a token paints its top features and a
    click on a feature its panel, from the numbers the saved state holds (the view's own traits). What needs the
    model (ablate, the steering slider, a cell of notebook 05's feature sweep) says under the view that the kernel
    is gone, each time."""
    from harness import CLEAN, CORRUPT, write_notebook

    code = ("import interplab as ilab\nlab = ilab.Lab.load('ioi-tiny')\nsae = ilab.SAE.load('ioi-tiny-sae')\n"
            f"view = lab.features({CLEAN!r}, sae).show()\nview")  # its page: the shipped statistics
    sweep = (f"lab.patch_sweep({CLEAN!r}, {CORRUPT!r}, sae, ('feature', 'pos'), ilab.logit_diff(' Mary', ' John'), "
             "method='attribution', progress=False).show()")
    nb = execute(write_notebook(tmp_path / "features.ipynb", [code, sweep]), tmp_path / "features.ipynb")
    state = saved_state(nb)
    traits = next(s["state"] for s in state.values() if s.get("state", {}).get("_view_kind") == "features")
    page = OfflinePage(chromium, export(nb))
    try:
        assert not page.foreign and not page.errors, (page.foreign, page.errors)
        fv = page.page.locator(".interplab-features")
        tokens = fv.locator(".il-fprompt .il-ftok")
        assert tokens.count() == len(traits["tokens"])
        pos = next(p for p, row in enumerate(traits["top"]) if row and p != traits["pos"])
        tokens.nth(pos).click()
        rows = fv.locator(".il-frow")
        assert [int(rows.nth(i).get_attribute("data-feature")) for i in range(rows.count())] == \
            [f for f, _ in traits["top"][pos]]
        feature = traits["top"][pos][0][0]
        rows.first.click()
        assert fv.locator(".il-fpanel .il-bars-title").first.inner_text().startswith(f"F{feature}:")
        # the feature's page from the saved statistics: densities beside the rows, its histogram and examples
        densities = [float(fv.locator(".il-frow .il-fdensity").nth(i).get_attribute("data-value"))
                     for i in range(rows.count())]
        assert densities == pytest.approx([traits["densities"][str(f)] for f, _ in traits["top"][pos]], abs=1e-9)
        st = traits["panels"][str(feature)]["stats"]
        assert fv.locator(".il-fpanel .il-histogram rect").count() == len(st["hist_counts"])
        assert fv.locator(".il-fpanel .il-context mark.il-fire").count() == len(st["top"]) + sum(map(len, st["bands"]))

        pg = page.page
        pg.set_viewport_size({"width": 1300, "height": 600})  # the view is taller than the window

        def said(view: str, kind: str, count: int) -> None:
            """The note of `view`'s widget names the request just sent and is in the window (not below it)."""
            pg.wait_for_function("([n]) => window.__interplab_offline.notes.length >= n", arg=[count], timeout=5000)
            pg.wait_for_timeout(100)
            note = pg.evaluate("""([sel]) => {
                const el = [...document.querySelectorAll(sel)].pop().closest('.interplab-offline-widget');
                const n = el.querySelector(':scope > .interplab-offline-note');
                if (!n) return null;
                const r = n.getBoundingClientRect();
                return { text: n.textContent, top: r.top, bottom: r.bottom, h: innerHeight };
              }""", [view])
            assert note is not None, f"no note under {view} after {kind}"
            assert "kernel" in note["text"] and kind in note["text"], note
            toast = pg.locator(".interplab-offline-toast")  # and where the person is looking: in the window
            assert toast.is_visible() and toast.inner_text() == note["text"], toast.inner_text()
            box = toast.bounding_box()
            assert 0 <= box["y"] and box["y"] + box["height"] <= note["h"], box

        before = len(pg.evaluate("() => window.__interplab_offline.notes"))
        fv.locator("input.il-fablate").scroll_into_view_if_needed()
        fv.locator("input.il-fablate").click()  # a real click on the checkbox
        said(".interplab-features", "ablate", before + 1)
        fv.locator("input.il-falpha").focus()
        pg.keyboard.press("ArrowRight")  # the slider moved by the keyboard, as a person may
        said(".interplab-features", "steer", before + 2)
        x, y = heatmap_cell_pixel(pg, pg.locator(".interplab-heatmap .js-plotly-plot").count() - 1, 256, 3)
        assert 0 < y < 600, y  # the middle row of 512, scrolled to the window's middle
        pg.mouse.click(x, y)  # an attribution sweep's cell: no stored patched run, so the kernel would answer
        said(".interplab-heatmap", "click", before + 3)
        assert not page.errors, page.errors
    finally:
        page.close()

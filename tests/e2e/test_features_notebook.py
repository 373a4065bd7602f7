"""Notebook 05 (Features) in a real JupyterLab and Notebook 7 driven by Chromium: its feature view renders under the
cell that opens it, and a real mouse click on the S2 token paints that token's top features at once, the ones the
kernel computes, and reaches the kernel (the view's `pos`); the steering view on the feature the notebook finds
shows its panel, a click on its ablate toggle gives the logit difference of a run with the feature zeroed, and the
arrow keys on its steering slider reach the kernel."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest
from harness import LabNotebook, serving

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "05_features.ipynb"

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
APPS = ["lab", pytest.param("notebook", marks=pytest.mark.skipif(
    importlib.util.find_spec("notebook") is None, reason="Notebook 7 (the `notebook` package) is not installed"))]


@pytest.fixture(scope="module")
def features_server(tmp_path_factory, chromium_browser):
    with serving(NOTEBOOK, tmp_path_factory, "features") as server:
        yield server


@pytest.mark.parametrize("app", APPS)
def test_the_feature_view_renders_and_a_token_click_paints_its_top_features(features_server, chromium_browser, app):
    nb = LabNotebook.open(chromium_browser, features_server, NOTEBOOK.name, app=app)
    try:
        i = nb.find_cell(r"^view = features\.show\(\)")
        nb.run_through(i)
        nb.wait_widget(i, "features")
        nb.page.wait_for_function("(i) => window.__il.cellNode(i).querySelectorAll('.il-fprompt .il-ftok').length > 0",
                                  arg=i, timeout=120000)
        nb.exec("lab.engine.worker.join()", timeout=120)  # the view's first jobs (its logit bars) are done
        startup_errors = list(nb.page_errors)  # Notebook 7 logs two of its own at startup (settings, file browser)
        kernel = json.loads(nb.exec("import json as _j; print(_j.dumps([S2, tokens, [f for f, _ in features.at(S2)],"
                                    " view.pos]))").strip().splitlines()[-1])
        s2, tokens, want, pos0 = kernel
        assert pos0 != s2  # the view opens on the last token, so the click below changes what is shown
        shown = nb.page.evaluate("(i) => [...window.__il.cellNode(i).querySelector('.il-fprompt .il-ftokens').children]"
                                 ".map((s) => s.textContent)", i)
        assert len(shown) == len(tokens)
        # a real mouse click on the S2 token, in pixels
        box = nb.page.evaluate("""([i, p]) => {
            const s = window.__il.cellNode(i).querySelector('.il-fprompt .il-ftokens').children[p];
            s.scrollIntoView({block: 'center'}); const r = s.getBoundingClientRect();
            return {x: r.left + r.width / 2, y: r.top + r.height / 2}; }""", [i, s2])
        t_click = nb.page.evaluate("() => performance.now()")
        nb.page.mouse.click(box["x"], box["y"])
        nb.wait_paint("features", t_click, timeout=10)
        rows = nb.page.evaluate("(i) => [...window.__il.cellNode(i).querySelectorAll('.il-frow')]"
                                ".map((r) => Number(r.dataset.feature))", i)
        title = nb.page.evaluate("(i) => [...window.__il.cellNode(i).querySelectorAll('.il-bars-title')]"
                                 ".map((e) => e.textContent).join(' | ')", i)
        assert rows == want, (rows, want)
        assert f"(position {s2})" in title, title
        # the feature page from the shipped statistics: each row's density, the selected feature's histogram
        n_dens = nb.page.evaluate("(i) => window.__il.cellNode(i).querySelectorAll('.il-frow .il-fdensity').length", i)
        assert n_dens == len(want), n_dens
        assert nb.page.evaluate("(i) => window.__il.cellNode(i).querySelectorAll('.il-fpanel .il-histogram rect')"
                                ".length", i) > 0
        # the click reached the kernel: the view's pos is S2 there too
        got = None
        for _ in range(100):
            got = int(nb.exec("print(view.pos)").strip().splitlines()[-1])
            if got == s2:
                break
            nb.page.wait_for_timeout(100)
        assert got == s2, got

        # the steering view further down, on the feature the notebook found: its panel, and a real click on its
        # ablate toggle paints the kernel's ablated logit difference, the one a run with the feature zeroed gives
        j = nb.find_cell(r"^steer_view = lab\.feature\(sae, ioi_feature\)\.show\(")
        nb.run_through(j)
        ioi = int(nb.exec("print(ioi_feature)").strip().splitlines()[-1])
        nb.page.wait_for_function("([j, f]) => [...window.__il.cellNode(j).querySelectorAll("
                                  "'.il-fpanel .il-bars-title')].some((e) => e.textContent.startsWith(`F${f}:`))",
                                  arg=[j, ioi], timeout=120000)
        nb.exec("lab.engine.worker.join()", timeout=120)
        toggle = nb.page.evaluate("""(j) => { const c = window.__il.cellNode(j).querySelector('.il-fablate');
            c.scrollIntoView({block: 'center'}); const r = c.getBoundingClientRect();
            return {x: r.left + r.width / 2, y: r.top + r.height / 2}; }""", j)
        nb.page.mouse.click(toggle["x"], toggle["y"])
        metric_line = "(j) => window.__il.cellNode(j).querySelector('.il-fmetric')?.textContent ?? ''"
        nb.page.wait_for_function(f"(j) => ({metric_line})(j).includes('ablated')", arg=j, timeout=60000)
        got = json.loads(nb.exec("lab.engine.worker.join(); import json as _j; print(_j.dumps([steer_view.ablate, "
                                 "steer_view.metric['values'], logit_diff(edits=[ilab.zero(sae, feature=ioi_feature)])"
                                 "]))").strip().splitlines()[-1])
        ablate_on, values, want = got
        assert ablate_on is True
        shown = [v for k, v in values.items() if "ablated" in k]
        assert shown == [pytest.approx(want, abs=1e-4)], (values, want)
        # the keyboard on its steering slider: three ArrowRight presses step alpha by about 0.3 (steps of 0.1 from the
        # slider's min) and reach the kernel (unmarked, the notebook's command mode took the arrow keys from it)
        slider = nb.page.locator(".interplab-features .il-falpha").nth(
            nb.page.evaluate("(j) => [...document.querySelectorAll('.interplab-features .il-falpha')]"
                             ".indexOf(window.__il.cellNode(j).querySelector('.il-falpha'))", j))
        slider.scroll_into_view_if_needed()
        for _ in range(3):
            slider.press("ArrowRight")
        moved = float(slider.input_value())
        assert 0.2 < moved <= 0.3 + 1e-9, moved
        names = "(j) => [...window.__il.cellNode(j).querySelectorAll('.il-series-name')].map((d) => d.textContent)"
        try:
            nb.page.wait_for_function(f"([j, a]) => ({names})(j).some((n) => n.endsWith(`steered (alpha ${{a}})`))",
                                      arg=[j, f"{moved:.3g}"], timeout=60000)
        except Exception as e:
            raise AssertionError(f"no steered bars: slider at {moved}, the bars {nb.page.evaluate(names, j)}, "
                                 f"kernel {nb.exec('print(steer_view.alpha)')}") from e
        alpha = float(nb.exec("lab.engine.worker.join(); print(steer_view.alpha)").strip().splitlines()[-1])
        assert alpha == pytest.approx(moved, abs=1e-9)
        assert nb.page_errors == startup_errors, nb.page_errors
        assert app == "notebook" or not startup_errors, startup_errors
    finally:
        nb.close()

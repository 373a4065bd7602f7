"""What a person sees is the numbers (issue #38): every view of the notebooks' analyses, built by the real Python
widgets on the embedded model and drawn in Chromium, at three widths and after a resize, has

- each heatmap's cells over its plot area, and under each labelled tick the column of that label, painted in the
  colour its value must have: RdBu computed here, from plotly's stops, not by the page's code;
- no text clipped by its plot or its view, no text over other text;
- no error panel.

"Every view" is the view classes' (interplab.widgets.base.VIEW_CLASSES, one per `_view_kind`): a view class that no
entry below draws, alone or as a part of a composite, fails the test, so a new view cannot escape it.

tests/geometry.py judges what tests/geometry.js measures; the JupyterLab test (tests/e2e/test_heatmap_frontends.py)
runs the same checks after window resizes and a sidebar toggle.
"""

from __future__ import annotations

import pathlib

import pytest
from bridge import Bridge  # tests/widgets/bridge.py
from geometry import judge, measure  # tests/geometry.py

import interplab as ilab
from interplab.views.attention import attention_widget
from interplab.views.lens import lens_widget
from interplab.widgets.base import VIEW_CLASSES
from interplab.zoo.evaluate_ioi_tiny import fixed_template_dataset

pytestmark = pytest.mark.browser

CLEAN = "When Mary and John went to the store, John gave a drink to"  # notebook 01's pair
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
WIDTHS = (520, 900, 1400)
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def views(lab):
    """Every kind of view the notebooks show, on their own data: name -> its widget."""
    metric = ilab.logit_diff(" Mary", " John")
    pairs = fixed_template_dataset(8)  # notebook 04's dataset
    clean8, corrupt8 = [p["clean"] for p in pairs], [p["corrupt"] for p in pairs]
    metric8 = ilab.logit_diff([p["answer"] for p in pairs], [p["wrong"] for p in pairs])
    sweep = dict(metric=metric, progress=False)
    return {
        "resid explorer": lab.patch_sweep(CLEAN, CORRUPT, site="resid_pre", by=("layer", "pos"), **sweep).show(),
        "z by head and position": lab.patch_sweep(CLEAN, CORRUPT, site="z", by=("layer", "head", "pos"),
                                                  **sweep).show(),
        "head sweeps of 8 pairs": lab.patch_sweep_heads(clean8, corrupt8, metric8, progress=False).show(),
        "z by position, 8 pairs": lab.patch_sweep(clean8, corrupt8, site="z", by=("layer", "head", "pos"),
                                                  metric=metric8, progress=False).show(),
        "direct logit attribution": lab.direct_logit_attribution(CLEAN, metric).show(),
        "path patching": lab.path_patch(CLEAN, CORRUPT, metric, senders="heads+mlps",
                                        receivers=[(3, 0, "q"), (3, 2, "v")], per_receiver=True).show(),
        # notebook 05's: an SAE's 512 features by position, rows of 2 px, every 8th labelled
        "features by position": lab.patch_sweep(CLEAN, CORRUPT, ilab.SAE.load("ioi-tiny-sae"), ("feature", "pos"),
                                                metric, method="attribution").show(),
        "logit lens": lens_widget(lab, CLEAN),
        "attention": attention_widget(lab, CLEAN, layer=2, head=0),
        "circuit": lab.edge_attribution(CLEAN, CORRUPT, metric).show(lab, CLEAN, CORRUPT, metric),
        "dashboard": lab.show(CLEAN, CORRUPT, " Mary", " John"),
        # notebook 05's feature view: a token's top features, a feature's panel (its page from the shipped
        # statistics), the edited next-token bars
        "features": lab.features(CLEAN, ilab.SAE.load("ioi-tiny-sae")).show(metric=metric),
        "features in prompts": lab.features(CLEAN, ilab.SAE.load("ioi-tiny-sae")).show(contexts=[CLEAN, CORRUPT]),
        # notebook 06's circuits: the IOI prompt's attribution graph over the shipped transcoders
        "attribution graph": ilab.analyses.graph.attribution_graph(
            lab, CLEAN, ilab.Transcoders.load("ioi-tiny-transcoders"), progress=False).show(),
    }


def kinds_of(widget) -> set[str]:
    """The view kinds a widget draws: its own, and a composite's parts' (its `parts` trait: [{name, kind}])."""
    return {widget._view_kind} | {part["kind"] for part in getattr(widget, "parts", []) or []}


def settle(page):
    """Two frames and the views' coalesced repaints."""
    page.wait_for_timeout(250)
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def test_every_view_draws_its_numbers_at_three_widths_and_after_a_resize(page, mount, monkeypatch, lab):
    shown, drawn = {}, views(lab)
    missing = set(VIEW_CLASSES) - set().union(*map(kinds_of, drawn.values()))
    assert not missing, f"view classes no entry of views() draws (add one): {sorted(missing)}"
    for name, widget in drawn.items():
        # drawn at the widest first: the narrowest, measured next, is a resize that must cut what was drawn wide
        page.evaluate("(w) => { document.body.style.width = w + 'px'; }", WIDTHS[-1])
        bridge = Bridge(widget, mount, monkeypatch)
        for _ in range(3):  # the worker's jobs (a dashboard's sweep, the logit panels) reach the page
            bridge.pump(lab)
        shown[name] = bridge
    compared, problems = 0, []
    try:
        for width in (*WIDTHS, WIDTHS[0]):  # the last: shrunk back after the widest (a sidebar opened again)
            page.evaluate("(w) => { document.body.style.width = w + 'px'; }", width)
            settle(page)
            for name, bridge in shown.items():
                page.evaluate("([i]) => window.W(i).el.scrollIntoView()", [bridge.w.i])
                out = measure(page, "([i]) => window.W(i).el", [bridge.w.i])
                found, n = judge(out, f"{name} at {width} px")
                problems += found
                compared += n
                if width == 900:  # for a person to look at
                    ARTIFACTS.mkdir(exist_ok=True)
                    page.locator(bridge.w.sel(".interplab")).first.screenshot(
                        path=str(ARTIFACTS / f"view_{name.replace(' ', '_').replace(',', '')}.png"))
    finally:
        page.evaluate("() => { document.body.style.width = '900px'; }")  # the shared page's width
    assert not problems, "\n".join(problems)
    assert compared > 100  # the heatmaps' ticks were there to compare


def test_the_sliders_rows_narrow_with_a_notebook_beside_a_sidebar(page, mount, monkeypatch, lab):
    """At 240 px (a notebook beside JupyterLab's sidebar in a 600 px window) a slider narrows in its row, and its
    label stays inside the view: the steering panel, the feature view and the circuit view, then widened again."""
    metric = ilab.logit_diff(" Mary", " John")
    drawn = {"steering": lab.steering(CLEAN, ["Love", "I adore you"], ["Hate", "I despise you"]),
             "features": lab.features(CLEAN, ilab.SAE.load("ioi-tiny-sae")).show(metric=metric),
             "circuit": lab.edge_attribution(CLEAN, CORRUPT, metric).show(lab, CLEAN, CORRUPT, metric)}
    shown = {}
    for name, widget in drawn.items():
        bridge = Bridge(widget, mount, monkeypatch)
        bridge.pump(lab)
        shown[name] = bridge
    problems = []
    try:
        for width in (240, 900):
            page.evaluate("(w) => { document.body.style.width = w + 'px'; }", width)
            settle(page)
            for name, bridge in shown.items():
                page.evaluate("([i]) => window.W(i).el.scrollIntoView()", [bridge.w.i])
                problems += judge(measure(page, "([i]) => window.W(i).el", [bridge.w.i]), f"{name} at {width} px")[0]
                slider = bridge.w.js("(w) => { const s = w.el.querySelector('input[type=range]')"
                                     ".getBoundingClientRect(); const v = w.el.getBoundingClientRect(); "
                                     "return [s.left, s.right, s.width, v.left, v.right]; }")
                left, right, wide, v_left, v_right = slider
                assert v_left - 0.5 <= left and right <= v_right + 0.5, (name, width, slider)
                assert wide >= 60 - 0.5 and (width < 900 or wide >= 200), (name, width, slider)
    finally:
        page.evaluate("() => { document.body.style.width = '900px'; }")  # the shared page's width
    assert not problems, "\n".join(problems)

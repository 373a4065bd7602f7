"""What a person sees is the numbers (issue #38): every view of the notebooks' analyses, built by the real Python
widgets on the embedded model and drawn in Chromium, at three widths and after a resize, has

- each heatmap's cells over its plot area, and under each labelled tick the column of that label, painted in the
  colour its value must have: RdBu computed here, from plotly's stops, not by the page's code;
- no text clipped by its plot or its view, no text over other text;
- no error panel.

tests/geometry.js measures the page; the JupyterLab test (tests/e2e) runs the same checks after a sidebar toggle.
"""

from __future__ import annotations

import pathlib

import pytest
from bridge import Bridge  # tests/widgets/bridge.py

import interplab as ilab
from interplab.widgets.controller import attention_widget, lens_widget
from interplab.zoo.evaluate_ioi_tiny import fixed_template_dataset

pytestmark = pytest.mark.browser

GEOMETRY = (pathlib.Path(__file__).parents[1] / "geometry.js").read_text()
CLEAN = "When Mary and John went to the store, John gave a drink to"  # notebook 01's pair
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
WIDTHS = (520, 900, 1400)

# plotly's RdBu (the colour scale of plotly.express, as in ARENA's imshow): red low, white 0, blue high
RDBU = [(0.0, (103, 0, 31)), (0.1, (178, 24, 43)), (0.2, (214, 96, 77)), (0.3, (244, 165, 130)),
        (0.4, (253, 219, 199)), (0.5, (247, 247, 247)), (0.6, (209, 229, 240)), (0.7, (146, 197, 222)),
        (0.8, (67, 147, 195)), (0.9, (33, 102, 172)), (1.0, (5, 48, 97))]


def rdbu(t: float) -> tuple[float, float, float]:
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(RDBU, RDBU[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return tuple(a + (b - a) * f for a, b in zip(c0, c1))
    return RDBU[-1][1]


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def views(lab):
    """Every kind of view the notebooks show, on their own data: name -> (widget, lab-or-None to pump)."""
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
        "logit lens": lens_widget(lab, CLEAN),
        "attention": attention_widget(lab, CLEAN, layer=2, head=0),
        "circuit": lab.edge_attribution(CLEAN, CORRUPT, metric).show(lab, CLEAN, CORRUPT, metric),
        "dashboard": lab.show(CLEAN, CORRUPT, " Mary", " John"),
    }


def settle(page):
    """Two frames and the views' coalesced repaints."""
    page.wait_for_timeout(250)
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def measure(page, bridge) -> dict:
    return page.evaluate(f"([i]) => ({GEOMETRY})(window.W(i).el)", [bridge.w.i])


def check(page, bridge, where: str, problems: list) -> int:
    """The checks of the module docstring (what fails goes to `problems`); returns how many labelled ticks were
    compared."""
    out = measure(page, bridge)
    problems += [f"{where}: {p}" for p in out["problems"]]
    compared = 0
    for hm in out["heatmaps"]:
        lo, hi = hm["lo"], hm["hi"]
        assert hi > lo, hm
        for t in hm["ticks"]:
            label = t["label"].replace("␣", " ").rstrip("…")
            assert 0 <= t["col"] < hm["cols"] and str(t["text"]).startswith(label.strip(" ") if label.startswith(
                " ") and not str(t["text"]).startswith(" ") else label), f"{where}: tick {t['label']!r} over {t}"
            for v, px in zip(t["values"], t["pixels"]):
                if v is None:
                    assert px[3] == 0, f"{where}: a cell not computed is painted under {t['label']!r}: {px}"
                    continue
                want = rdbu((v - lo) / (hi - lo))
                assert px[3] == 255 and max(abs(a - b) for a, b in zip(px, want)) <= 3, (
                    f"{where}: under {t['label']!r} (column {t['col']}) value {v}: pixel {px}, want {want}")
            compared += 1
    return compared


def test_every_view_draws_its_numbers_at_three_widths_and_after_a_resize(page, mount, monkeypatch, lab):
    shown = {}
    for name, widget in views(lab).items():
        page.evaluate("(w) => { document.body.style.width = w + 'px'; }", WIDTHS[0])
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
                compared += check(page, bridge, f"{name} at {width} px", problems)
    finally:
        page.evaluate("() => { document.body.style.width = '900px'; }")  # the shared page's width
    assert not problems, "\n".join(problems)
    assert compared > 100  # the heatmaps' ticks were there to compare

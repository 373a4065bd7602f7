"""What a view shows is its numbers, measured in the page (tests/geometry.js) and judged here, for the bare-page
and JupyterLab tests alike:

- each interplab heatmap's cells lie over its plot area, and under each labelled tick is the column of that label,
  painted in the colour its value must have: RdBu computed here, from plotly's stops, not by the page's code;
- no text is clipped by its plot or view, no text lies over other text; no error panel is shown.
"""

from __future__ import annotations

import pathlib

GEOMETRY_JS = (pathlib.Path(__file__).with_name("geometry.js")).read_text()

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


def measure(page, element_js: str, arg=None) -> dict:
    """Run geometry.js on the element `element_js` (a function of `arg` evaluated in the page) returns."""
    return page.evaluate(f"(arg) => ({GEOMETRY_JS})(({element_js})(arg))", arg)


def judge(out: dict, where: str) -> tuple[list[str], int]:
    """(problems, how many labelled ticks were compared) of one measurement."""
    problems = [f"{where}: {p}" for p in out["problems"]]
    compared = 0
    for hm in out["heatmaps"]:
        lo, hi = hm["lo"], hm["hi"]
        if not hi > lo:
            problems.append(f"{where}: colour range {lo}..{hi}")
            continue
        for t in hm["ticks"]:
            label = t["label"].replace("␣", " ").rstrip("…")
            text = str(t["text"])
            if not (0 <= t["col"] < hm["cols"] and text.startswith(label)):
                problems.append(f"{where}: tick {t['label']!r} over column {t['col']} ({text!r})")
                continue
            for v, px in zip(t["values"], t["pixels"]):
                if v is None:
                    if px[3] != 0:
                        problems.append(f"{where}: a cell not computed is painted under {t['label']!r}: {px}")
                    continue
                want = rdbu((v - lo) / (hi - lo))
                if px[3] != 255 or max(abs(a - b) for a, b in zip(px, want)) > 3:
                    problems.append(f"{where}: under {t['label']!r} (column {t['col']}) value {v}: pixel {px}, "
                                    f"want {tuple(round(c) for c in want)}")
            compared += 1
    return problems, compared

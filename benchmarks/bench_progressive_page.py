"""A progressive sweep's stream on the page: main-thread long tasks in real Chromium (PerformanceObserver "longtask").

    python benchmarks/bench_progressive_page.py                 # baseline: the bundle at git rev 7927fd6
    python benchmarks/bench_progressive_page.py --baseline REV  # another commit's bundle as the baseline

A heatmap view on the bare page (tests/widgets/harness.html) receives what the kernel sends for a progressive sweep
(`explorer.sweep(progressive=True)`, `lab.show(..., progressive=True)`): the view as shown, then the attribution
estimate (values, hover, a new title), exact cells in "cells" messages 150 ms apart, then the final grid (values,
hover, the exact sweep's title). Ours: the kernel sends the frame (shape, labels; every value None) before the view
is shown, so the stream after it repaints cells only. Baseline, the same run and machine: the bundle of an earlier
commit fed the stream as that commit's kernel sent it (an empty view, the grid's shape arriving with the estimate).
Printed per grid: the longest task from the first paint to two frames after the last, and how many passed 100 ms.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(HERE))

from bench_page import BUNDLE, open_page  # noqa: E402 (the bare page bench_page.py serves)
from harness import chromium_missing, launch_browser  # noqa: E402

GRIDS = {"resid_pre, 4 x 16": (4, 16), "12 x 60": (12, 60), "16 x 125 (2000 cells)": (16, 125)}
GOAL_MS = 100.0
REPEATS = 3
HOVER = "attribution estimate (not computed exactly)\nlogit diff ' Mary' - ' John': 1.234"
OBSERVE = """() => { window.__lt = []; window.__lto = new PerformanceObserver((l) => {
  for (const e of l.getEntries()) window.__lt.push(e.duration); }); window.__lto.observe({ type: "longtask" }); }"""
SETTLE = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 300))))"
SET = "([i, g]) => { const m = window.W(i).model; for (const [k, v] of Object.entries(g)) m.set(k, v); }"


def stream(page, rows: int, cols: int, framed: bool) -> list[float]:
    """The stream after the view's first paint; the long tasks seen (ms)."""
    page.evaluate("window.__reset()")
    tokens = [f" tok{i}" for i in range(cols)]
    labels = dict(x_labels=tokens, y_labels=[f"L{r}" for r in range(rows)], x_title="position", y_title="layer",
                  direction="denoise", key_cols=[cols - 3, cols - 1], metric_name="normalised logit diff")
    shown = dict(values=[], x_labels=[], y_labels=[], x_title="", y_title="", title="", direction="", metric_name="",
                 hover=[], selected=[], active_edits=[], progress=0.01, zmin=None, zmax=None, key_cols=[],
                 status="estimating every cell (attribution)...")
    if framed:  # what the kernel now sends before the view is shown
        shown.update(values=[[None] * cols for _ in range(rows)], title="resid_pre: denoise (exact)", **labels)
    i = page.evaluate("([k, t]) => window.mount(k, t)", ["heatmap", shown])
    page.wait_for_function("() => window.paintsOf('heatmap') >= 1", timeout=60000)
    page.evaluate(SETTLE)
    page.evaluate(OBSERVE)
    estimate = dict(values=[[(r - c / cols) / rows * 0.8 for c in range(cols)] for r in range(rows)],
                    hover=[[HOVER] * cols for _ in range(rows)], cell_tops={},
                    title="resid_pre: denoise (attribution): exact cells replace the estimate as they finish",
                    status="estimate shown; exact cells follow, largest |estimate| first", **labels)
    page.evaluate(SET, [i, estimate])
    page.wait_for_timeout(150)
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    batches = [cells[k:k + 65] for k in range(0, len(cells), 65)]
    for k, batch in enumerate(batches):
        msg = {"type": "cells", "cells": [[r, c, (r - c / cols) / rows, HOVER] for r, c in batch]}
        page.evaluate("([i, m, p]) => { const w = window.W(i); w.model.receive(m); w.model.set('progress', p); }",
                      [i, msg, (k + 1) / len(batches) * 0.99])
        page.wait_for_timeout(150)
    final = dict(values=[[(r - c / cols) / rows for c in range(cols)] for r in range(rows)],
                 hover=[[HOVER] * cols for _ in range(rows)], title="resid_pre: denoise (exact)", progress=0.0,
                 status="resid_pre patched clean into corrupt (denoising), by layer x pos, exact")
    page.evaluate(SET, [i, final])
    page.evaluate(SETTLE)
    return page.evaluate("() => { window.__lto.disconnect(); return window.__lt; }")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="7927fd6",
                    help="the commit whose bundle is the baseline (default: %(default)s)")
    args = ap.parse_args()
    if (why := chromium_missing()):
        print(f"skipped: {why}")
        return 0
    old = subprocess.run(["git", "show", f"{args.baseline}:interplab/static/widgets.js"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    with launch_browser() as browser:
        ours_ctx, ours = open_page(browser, BUNDLE.read_bytes())
        base_ctx, base = open_page(browser, old)
        for name, (rows, cols) in GRIDS.items():
            mine, theirs = [], []
            for _ in range(REPEATS):  # interleaved, so both see the same machine load
                mine += [max(stream(ours, rows, cols, framed=True), default=0.0)]
                theirs += [max(stream(base, rows, cols, framed=False), default=0.0)]
            m, b = max(mine), max(theirs)
            shown = f"{m:.0f} ms" if m else "none over 50 ms"
            ratio = f"{b / m:.1f}x" if m else f"> {b / 50:.1f}x"
            print(f"{name}: longest task {shown} ({sum(t > GOAL_MS for t in mine)} of {REPEATS} runs over "
                  f"{GOAL_MS:.0f} ms); baseline {args.baseline}: {b:.0f} ms ({sum(t > GOAL_MS for t in theirs)} of "
                  f"{REPEATS} over); baseline / ours = {ratio}")
        ours_ctx.close()
        base_ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Long prompts on the bare page: at 120 tokens the heatmap's tick labels never overlap (every k-th token, the hover
names each cell's), cells stay wide enough to see and click; at 488 the grid scrolls sideways and a click on the
last column still lands on it. The attention pattern and the logit lens at 120 tokens: every k-th token labelled on
each axis, square cells a mouse can point at, the lens's cell text cut to what fits (never overlapping), hovers name
the unlabelled tokens, a click lands on its cell. Screenshots: artifacts/heatmap_120_tokens.png,
artifacts/heatmap_488_tokens.png, artifacts/attention_120_tokens.png, artifacts/lens_120_tokens.png."""

from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.browser

ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "artifacts"


def traits(rows: int, cols: int) -> dict:
    tokens = [f" word{i}" if i % 3 else f" w{i}" for i in range(cols)]
    return dict(values=[[((r * 7 + c) % 11 - 5) / 5 for c in range(cols)] for r in range(rows)], x_labels=tokens,
                y_labels=[f"L{r}" for r in range(rows)], x_title="position", y_title="layer", title="resid_pre",
                direction="denoise", metric_name="normalised logit diff", hover=[], selected=[], active_edits=[],
                progress=0.0, zmin=None, zmax=None)


def tick_boxes(w) -> list[dict]:
    return w.js("(w) => [...w.el.querySelectorAll('.xtick text')].map((t) => { const r = t.getBoundingClientRect();"
                " return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: t.textContent }; })"
                ".sort((a, b) => a.left - b.left)")


def geometry(w) -> dict:
    return w.js("(w) => { const gd = w.el.querySelector('.js-plotly-plot'), xa = gd._fullLayout.xaxis;"
                " return { cell: Math.abs(xa.l2p(1) - xa.l2p(0)), height: gd.getBoundingClientRect().height,"
                " scroll: gd.scrollWidth, client: gd.clientWidth }; }")


@pytest.mark.parametrize("cols", [120, 488])
def test_long_prompts_stay_readable(page, mount, cols):
    w = mount("heatmap", **traits(12, cols))
    w.wait_paints(1)
    g = geometry(w)
    assert g["cell"] >= 4.5 and g["height"] > 300, g
    ticks = tick_boxes(w)
    assert 5 <= len(ticks) <= cols
    for a, b in zip(ticks, ticks[1:]):  # labels at -45°: neighbours' lines at least a 12 px font apart
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)
    if cols > 120:
        assert g["scroll"] > g["client"], g  # wider than the page: it scrolls sideways
    # a cell whose token is not labelled: its hover names it
    col = next(c for c in range(1, cols) if f"word{c}" not in {t["text"].strip("␣ ") for t in ticks})
    p = w.js("(w, col) => { const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;"
             " gd.scrollLeft = Math.max(0, fl.xaxis._offset + fl.xaxis.l2p(col) - gd.clientWidth / 2);"
             " const box = gd.getBoundingClientRect();"
             " return { x: box.left + fl.xaxis._offset + fl.xaxis.l2p(col) - gd.scrollLeft,"
             " y: box.top + fl.yaxis._offset + fl.yaxis.l2p(2) }; }", col)
    page.mouse.move(p["x"], p["y"])
    page.wait_for_function("(i) => !!window.W(i).el.querySelector('.il-tip.on')", arg=w.i, timeout=5000)
    assert f"word{col}" in w.js("(w) => w.el.querySelector('.il-tip').textContent")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(w.sel(".interplab-heatmap")).screenshot(path=str(ARTIFACTS / f"heatmap_{cols}_tokens.png"))
    # and a click there lands on that cell, scrolled or not
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "click", "row": 2, "col": col, "shift": False}]


def test_the_logit_lens_labels_stay_apart_at_120_tokens(page, mount):
    cols, rows = 120, 6
    w = mount("lens", x_labels=[f" word{i}" for i in range(cols)], y_labels=[f"L{r}" for r in range(rows)],
              top_tokens=[[" x"] * cols for _ in range(rows)], probs=[[0.5] * cols for _ in range(rows)], hover=[],
              selected=[], title="logit lens")
    w.wait_paints(1)
    ticks = tick_boxes(w)
    assert 5 <= len(ticks) < cols
    for a, b in zip(ticks, ticks[1:]):
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)


def y_tick_boxes(w) -> list[dict]:
    return w.js("(w) => [...w.el.querySelectorAll('.ytick text')].map((t) => { const r = t.getBoundingClientRect();"
                " return { top: r.top, bottom: r.bottom, text: t.textContent }; }).sort((a, b) => a.top - b.top)")


def test_attention_at_120_tokens(page, mount):
    n = 120
    tokens = [f" word{i}" for i in range(n)]
    pattern = [[(1.0 / (q + 1) if k <= q else 0.0) for k in range(n)] for q in range(n)]
    w = mount("attention", tokens=tokens, n_layers=2, n_heads=4, layer=1, head=2, pattern=pattern, title="")
    w.wait_paints(1)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(w.sel(".interplab-attention")).screenshot(path=str(ARTIFACTS / "attention_120_tokens.png"))
    xs, ys = tick_boxes(w), y_tick_boxes(w)
    assert 5 <= len(xs) < n and 5 <= len(ys) < n, (len(xs), len(ys))
    for a, b in zip(xs, xs[1:]):  # -45° key labels: neighbours' lines a 12 px font apart
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)
    for a, b in zip(ys, ys[1:]):  # query labels: one line each, never on top of each other
        assert b["top"] >= a["bottom"] - 1, (a, b)
    g = w.js("(w) => { const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;"
             " return { cell: Math.abs(fl.xaxis.l2p(1) - fl.xaxis.l2p(0)), cellY: Math.abs(fl.yaxis.l2p(1) -"
             " fl.yaxis.l2p(0)) }; }")
    assert g["cell"] >= 4.5 and abs(g["cell"] - g["cellY"]) < 0.5, g  # square cells a mouse can point at
    # an unlabelled key: the hover names both tokens
    labelled = {t["text"].strip("␣ ") for t in xs}
    key = next(k for k in range(60, n) if f"word{k}" not in labelled)
    p = w.js("(w, k) => { const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;"
             " gd.scrollLeft = Math.max(0, fl.xaxis._offset + fl.xaxis.l2p(k) - gd.clientWidth / 2);"
             " const box = gd.getBoundingClientRect();"
             " return { x: box.left + fl.xaxis._offset + fl.xaxis.l2p(k) - gd.scrollLeft,"
             " y: box.top + fl.yaxis._offset + fl.yaxis.l2p(119) }; }", key)
    page.mouse.move(p["x"], p["y"])
    page.wait_for_function("(i) => !!window.W(i).el.querySelector('.hoverlayer .hovertext')", arg=w.i, timeout=5000)
    hover = w.js("(w) => w.el.querySelector('.hoverlayer').textContent")
    assert f"word{key}" in hover and "word119" in hover, hover


def test_the_logit_lens_at_120_tokens_scrolls_and_keeps_cells_clickable(page, mount):
    cols, rows = 120, 6
    w = mount("lens", x_labels=[f" word{i}" for i in range(cols)], y_labels=[f"L{r}" for r in range(rows)],
              top_tokens=[[f" t{r}_{c}" for c in range(cols)] for r in range(rows)],
              probs=[[((r + c) % 10) / 10 for c in range(cols)] for r in range(rows)], hover=[], selected=[],
              title="logit lens")
    w.wait_paints(1)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(w.sel(".interplab-lens")).screenshot(path=str(ARTIFACTS / "lens_120_tokens.png"))
    texts = w.js("(w) => [...w.el.querySelectorAll('.heatmaplayer text, .textpoint text')].map((t) => {"
                 " const r = t.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top,"
                 " text: t.textContent }; })")
    cell = w.js("(w) => { const fl = w.el.querySelector('.js-plotly-plot')._fullLayout;"
                " return Math.abs(fl.xaxis.l2p(1) - fl.xaxis.l2p(0)); }")
    assert cell >= 4.5, cell
    # the cell text (the top token) is drawn only where it fits its cell: no run of overlapping words
    rows_of = {}
    for t in texts:
        rows_of.setdefault(round(t["top"]), []).append(t)
    for line in rows_of.values():
        line.sort(key=lambda t: t["left"])
        for a, b in zip(line, line[1:]):
            assert b["left"] >= a["right"] - 1, (a, b)
    # a click on a column far right (scrolled to) selects that very cell
    col = 101
    p = w.js("(w, col) => { const gd = w.el.querySelector('.js-plotly-plot'), fl = gd._fullLayout;"
             " gd.scrollLeft = Math.max(0, fl.xaxis._offset + fl.xaxis.l2p(col) - gd.clientWidth / 2);"
             " const box = gd.getBoundingClientRect();"
             " return { x: box.left + fl.xaxis._offset + fl.xaxis.l2p(col) - gd.scrollLeft,"
             " y: box.top + fl.yaxis._offset + fl.yaxis.l2p(3) }; }", col)
    page.mouse.move(p["x"], p["y"])
    page.wait_for_function("(i) => !!window.W(i).el.querySelector('.hoverlayer .hovertext')", arg=w.i, timeout=5000)
    hover = w.js("(w) => w.el.querySelector('.hoverlayer').textContent")
    assert f"word{col}" in hover and f"t3_{col}" in hover, hover
    page.mouse.click(p["x"], p["y"])
    w.wait_sent(1)
    assert w.requests == [{"type": "select", "row": 3, "col": col}]


def test_a_long_prompts_res_show_labels_its_last_token_and_where_the_pair_differs(page, mount, monkeypatch):
    """A 105-token pair differing at S2 (position 100): the real explorer's heatmap labels S2 and the last token
    whatever else it thins out, and no two labels overlap."""
    from bridge import Bridge  # tests/widgets/bridge.py

    import interplab as ilab

    lab = ilab.Lab.load("ioi-tiny")
    lead = "Then Anna went home. " * 18
    clean, corrupt = (lead + f"When Mary and John went to the store, {s} gave a drink to" for s in ("John", "Mary"))
    tokens = lab.to_str_tokens(clean)
    diff = [i for i, (a, b) in enumerate(zip(tokens, lab.to_str_tokens(corrupt))) if a != b]
    assert len(tokens) > 100 and len(diff) == 1, (len(tokens), diff)
    res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"),
                          metric=ilab.logit_diff(" Mary", " John"), progress=False)
    ex = res.show()
    assert ex.heatmap.key_cols == [diff[0], len(tokens) - 1]
    w = Bridge(ex, mount, monkeypatch).w
    page.wait_for_function("(i) => window.W(i).el.querySelectorAll('.interplab-heatmap .xtick text').length > 5",
                           arg=w.i, timeout=20000)
    ticks = sorted(tick_boxes(w), key=lambda t: t["right"])  # -45° labels end at their tick
    texts = [t["text"].replace("␣", " ") for t in ticks]
    assert len(ticks) < len(tokens) and tokens[diff[0]] in texts and tokens[-1] == texts[-1], texts
    for a, b in zip(ticks, ticks[1:]):
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)


@pytest.mark.parametrize("kind", ["lens", "attention"])
def test_a_96_token_prompt_keeps_its_last_tokens_label(page, mount, kind):
    """Thinned labels still name the last token (where the model predicts), on the x axis and the query axis, as
    the patching heatmap does."""
    n, rows = 96, 4
    tokens = [f" word{i}" for i in range(n)]
    if kind == "lens":
        w = mount("lens", x_labels=tokens, y_labels=[f"L{r}" for r in range(rows)],
                  top_tokens=[[" x"] * n for _ in range(rows)], probs=[[0.5] * n for _ in range(rows)], hover=[],
                  selected=[], title="logit lens")
    else:
        w = mount("attention", tokens=tokens, n_layers=2, n_heads=4, layer=1, head=2, title="",
                  pattern=[[(1.0 / (q + 1) if k <= q else 0.0) for k in range(n)] for q in range(n)])
    w.wait_paints(1)
    xs = sorted(tick_boxes(w), key=lambda t: t["right"])  # -45° labels end at their tick
    assert len(xs) < n and xs[-1]["text"] == "␣word95", [t["text"] for t in xs[-3:]]
    for a, b in zip(xs, xs[1:]):
        assert (b["right"] - a["right"]) * 0.7071 >= 12, (a, b)
    if kind == "attention":
        ys = y_tick_boxes(w)
        assert len(ys) < n and ys[-1]["text"] == "␣word95", [t["text"] for t in ys[-3:]]
        for a, b in zip(ys, ys[1:]):
            assert b["top"] >= a["bottom"] - 1, (a, b)


def test_the_logit_lens_cuts_its_cell_text_again_when_narrowed(page, mount):
    """Drawn wide, each cell shows its whole top token; its container narrowed (a window resize, a sidebar opened),
    the text is cut again to what fits the narrower cells: no word runs into its neighbour's cell."""
    cols, rows = 15, 4
    w = mount("lens", x_labels=[f" w{i}" for i in range(cols)], y_labels=[f"L{r}" for r in range(rows)],
              top_tokens=[[f" ab{c:02d}" for c in range(cols)] for _ in range(rows)],
              probs=[[0.5] * cols for _ in range(rows)], hover=[], selected=[], title="logit lens")
    w.wait_paints(1)
    texts = "(w) => [...w.el.querySelectorAll('.heatmaplayer text')].map((t) => {" \
            " const r = t.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top," \
            " text: t.textContent }; })"
    wide = w.js(texts)
    assert len(wide) == rows * cols and all(t["text"].startswith("␣ab") and "…" not in t["text"] for t in wide)
    painted = w.paints()
    w.js("(w) => { w.el.style.width = '560px'; }")
    page.wait_for_function("([k, n]) => window.paintsOf(k) > n", arg=["lens", painted], timeout=10000)
    page.wait_for_timeout(300)
    narrowed = w.js(texts)
    assert narrowed and all("…" in t["text"] or not t["text"] for t in narrowed), narrowed  # cut to fit
    rows_of = {}
    for t in narrowed:
        rows_of.setdefault(round(t["top"]), []).append(t)
    for line in rows_of.values():
        line.sort(key=lambda t: t["left"])
        for a, b in zip(line, line[1:]):
            assert b["left"] >= a["right"] - 1, (a, b)

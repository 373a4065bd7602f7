"""The analysis views of issue #16 in JupyterLab 4, clicked with a real mouse in Chromium: the five head sweeps (a
click on a value cell paints the shared logit panel with the number a fresh patched run gives in the kernel), direct
logit attribution (a clicked position shows its heads and parts, the parts adding up to the total) and path patching
(a clicked sender shows its effect through each receiver). Every number on the page is compared with one the kernel
computes afterwards: from a forward of its own, or from the result object."""

from __future__ import annotations

import json
import re

import pytest
from harness import LOAD_IOI, LabNotebook, write_notebook

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SETUP = LOAD_IOI + '''
metric = ilab.logit_diff(" Mary", " John")
def ld(logits):  # the logit diff of one row of logits, by hand
    return float(logits[lab.token_id(" Mary")] - logits[lab.token_id(" John")])'''


def open_view(browser, server, name: str, sources: list[str], panes: int) -> LabNotebook:
    """The notebook `name` of SETUP + sources opened and run; the view in its last cell with `panes` heatmaps
    painted with numbers."""
    write_notebook(server.root_dir / name, [SETUP, *sources])
    nb = LabNotebook.open(browser, server, name)
    try:
        last = len(sources)
        nb.run_through(last)
        nb.page.wait_for_function(
            "([i, n]) => { const gds = [...window.__il.cellNode(i).querySelectorAll('.il-pane .js-plotly-plot')];"
            " return gds.length === n && gds.every((gd) => (gd.__interplab_grid?.z ?? [])"
            ".some((r) => r.some((v) => typeof v === 'number'))); }",
            arg=[last, panes], timeout=120000, polling=100)
        nb.exec("lab.engine.worker.join()", timeout=120)  # the view's first jobs (logit panel, warm-up) are done
        return nb
    except BaseException:
        nb.close()
        raise


def click_cell(nb: LabNotebook, cell: int, part: str, row: int, col: int) -> None:
    """A real mouse click on heatmap cell (row, col) of pane `part` of the view in notebook cell `cell` (scrolled
    into view first; the pixel is checked to be that pane's plot, nothing on top of it)."""
    p = nb.page.evaluate("""([i, part, row, col]) => {
        const gd = window.__il.cellNode(i).querySelector(`.il-pane[data-part="${part}"] .js-plotly-plot`);
        gd.scrollIntoView({block: 'center'});
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        const x = box.left + fl.xaxis._offset + fl.xaxis.d2p(col), y = box.top + fl.yaxis._offset + fl.yaxis.d2p(row);
        const hit = document.elementFromPoint(x, y);
        return {x, y, plot: hit?.closest('.js-plotly-plot') === gd};
    }""", [cell, part, row, col])
    assert p["plot"], f"pixel {p} of {part} ({row}, {col}) is not on its plot"
    n = nb.page.evaluate("() => window.__il_clicks.length")
    nb.page.mouse.click(p["x"], p["y"])
    nb.page.wait_for_function("(n) => window.__il_clicks.length > n", arg=n, timeout=5000, polling=20)


def kernel_json(nb: LabNotebook, expr: str, timeout: float = 120) -> object:
    return json.loads(nb.exec(f"import json as _json; print(_json.dumps({expr}))", timeout=timeout))


def shown_number(text: str, name: str) -> tuple[float, float]:
    """`name = <number>` of the logit panel's metric line, and how far the page's rounding may put it off (fmt:
    4 decimals, or 3 significant digits in exponent form)."""
    m = re.search(rf"(?<![\w]){re.escape(name)} = (\S+)", text)
    assert m, f"no {name!r} in the metric line {text!r}"
    s = m.group(1)
    v = float(s)
    return v, (abs(v) * 6e-3 if "e" in s else 6e-5) + 1e-6


def test_a_clicked_value_cell_paints_the_logit_panel_with_the_kernels_patched_run(lab_server, chromium_browser):
    server, _ = lab_server
    nb = open_view(chromium_browser, server, "analysis_heads.ipynb", [
        "hs = lab.patch_sweep_heads(clean, corrupt, metric)",
        "view = hs.show()\nview",
    ], panes=5)
    try:
        metric_line = ("() => window.__il.cellNode(2).querySelector('.il-pane[data-part=logits] .il-metric')"
                       "?.textContent ?? ''")
        assert "patched" not in nb.page.evaluate(metric_line)
        # the value cell with the largest effect (a cell whose patch visibly moves the metric; on ioi-tiny the
        # corruption reaches the heads through their values, and no query cell moves the metric by 1%)
        row, col = kernel_json(nb, "divmod(int(hs['v'].cells.grid(hs['v'].values).abs().argmax()), lab.n_heads)")
        click_cell(nb, 2, "v", row, col)
        nb.page.wait_for_function(f"() => ({metric_line})().includes('patched =')", timeout=60000)
        # the kernel got the click (that cell selected, in the v panel alone) and its logit job is done
        got = kernel_json(nb, "(lab.engine.worker.join(), {s: ex.heatmap.selected for s, ex in view.explorers.items()},"
                              " view.logits.metric['values'])[1:]")
        assert got[0] == {s: ([[row, col]] if s == "v" else []) for s in ("z", "q", "k", "v", "pattern")}, got
        # what the kernel computes on its own: that head's value patched from the clean run into the corrupt run
        want = kernel_json(nb, f"""(lambda src: {{
            "patched": ld(lab.run(corrupt, edits=[ilab.patch("v", {row}, head={col}, source=src)],
                                  log=False).last_logits[0]),
            "clean": ld(lab.run(clean, log=False).last_logits[0]),
            "corrupt": ld(lab.run(corrupt, log=False).last_logits[0])}})(lab.run(clean, cache=["v"], log=False))""")
        want["normalised"] = (want["patched"] - want["corrupt"]) / (want["clean"] - want["corrupt"])
        assert abs(want["normalised"]) > 1e-2, want  # the patch moves the metric: a wrong cell would show
        for k in ("patched", "normalised"):
            assert got[1][k] == pytest.approx(want[k], abs=1e-5), (k, got[1], want)
        text = nb.page.evaluate(metric_line)
        for k in ("clean", "corrupt", "patched", "normalised"):
            v, tol = shown_number(text, k)
            assert v == pytest.approx(want[k], abs=tol), (k, text, want)
        outlined = nb.page.evaluate("() => [...window.__il.cellNode(2).querySelectorAll('.il-cell-selected')]"
                                    ".map((e) => [e.closest('.il-pane').dataset.part, Number(e.dataset.row),"
                                    " Number(e.dataset.col)])")
        assert outlined == [["v", row, col]]
        assert nb.exec("print(len(ilab.attached_hooks()))").strip() == "0"
        assert not nb.page_errors, nb.page_errors
    finally:
        nb.close()


def test_a_clicked_position_shows_its_heads_and_parts_adding_up_to_the_total(lab_server, chromium_browser):
    server, _ = lab_server
    nb = open_view(chromium_browser, server, "analysis_dla.ipynb", [
        "dla = lab.direct_logit_attribution(clean, metric)",
        "dview = dla.show()\ndview",
    ], panes=2)
    try:
        n_pos = kernel_json(nb, "int(dla.total.shape[0])")
        pos = n_pos - 5  # the second ' John': any position but the last, which is shown first
        heads_title = ("() => window.__il.cellNode(2).querySelector('.il-pane[data-part=heads] .il-htitle-main')"
                       "?.textContent ?? ''")
        assert f"position {n_pos - 1}" in nb.page.evaluate(heads_title)
        click_cell(nb, 2, "positions", 0, pos)
        nb.page.wait_for_function(f"() => ({heads_title})().includes('position {pos} ')", timeout=60000)
        nb.page.wait_for_function("(p) => [...window.__il.cellNode(2).querySelectorAll('.il-bars-title')]"
                                  ".some((e) => e.textContent.includes(`position ${p} `))",
                                  arg=pos, timeout=60000)
        shown = nb.page.evaluate("""() => {
            const el = window.__il.cellNode(2);
            return {heads: el.querySelector('.il-pane[data-part=heads] .js-plotly-plot').__interplab_grid.z,
                    bars: [...el.querySelectorAll('.il-pane[data-part=parts] .il-vbar')]
                        .map((r) => [r.dataset.label, Number(r.dataset.value)])};
        }""")
        want = kernel_json(nb, f"""{{
            "heads": dla.heads[:, :, {pos}].tolist(),
            "bars": [["embed", float(dla.embed[{pos}])], ["pos_embed", float(dla.pos_embed[{pos}])]]
                + [[f"attn bias L{{l}}", float(v)] for l, v in enumerate(dla.attn_bias[:, {pos}])]
                + [[f"MLP{{l}}", float(v)] for l, v in enumerate(dla.mlp[:, {pos}])]
                + [["final bias", float(dla.final_bias[{pos}])], ["heads (sum)", float(dla.heads[:, :, {pos}].sum())],
                   ["total", float(dla.total[{pos}])]],
            "model": ld(lab.run(clean, log=False).logits[0, {pos}])}}""")
        assert [b[0] for b in shown["bars"]] == [b[0] for b in want["bars"]]
        assert [b[1] for b in shown["bars"]] == pytest.approx([b[1] for b in want["bars"]], abs=1e-6)
        assert shown["heads"] == [pytest.approx(r, abs=1e-6) for r in want["heads"]]
        bars = dict(shown["bars"])
        parts = sum(v for k, v in bars.items() if k not in ("heads (sum)", "total"))
        assert sum(map(sum, shown["heads"])) == pytest.approx(bars["heads (sum)"], abs=1e-5)
        assert parts + bars["heads (sum)"] == pytest.approx(bars["total"], abs=1e-4)
        assert bars["total"] == pytest.approx(want["model"], abs=1e-4)  # the model's own metric at that position
        selected = kernel_json(nb, "[dview.pos, dview.positions.selected]")
        assert selected == [pos, [[0, pos]]]
        assert not nb.page_errors, nb.page_errors
    finally:
        nb.close()


def test_a_clicked_sender_draws_its_effect_through_each_receiver(lab_server, chromium_browser):
    server, _ = lab_server
    nb = open_view(chromium_browser, server, "analysis_paths.ipynb", [
        'pp = lab.path_patch(clean, corrupt, metric, senders="heads+mlps",\n'
        '                    receivers=[(2, 0, "q"), (2, 1, "k"), (2, 2, "v")], per_receiver=True)',
        "pview = pp.show()\npview",
    ], panes=1)
    try:
        bars = ("() => [...window.__il.cellNode(2).querySelectorAll('.il-pane[data-part=bars] .il-vbar')]"
                ".map((r) => [r.dataset.label, r.dataset.value === '' ? null : Number(r.dataset.value)])")
        # the bars start on the strongest sender (never a row of dashes)
        first = kernel_json(nb, "(lambda g: pp.values[:, *divmod(int(g.argmax()), g.shape[1])].tolist())("
                                "pp.values.mean(0).nan_to_num(0).abs())")
        nb.page.wait_for_function(f"() => ({bars})().every(([, v]) => v !== null)", timeout=60000)
        assert [v for _, v in nb.page.evaluate(bars)] == pytest.approx(first, abs=1e-6)
        grid = nb.page.evaluate("() => window.__il.cellNode(2).querySelector('.il-pane[data-part=heatmap] "
                                ".js-plotly-plot').__interplab_grid.z")
        # (no path from a sender in the receivers' layer or after: not answered, null on the page)
        want_grid = kernel_json(nb, "[[None if v != v else v for v in r] for r in pp.values.mean(0).tolist()]")
        assert [[v is None for v in r] for r in grid] == [[v is None for v in r] for r in want_grid]
        assert [[v for v in r if v is not None] for r in grid] == [
            pytest.approx([v for v in r if v is not None], abs=1e-6) for r in want_grid]
        # the sender whose effect through the receivers differs most between them (a sender, not the mean)
        row, col = kernel_json(nb, "divmod(int((pp.values.amax(0) - pp.values.amin(0)).nan_to_num(0).argmax()), "
                                   "pp.values.shape[2])")
        click_cell(nb, 2, "heatmap", row, col)
        nb.page.wait_for_function(f"() => ({bars})().every(([, v]) => v !== null)", timeout=60000)
        shown = nb.page.evaluate(bars)
        want = kernel_json(nb, f"""{{"labels": [" + ".join(f"L{{l}}H{{h}}.{{s}}" for l, h, s in g)
                                               for g in pp.receivers],
                                   "values": pp.values[:, {row}, {col}].tolist(),
                                   "sender": pp.labels["cols"][{col}]}}""")
        assert [s[0] for s in shown] == want["labels"] == ["L2H0.q", "L2H1.k", "L2H2.v"]
        assert [s[1] for s in shown] == pytest.approx(want["values"], abs=1e-6)
        assert max(want["values"]) - min(want["values"]) > 1e-3  # the receivers differ: a wrong sender would show
        title = nb.page.evaluate("() => window.__il.cellNode(2).querySelector('.il-pane[data-part=bars] "
                                 ".il-bars-title')?.textContent ?? ''")
        sender = f"MLP{row}" if want["sender"] == "MLP" else f"L{row}H{want['sender']}"
        assert title.startswith(f"{sender} through each receiver"), title
        widths = nb.page.evaluate("() => [...window.__il.cellNode(2).querySelectorAll('.il-pane[data-part=bars] "
                                  ".il-vbar .il-fill')].map((f) => f.getBoundingClientRect().width)")
        assert max(widths) > 10, widths  # drawn, not just labelled
        assert kernel_json(nb, "pview.heatmap.selected") == [[row, col]]
        assert not nb.page_errors, nb.page_errors
    finally:
        nb.close()

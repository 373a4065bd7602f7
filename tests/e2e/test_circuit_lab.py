"""The circuit graph in JupyterLab 4 (issue #16): a real mouse click on an edge shows the number lab.edge_patch
gives in the kernel, and the button shows lab.circuit's faithfulness of the drawn edges."""

from __future__ import annotations

import pytest
from harness import LOAD_IOI, LabNotebook, write_notebook

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SOURCES = [
    LOAD_IOI + '''
metric = ilab.logit_diff(" Mary", " John")
scores = lab.edge_attribution(clean, corrupt, metric, method="eap")''',
    "graph = scores.show(lab, clean, corrupt, metric, count=12)\ngraph",
]


def test_a_clicked_edge_shows_its_exact_patch_and_the_button_the_circuit(lab_server, chromium_browser):
    server, _ = lab_server
    name = "circuit_graph.ipynb"
    write_notebook(server.root_dir / name, SOURCES)
    nb = LabNotebook.open(chromium_browser, server, name)
    try:
        nb.run_through(1)
        cell = ".jp-Notebook .jp-Cell >> nth=1"
        nb.page.wait_for_selector(f"{cell} >> .interplab-circuit .il-edge", state="attached", timeout=60000)
        top = nb.exec("print(graph.edges[0][0])").strip()
        p = nb.page.evaluate("""(name) => {
            const g = [...document.querySelectorAll('.interplab-circuit .il-edge')]
                .find((e) => e.dataset.edge === name);
            g.scrollIntoView({block: 'center'});
            const line = g.querySelector('.il-edge-line');
            const q = line.getPointAtLength(line.getTotalLength() / 2), m = line.getScreenCTM();
            const x = m.a * q.x + m.c * q.y + m.e, y = m.b * q.x + m.d * q.y + m.f;
            return {x, y, hit: document.elementFromPoint(x, y)?.closest('.il-edge')?.dataset.edge ?? null};
        }""", top)
        assert p["hit"] == top, p
        nb.page.mouse.click(p["x"], p["y"])
        nb.page.wait_for_function("() => !!document.querySelector('.interplab-circuit .il-edge-info')?.dataset.exact",
                                  timeout=120000)
        shown = float(nb.page.evaluate("() => document.querySelector('.interplab-circuit .il-edge-info')"
                                       ".dataset.exact"))
        want = float(nb.exec(f"print(repr(float(lab.edge_patch(clean, corrupt, metric, edges=[{top!r}]).scores[0])))",
                             timeout=120))
        assert shown == pytest.approx(want, abs=1e-5)
        nb.page.locator(".interplab-circuit .il-evaluate").click()
        nb.page.wait_for_function("() => !!document.querySelector('.interplab-circuit .il-circuit')?.dataset"
                                  ".faithfulness", timeout=180000)
        got = float(nb.page.evaluate("() => document.querySelector('.interplab-circuit .il-circuit')"
                                     ".dataset.faithfulness"))
        want = float(nb.exec("print(repr(lab.circuit(clean, corrupt, metric, graph.shown()).faithfulness))",
                             timeout=180))
        assert got == pytest.approx(want, abs=1e-5)
        assert nb.exec("print(len(ilab.attached_hooks()))").strip() == "0"
        assert not nb.page_errors, nb.page_errors
    finally:
        nb.close()

"""Offline HTML for executed notebooks: ``jupyter nbconvert --to interplab_html notebook.ipynb``.

nbconvert's own HTML export loads require.js and the Jupyter widget manager from a CDN, so with no network every
widget output of the page is empty. This exporter (the ``nbconvert.exporters`` entry point ``interplab_html``) is
nbconvert's HTMLExporter without anything fetched from a CDN (require.js, the widget manager, MathJax, mermaid): it
inlines a small runtime (offline.js, ~10 kB) that draws each widget output from the widget state the notebook saved.
interplab's widget code is in that state once (the shared BundleHolder model, interplab/widgets/base.py), so the page
carries it once too. Clicking a heatmap cell of an exact sweep still shows that cell's stored top tokens; other
controls say that the kernel is gone.

A separate top-level package on purpose: nbconvert instantiates every registered exporter whenever it starts (to
list the formats), and importing ``interplab`` itself would load torch each time.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from traitlets import default

__all__ = ["InterplabHTMLExporter", "OFFLINE_JS", "TEMPLATES", "execute"]

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
OFFLINE_JS = HERE / "offline.js"


def _inline_script(text: str) -> str:
    """offline.js as the body of an inline <script>: it must not close the tag or open an HTML comment."""
    low = text.lower()
    if "</script" in low or "<!--" in low:
        raise ValueError(f"{OFFLINE_JS} cannot be inlined: it contains '</script' or '<!--'")
    return text


PLOTLY_MIME = "application/vnd.plotly.v1+json"

# Run after a notebook's last cell: wait for the labs' pending work (a dashboard's sweep goes on after its cell
# returned) and send every widget's final state. nbclient saves only the widget updates it hears while a cell runs,
# so without this an export shows the views as they were when their cell ended ("sweeping...", empty tabs).
SETTLE = """import sys
if "interplab" in sys.modules:
    sys.modules["interplab"].settle()"""


def execute(nb, timeout: int = 600, path: str = ".", **kw):
    """Run notebook `nb` in place with nbclient, as `interplab export --execute` does: every cell, then SETTLE
    (removed again), so the saved widget state is each view's final picture. Raises nbclient's CellExecutionError."""
    import nbformat
    from nbclient import NotebookClient

    nb.cells.append(nbformat.v4.new_code_cell(SETTLE))
    try:
        NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": path}}, **kw).execute()
    finally:
        nb.cells.pop()
    return nb


def with_plotly_divs(nb):
    """A copy of nb whose plotly figures (outputs of mime PLOTLY_MIME, which nbconvert's HTML cannot show) carry an
    HTML form: a div holding the figure as JSON, drawn by offline.js with the plotly of the page's widget code."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY_MIME in data and "text/html" not in data:
                figure = json.dumps(data[PLOTLY_MIME]).replace("</", "<\\/")  # no "</script>" inside the script
                data["text/html"] = (f'<div class="interplab-offline-plotly"><script type="application/json">'
                                     f'{figure}</script></div>')
                del data[PLOTLY_MIME]
    return nb


class InterplabHTMLExporter(HTMLExporter):
    """HTML whose widgets are drawn from the notebook's saved widget state, with no network."""

    export_from_notebook = "HTML, widgets offline (interplab)"

    @default("template_name")
    def _template_name_default(self):
        return "interplab_html"

    @default("extra_template_basedirs")
    def _default_extra_template_basedirs(self):
        return [str(TEMPLATES), os.getcwd()]

    def from_notebook_node(self, nb, resources=None, **kw):
        nb = with_plotly_divs(nb)
        resources = dict(resources or {})
        # plotly figures and no widget code saved in the page (whose plotly draws them): plotly.js itself, once
        resources["interplab_plotly_js"] = (_plotly_js() if _has_figures(nb) and not _holds_widget_code(nb)
                                            else "")
        return super().from_notebook_node(nb, resources, **kw)

    def _init_resources(self, resources):
        resources = super()._init_resources(resources)
        resources["interplab_offline_js"] = _inline_script(OFFLINE_JS.read_text(encoding="utf-8"))
        return resources


def _has_figures(nb) -> bool:
    return any("interplab-offline-plotly" in str(out.get("data", {}).get("text/html", ""))
               for cell in nb.cells for out in cell.get("outputs", []))


def _holds_widget_code(nb) -> bool:
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return any(isinstance(m.get("state", {}).get("code"), str) and m["state"].get("hash") for m in state.values())


def _plotly_js() -> str:
    """The plotly package's own plotly.js (4.8 MB), inlined; '' where plotly is not installed (then the figures
    say they cannot be drawn)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        return ""
    return _inline_script(get_plotlyjs())

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

__all__ = ["InterplabHTMLExporter", "OFFLINE_JS", "TEMPLATES", "UnfinishedViewsError", "execute", "unfinished_views"]

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


class UnfinishedViewsError(ValueError):
    """The notebook's saved widget state holds views caught mid-work: exported, they would stay so for good."""


STATE_MIME = "application/vnd.jupyter.widget-state+json"
BUSY = ("sweeping", "estimating", "estimate shown", "exact: ")  # how a heatmap's status reads while its sweep runs


def unfinished_views(nb) -> list[str]:
    """The saved interplab views still at work ("heatmap: 'sweeping...' (30% done)"): a tool that saves only the
    widget updates it hears while their cell runs (nbclient without interplab's last cell) saved them mid-sweep."""
    state = nb.metadata.get("widgets", {}).get(STATE_MIME, {}).get("state", {})
    out = []
    for model in state.values():
        traits = model.get("state", {})
        if not isinstance(traits, dict) or not any(k.endswith("_view_kind") for k in traits):
            continue  # not an interplab view
        for key, status in traits.items():
            if not (key == "status" or key.endswith(".status")):
                continue
            part = key[: -len("status")]
            progress = traits.get(f"{part}progress")
            working = isinstance(progress, (int, float)) and 0 < progress < 1
            if working or (isinstance(status, str) and status.startswith(BUSY)):
                name = part.rstrip(".") or traits.get("_view_kind", "view")
                done = f" ({progress:.0%} done)" if working else ""
                out.append(f"{name}: {status!r}{done}")
    return out


def check_finished(nb, name: str = "the notebook") -> None:
    """Raise UnfinishedViewsError, saying how to get a final page, when nb's saved views are still at work."""
    busy = unfinished_views(nb)
    if busy:
        raise UnfinishedViewsError(
            f"{name} was saved while {len(busy)} interplab view(s) were still at work ({'; '.join(busy[:3])}): the "
            f"page would show them so for good. Run it with `interplab export {name} --execute` (which waits for "
            f"every view before saving), or run it in Jupyter and save once the views are done.")


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
        name = (resources or {}).get("metadata", {}).get("name")
        check_finished(nb, f"{name}.ipynb" if name else "the notebook")  # a page stuck on "sweeping..." is refused
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

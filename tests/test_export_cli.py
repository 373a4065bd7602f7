"""`interplab export` and the nbconvert exporter's packaging: the command runs a notebook and writes HTML with no CDN
script; nbconvert, which loads every registered exporter when it starts, never imports torch through ours. (The
page drawing the widgets offline in Chromium: tests/e2e/test_export.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd=None, timeout=300):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "interplab", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def test_the_exporter_is_registered_and_importing_it_loads_no_torch():
    code = ("import sys\nfrom nbconvert.exporters import get_exporter, get_export_names\n"
            "cls = get_exporter('interplab_html')\nprint(cls.__module__, 'interplab_html' in get_export_names(),"
            " 'torch' in sys.modules, 'interplab' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:] + "\n(`pip install -e .` registers the entry point)"
    assert out.stdout.split() == ["interplab_export", "True", "False", "False"], out.stdout


def test_export_help_and_missing_notebook(tmp_path):
    out = run("export", "--help")
    assert out.returncode == 0 and "--execute" in out.stdout and "interplab_html" in out.stdout
    out = run("export", str(tmp_path / "nope.ipynb"))
    assert out.returncode == 2 and "no notebook at" in out.stderr


@pytest.mark.slow
def test_export_executes_and_writes_offline_html(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = ("from interplab.views.logits import LogitPanel\n"
            "LogitPanel(series=[{'name': 'c', 'tokens': ['a'], 'probs': [1]}])")
    nb.cells = [nbformat.v4.new_code_cell(cell)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "one.ipynb"
    nbformat.write(nb, src)

    out = run("export", str(src))  # not run: no widget state, said so, still written
    assert out.returncode == 0 and "no saved widget state" in out.stderr, out.stderr[-2000:]

    html = tmp_path / "page.html"
    out = run("export", str(src), "--execute", "-o", str(html))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"wrote {html}" in out.stdout
    text = html.read_text(encoding="utf-8")
    assert "window.__interplab_offline" in text  # the inlined runtime
    assert not re.search(r"<script[^>]+src=", text), "a script fetched from elsewhere"
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "require.min.js", "embed-amd.js"):
        assert cdn not in text.lower(), cdn
    assert text.count("interplab-src-hash: ") == 1  # the widget code once, in the saved state


def saved_mid_sweep(path: Path) -> Path:
    """A notebook as a tool that keeps only the updates heard while each cell ran saves a dashboard whose sweep
    outlived its cell: the saved heatmap says "sweeping..." over a grid of no values."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("dash = lab.show(clean, corrupt, ' Mary', ' John')\ndash")]
    view = {"_view_kind": "composite", "heatmap._view_kind": "heatmap", "heatmap.status": "sweeping...",
            "heatmap.progress": 0.0, "heatmap.values": [[None, None], [None, None]], "logits._view_kind": "logits",
            "logits.status": ""}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0,
                                                                            "state": {"m1": {"state": view}}}}
    nbformat.write(nb, path)
    return path


def test_a_notebook_saved_mid_sweep_is_refused_naming_export_execute(tmp_path, capsys):
    """`jupyter nbconvert --execute` used to save a dashboard mid-sweep (the sweep outlived its cell): exported, it
    was "sweeping..." over a grey grid for good, with no warning. Both ways to export refuse it, saying what to run
    (in this process: the command's own main, and the exporter nbconvert loads)."""
    from interplab.__main__ import main
    from interplab_export import InterplabHTMLExporter, UnfinishedViewsError

    src = saved_mid_sweep(tmp_path / "mid.ipynb")
    assert main(["export", str(src)]) == 1 and not src.with_suffix(".html").exists()
    err = capsys.readouterr().err
    assert "still at work" in err and "heatmap: 'sweeping...'" in err, err
    assert f"interplab export {src} --execute" in err, err
    with pytest.raises(UnfinishedViewsError, match=r"interplab export mid.ipynb --execute"):
        InterplabHTMLExporter().from_notebook_node(nbformat.read(src, as_version=4),
                                                   resources={"metadata": {"name": "mid"}})
    # a progressive sweep part-way (its exact cells streaming in) is refused too
    nb = nbformat.read(src, as_version=4)
    view = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]["m1"]["state"]
    view.update({"heatmap.status": "estimate shown; exact cells follow", "heatmap.progress": 0.4})
    with pytest.raises(UnfinishedViewsError, match=r"40% done"):
        InterplabHTMLExporter().from_notebook_node(nb)
    # finished views export as ever
    view.update({"heatmap.status": "resid_pre patched ...", "heatmap.progress": 0.0,
                 "heatmap.values": [[0.1, 0.2], [0.3, 0.4]]})
    nbformat.write(nb, src)
    assert main(["export", str(src)]) == 0 and src.with_suffix(".html").exists()

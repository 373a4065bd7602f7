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
    cell = "from interplab.views.logits import LogitPanel\nLogitPanel(series=[{'name': 'c', 'tokens': ['a'], 'probs': [1]}])"
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

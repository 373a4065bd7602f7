"""End-to-end fixtures: a real JupyterLab (private dirs, loopback, no token) and Debian's Chromium.

The notebook under test is notebooks/01_ioi_patching.ipynb (its cell defining `explorer` is clicked). The server
and the browser are stopped in the fixtures' finalizers, pass or fail.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from harness import DEFINES_EXPLORER, serving  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "01_ioi_patching.ipynb"


def notebook_under_test() -> pathlib.Path:
    """notebooks/01_ioi_patching.ipynb (it must define `explorer`); INTERPLAB_E2E_NOTEBOOK=path forces another."""
    forced = os.environ.get("INTERPLAB_E2E_NOTEBOOK")
    if forced:
        return pathlib.Path(forced).resolve()
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert any(c.cell_type == "code" and re.search(DEFINES_EXPLORER, c.source, re.M) for c in nb.cells), \
        f"{NOTEBOOK} has no cell defining `explorer`: the end-to-end test clicks that widget"
    return NOTEBOOK


@pytest.fixture(scope="session")
def chromium_browser(chromium):
    return chromium  # tests/conftest.py


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, chromium_browser):
    """JupyterLab serving a tmp copy of the notebook under test; yields (server, notebook file name)."""
    nb = notebook_under_test()
    with serving(nb, tmp_path_factory, "lab") as server:
        yield server, nb.name

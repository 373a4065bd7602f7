"""The student route, in a fresh environment: the offline wheelhouse recipe of docs/teaching/INSTALL.md, run as
written, then `interplab check` and `interplab lab` from that environment's own console script (no bash).

One virtual environment serves every test here (a module-scoped fixture): a wheel built from this checkout (offline,
as tests/test_install.py builds it), `pip download` of it with the `lab` extra and torch 2.13.0 into a wheelhouse
(the only step that needs a package index), then `pip install --no-index --find-links wheelhouse "interplab[lab]"`
with pip's configuration ignored and every index and proxy unreachable. The installs take a few minutes.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from _processes import read_url

ROOT = Path(__file__).resolve().parent.parent
INSTALL_DOC = ROOT / "docs" / "teaching" / "INSTALL.md"
NOTEBOOK = "00_primer.ipynb"  # what `interplab lab` opens: the run sheet's first

# The recipe, exactly as docs/teaching/INSTALL.md gives it (the first test checks the page still says so).
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
WHEEL_ARG = "./interplab-0.1.0-py3-none-any.whl[lab]"  # the wheel the teacher built, as the page names it
DOWNLOAD = (f'python -m pip download "{WHEEL_ARG}" torch==2.13.0 --extra-index-url ' + TORCH_INDEX +
            " --only-binary=:all: --retries 1 -d wheelhouse")
INSTALL = 'python -m pip install --no-index --find-links wheelhouse "interplab[lab]"'
# the routes with network: the wheel (INSTALL.md) and a checkout (README.md); torch's line comes first in both
TORCH = "python -m pip install torch==2.13.0 --index-url " + TORCH_INDEX
FROM_WHEEL = f'python -m pip install "{WHEEL_ARG}"'
FROM_CHECKOUT = 'pip install ".[lab]"'
TEST_TOOLS = ("pytest", "playwright", "ruff", "nnsight", "marimo", "hatchling", "uv")  # the dev extra's tools


def test_the_teaching_doc_gives_the_recipe_this_file_runs():
    doc = INSTALL_DOC.read_text(encoding="utf-8")
    assert doc.count(DOWNLOAD) >= 2 and doc.count(INSTALL) >= 2, "the Linux/macOS and PowerShell recipes"
    assert doc.count(FROM_WHEEL) >= 2 and doc.count(TORCH) >= 2
    assert "interplab check" in doc and "tests/test_student_route.py" in doc
    assert FROM_CHECKOUT in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_page_sends_students_to_a_release_that_does_not_exist():
    """`pip install interplab` from the package index works only once interplab is released: every page that
    names it says so next to it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.search(r"pip install -?q? ?\"?interplab(\[\w+\])?\"?(\s|$|`)", line):
                near = " ".join(lines[max(0, i - 3):i + 3]).lower()
                said = ("once" in near and "releas" in near) or "not on pypi yet" in near
                assert said, f"{page.relative_to(ROOT)}:{i + 1}: {line.strip()}"


def _build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built by hatchling from the dev extra (offline, no build isolation)."""
    out.mkdir(parents=True)
    code = "import sys; from hatchling.build import build_wheel; print(build_wheel(sys.argv[1]))"
    res = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return out / res.stdout.split()[-1]


def _clean_env() -> dict:
    """This process's environment without what would make the new venv see this checkout or the dev venv."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "JUPYTER_TOKEN", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _offline_env(root: Path, bin_dir: Path) -> dict:
    """A laptop in a room without network: pip's config files and PIP_* settings ignored, every proxy a closed port
    (so neither pip nor the Hugging Face hub reach anything), an empty Hugging Face cache, Jupyter's own folders
    fresh, and the venv activated (its bin first on PATH)."""
    bogus = "http://127.0.0.1:9"
    env = {k: v for k, v in _clean_env().items()
           if not k.startswith(("PIP_", "UV_", "HF_", "TRANSFORMERS_")) and "proxy" not in k.lower()}
    # (no NO_PROXY for loopback either: `interplab lab` polls its own server past any proxy)
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", HTTP_PROXY=bogus, HTTPS_PROXY=bogus,
               http_proxy=bogus, https_proxy=bogus,
               HF_HOME=str(root / "hf-home"),
               JUPYTER_CONFIG_DIR=str(root / "jupyter" / "config"), JUPYTER_DATA_DIR=str(root / "jupyter" / "data"),
               JUPYTER_RUNTIME_DIR=str(root / "jupyter" / "runtime"), IPYTHONDIR=str(root / "ipython"),
               VIRTUAL_ENV=str(bin_dir.parent), PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    return env


def _recipe(command: str, python: Path, wheel: Path | None = None) -> list[str]:
    """A documented command as an argument list, run by the venv's python: this checkout's wheel where the page names
    the teacher's file, and no --index-url / --extra-index-url: this machine's pip configuration supplies torch
    2.13.0's CPU build from local disk (as in CI)."""
    args = shlex.split(command)
    if args[0] == "pip":
        args = ["python", "-m", *args]
    assert args[:3] == ["python", "-m", "pip"]
    args[0] = str(python)
    if wheel is not None:
        args = [f"{wheel}[lab]" if a == WHEEL_ARG else a for a in args]
    for flag in ("--extra-index-url", "--index-url"):
        if flag in args:
            i = args.index(flag)
            del args[i:i + 2]
    return args


def _run(args, *, cwd, env, timeout, what):
    start = time.monotonic()
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{what} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res, time.monotonic() - start


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A fresh venv with the student install, made by the wheelhouse recipe; its paths and offline environment."""
    root = tmp_path_factory.mktemp("student-route")
    started = time.monotonic()
    wheel = _build_wheel(root / "dist")
    venv = root / "interplab-env"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=_clean_env(), timeout=300, what="python -m venv")
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    # 1. where there is network (pip's cache is on: a second run downloads little)
    _, download_s = _run(_recipe(DOWNLOAD, python, wheel), cwd=root, env=_clean_env(), timeout=1800,
                         what="pip download (needs the package index)")
    # 2. in the room: nothing reachable but the wheelhouse folder
    offline = _offline_env(root, bin_dir)
    _, install_s = _run(_recipe(INSTALL, python), cwd=root, env=offline, timeout=1800,
                        what="pip install --no-index from the wheelhouse")
    work = root / "work"  # where a student starts `interplab lab`: the notebooks are copied here
    work.mkdir()
    print(f"\nstudent route: wheelhouse downloaded in {download_s:.0f} s, installed offline in {install_s:.0f} s, "
          f"{time.monotonic() - started:.0f} s in all")
    return SimpleNamespace(root=root, wheelhouse=root / "wheelhouse", python=python, bin=bin_dir, env=offline,
                           wheel=wheel,
                           work=work, interplab=bin_dir / ("interplab.exe" if os.name == "nt" else "interplab"))


def _network_route(root: Path, commands: list[str], wheel: Path | None, cwd: Path) -> Path:
    """A fresh venv made by documented commands with network (pip's cache warm from the wheelhouse download); its
    `interplab` console script."""
    venv = root / "env"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root, env=_clean_env(), timeout=300, what="python -m venv")
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    env = {**_clean_env(), "VIRTUAL_ENV": str(venv), "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])}
    for command in commands:
        _run(_recipe(command, python, wheel), cwd=cwd, env=env, timeout=1800, what=command)
    return bin_dir / ("interplab.exe" if os.name == "nt" else "interplab")


@pytest.mark.slow
@pytest.mark.parametrize("route", ["the wheel (INSTALL.md)", "a checkout (README.md)"])
def test_the_routes_with_network_install_a_ready_lab(route, student, tmp_path):
    """The two install lines that work before a release, each in a fresh environment, then `interplab check`
    (offline, like the student's)."""
    if route.startswith("the wheel"):
        interplab = _network_route(tmp_path, [TORCH, FROM_WHEEL], student.wheel, tmp_path)
    else:
        interplab = _network_route(tmp_path, [TORCH, FROM_CHECKOUT], None, ROOT)
    res, _ = _run([str(interplab), "check"], cwd=tmp_path, env={**student.env, "PATH": os.pathsep.join(
        [str(interplab.parent), os.environ["PATH"]]), "VIRTUAL_ENV": str(interplab.parent.parent)}, timeout=600,
        what=f"interplab check after installing from {route}")
    assert res.stdout.splitlines()[-1].startswith("ready"), res.stdout


@pytest.mark.slow
def test_the_wheelhouse_holds_wheels_only_and_the_cpu_torch(student):
    files = sorted(p.name for p in student.wheelhouse.iterdir())
    assert "interplab-0.1.0-py3-none-any.whl" in files
    assert all(name.endswith(".whl") for name in files), "an sdist would need building on the offline laptop"
    torch_wheels = [name for name in files if name.startswith("torch-")]
    assert len(torch_wheels) == 1 and torch_wheels[0].startswith("torch-2.13.0"), torch_wheels
    if sys.platform.startswith("linux"):
        assert "+cpu" in torch_wheels[0], "the CPU build, not PyPI's CUDA build (about 3 GB with its nvidia wheels)"
        assert not [name for name in files if name.startswith("nvidia")]


@pytest.mark.slow
def test_the_student_environment_is_the_lab_without_test_tools(student):
    code = ("import importlib.util as u, json, interplab, jupyterlab, ipykernel; "
            f"print(json.dumps({{'interplab': interplab.__file__, 'found': [m for m in {TEST_TOOLS!r} "
            "if u.find_spec(m)]}))")
    res, _ = _run([str(student.python), "-c", code], cwd=student.work, env=student.env, timeout=300,
                  what="importing the lab")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert Path(out["interplab"]).resolve().is_relative_to(student.root.resolve()), "imported from the checkout"
    assert out["found"] == [], f"test tools in the student environment: {out['found']}"
    _run([str(student.python), "-m", "pip", "check"], cwd=student.work, env=student.env, timeout=300,
         what="pip check (every requirement met)")


@pytest.mark.slow
def test_interplab_check_says_ready_offline(student):
    res, seconds = _run([str(student.interplab), "check"], cwd=student.work, env=student.env, timeout=600,
                        what="interplab check")
    lines = res.stdout.splitlines()
    assert lines[-1].startswith("ready"), res.stdout
    assert not [line for line in lines if line.startswith("FAIL")], res.stdout
    assert re.search(r"restores 1\.0000 \(must be 1\)", res.stdout), res.stdout
    assert "torch 2.13.0" in res.stdout and "interplab 0.1.0" in res.stdout
    print(f"\ninterplab check: {seconds:.1f} s")


def _wait_for(url: str, proc, deadline: float) -> None:
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"the server never answered {url.split('?')[0]} (exit code {proc.poll()})")


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return json.load(r)


@pytest.mark.slow
def test_interplab_lab_serves_the_run_sheets_first_notebook(student):
    start = time.monotonic()
    proc = subprocess.Popen([str(student.interplab), "lab", "--port", "0"], cwd=student.work, env=student.env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        url, said = read_url(proc, time.monotonic() + 300)
        assert "JupyterLab is ready" in said, said  # printed once the server answers (else after 120 s: not yet)
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query).get("token", [""])[0]
        assert len(token) >= 24 and parts.path == f"/lab/tree/{NOTEBOOK}", url
        base = f"http://127.0.0.1:{parts.port}"  # loopback, whatever host name the URL carries
        _wait_for(f"{base}/api/status?token={token}", proc, time.monotonic() + 300)
        ready_s = time.monotonic() - start
        listing = _get_json(f"{base}/api/contents?token={token}")
        names = {item["name"] for item in listing["content"]}
        assert NOTEBOOK in names and "build.py" not in names, names
        assert sorted(p.name for p in (student.work / "interplab-notebooks").glob("*.ipynb")) == sorted(
            n for n in names if n.endswith(".ipynb")), "the server shows the notebooks copied to ./interplab-notebooks"
        nb = _get_json(f"{base}/api/contents/{NOTEBOOK}?token={token}")
        assert nb["type"] == "notebook" and nb["format"] == "json", {k: nb[k] for k in ("type", "format")}
        cells = nb["content"]["cells"]
        assert nb["content"]["nbformat"] == 4 and cells and any("interplab" in "".join(c["source"]) for c in cells)
        assert "python3" in _get_json(f"{base}/api/kernelspecs?token={token}")["kernelspecs"]
        with urllib.request.urlopen(f"{base}{parts.path}?token={token}", timeout=30) as r:
            assert r.status == 200  # the page the printed URL opens
        print(f"\ninterplab lab: serving after {ready_s:.1f} s")
    finally:
        proc.terminate()  # `interplab lab` passes it on to Jupyter, which shuts down
        try:
            proc.wait(60)
        finally:
            if hasattr(os, "killpg"):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # anything of its session left behind
                except ProcessLookupError:
                    pass
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"{base}/api/status", timeout=5)  # the server is gone


COLAB_RUNNER = """
import json
import sys

import nbformat
from nbclient import NotebookClient

# the cell in a real kernel of the student's environment, as a notebook's one cell, then a cell that lists every
# widget still alive whose `error` trait is set (a view whose job failed says so in its frame)
WIDGET_ERRORS = (
    "import json\\n"
    "from ipywidgets.widgets import widget\\n"
    "print('WIDGET ERRORS', json.dumps([[type(w).__name__, str(w.error)[:300]]"
    " for w in list(widget._instances.values()) if getattr(w, 'error', '')]))\\n")
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(open(sys.argv[1]).read()),
                                     nbformat.v4.new_code_cell(WIDGET_ERRORS)])
NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True).execute()
outputs = nb.cells[0].outputs
views = [o for o in outputs if o.output_type in ("display_data", "execute_result")
         and "application/vnd.jupyter.widget-view+json" in o.data]
colab = [o for o in views if o.get("metadata", {}).get("application/vnd.jupyter.widget-view+json", {})
         .get("colab", {}).get("custom_widget_manager", {}).get("url")]
listed = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.output_type == "stream")
print("\\n".join(o.get("text", "") for o in outputs if o.output_type == "stream"))
print("COLAB SUMMARY", json.dumps({
    "errors": [o.ename + ": " + o.evalue for c in nb.cells for o in c.outputs if o.output_type == "error"],
    "views": len(views), "colab_manager": len(colab),
    "widget_errors": json.loads(listed.split("WIDGET ERRORS", 1)[1]) if "WIDGET ERRORS" in listed else ["not listed"],
}))
"""

# google.colab.output as Colab has it, as far as widgets go: enable_custom_widget_manager() installs the manager and
# sets _widgets._installed_url, which anywidget reads into every view's display metadata.
COLAB_OUTPUT_STUB = """
import types

MANAGER_URL = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/manager.min.js"
_widgets = types.SimpleNamespace(_installed_url=None)


def enable_custom_widget_manager():
    _widgets._installed_url = MANAGER_URL
"""


@pytest.mark.slow
def test_the_colab_cell_runs_notebook_01_without_its_answers(student, tmp_path):
    """COLAB.md's one cell, as written, in the student's fresh environment (the wheel installed offline; its own
    `!pip install` of the uploaded wheel then finds everything in place): it runs notebook 01 from the wheel cell by
    cell with the answer cells left out, and no cell fails. Colab itself cannot be reached from here: its module
    `google.colab.output` is a stub with what anywidget uses of it (enable_custom_widget_manager and the manager's
    URL), so every view is displayed as on Colab. The test fails on any error output (a display that raises
    included), on a view whose `error` trait is set, and when interplab's views do not reach the display with
    Colab's widget-manager metadata."""
    block = (ROOT / "docs/teaching/COLAB.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert "!pip install -q ./interplab-0.1.0-py3-none-any.whl" in block and "# ANSWER" in block
    shutil.copy(student.wheel, tmp_path / "interplab-0.1.0-py3-none-any.whl")
    res, seconds, summary = run_colab_cell(block, student.python, {**student.env, "MPLBACKEND": "Agg"}, tmp_path)
    assert not summary["errors"], summary["errors"]
    assert not summary["widget_errors"], summary["widget_errors"]
    # interplab's five views (two heatmaps, attention, direct attribution, the dashboard), each with Colab's manager;
    # a progress bar (a plain ipywidget, which Colab draws itself) may add a view without it
    assert summary["colab_manager"] >= 5, summary
    assert "Traceback" not in res.stdout, res.stdout[-3000:]
    assert "<- S2: differs" in res.stdout  # notebook 01's first code cell printed its table
    print(f"\nCOLAB.md's cell: notebook 01 without its answers in {seconds:.0f} s, {summary['views']} views")


def run_colab_cell(block: str, python, env: dict, work: Path):
    """COLAB.md's cell in a kernel of `python`, with the google.colab.output stub first on the path: the run, its
    seconds and the runner's summary (errors, views, views with Colab's manager, widgets with an error)."""
    colab = work / "stubs" / "google" / "colab"  # a namespace package `google`: protobuf's stays importable
    colab.mkdir(parents=True)
    (colab / "__init__.py").write_text("")
    (colab / "output.py").write_text(COLAB_OUTPUT_STUB)
    cell = work / "colab_cell.py"
    # each notebook cell's error is reported by run_cell, not raised: fail the outer cell on the first one
    cell.write_text(block.replace("get_ipython().run_cell(source)",
                                  "assert get_ipython().run_cell(source).success, source[:300]"))
    runner = work / "runner.py"
    runner.write_text(COLAB_RUNNER)
    res, seconds = _run([str(python), str(runner), str(cell)], cwd=work,
                        env={**env, "PYTHONPATH": str(work / "stubs")}, timeout=900, what="COLAB.md's cell")
    return res, seconds, json.loads(res.stdout.split("COLAB SUMMARY", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("kind, target, only_there", [
    ("windows", "x86_64-pc-windows-msvc", "pywinpty"),
    ("macos-arm64", "aarch64-apple-darwin", "appnope"),
], ids=["windows", "macos-arm64"])
def test_the_wheelhouse_script_makes_a_complete_wheelhouse_for_another_kind_of_laptop(kind, target, only_there,
                                                                                       tmp_path):
    """scripts/wheelhouse.sh, run here (Linux), makes the wheelhouse of another kind of laptop (INSTALL.md): every
    wheel the student install needs on that platform, its platform-only packages included, so that "interplab[lab]"
    resolves for that platform from the folder alone, with no index (uv's resolver, told the target platform). The
    same check finds nothing in an empty folder. (Installing it needs a laptop of that kind: not tested here.)"""
    wheel = _build_wheel(tmp_path / "dist")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "wheelhouse.sh", repo / "scripts")
    (repo / "dist").mkdir()
    shutil.copy(wheel, repo / "dist")
    bin_dir = str(Path(sys.executable).parent)
    env = {**_clean_env(), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "OUT": str(tmp_path / "wh")}
    run = subprocess.run(["bash", "scripts/wheelhouse.sh", kind, "3.11"], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    (tmp_path / "want.in").write_text("interplab[lab]\n")
    env["MACOSX_DEPLOYMENT_TARGET"] = "14.0"  # a Mac on macOS 14 or newer (torch 2.13's wheels need it); else unused
    (tmp_path / "empty").mkdir()
    for folder, resolves in ((tmp_path / "wh", True), (tmp_path / "empty", False)):
        res = subprocess.run([str(Path(bin_dir) / "uv"), "pip", "compile", "-q", "--no-index", "--find-links",
                              str(folder), "--only-binary", ":all:", "--python-platform", target, "--python-version",
                              "3.11", str(tmp_path / "want.in")], env=env, capture_output=True, text=True, timeout=300)
        assert (res.returncode == 0) == resolves, res.stderr[-2000:]
        if resolves:
            pins = {line.split("==")[0] for line in res.stdout.splitlines() if "==" in line}
            assert {"interplab", "torch", "jupyterlab", only_there} <= pins, sorted(pins)
            assert kind != "windows" or "ptyprocess" not in pins, "a Linux-only package in a Windows wheelhouse"

"""From pip install to a relaunch: what the wheel and sdist hold, what `pip install interplab` alone gives, the set-up
script (offline relaunch, the torch build it picks), the lowest-versions check, and the README for pip users."""

import email
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """The wheel and sdist, built from this checkout by hatchling (from the dev extra: offline, no build isolation)."""
    out = tmp_path_factory.mktemp("dist")
    code = ("import sys; from hatchling.build import build_wheel, build_sdist; "
            "print(build_wheel(sys.argv[1])); print(build_sdist(sys.argv[1]))")
    res = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    wheel, sdist = (out / name for name in res.stdout.split())
    return wheel, sdist


def test_wheel_holds_the_license_the_bundle_and_only_the_notebooks(dists):
    wheel, _ = dists
    names = zipfile.ZipFile(wheel).namelist()
    assert "interplab-0.1.0.dist-info/licenses/LICENSE" in names
    assert "interplab/static/widgets.js" in names
    # every view's _esm (the loader) and the offline HTML exporter with its runtime, template and entry point
    assert {"interplab/static/loader.js", "interplab_export/__init__.py", "interplab_export/offline.js",
            "interplab_export/templates/interplab_html/index.html.j2"} <= set(names)
    entry = zipfile.ZipFile(wheel).read("interplab-0.1.0.dist-info/entry_points.txt").decode()
    assert "interplab_html = interplab_export:InterplabHTMLExporter" in entry
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("interplab/notebooks/"))
    assert shipped == NOTEBOOKS, "the wheel must ship exactly notebooks/*.ipynb (see force-include in pyproject.toml)"
    assert not [n for n in names if "__pycache__" in n or "/sources/" in n or n.endswith((".pyc", "build.py"))]


def test_sdist_holds_the_license(dists):
    import tarfile

    _, sdist = dists
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert "interplab-0.1.0/LICENSE" in names and "interplab-0.1.0/pyproject.toml" in names
    assert not [n for n in names if "/.venv/" in n or "/node_modules/" in n]


def test_plain_install_is_the_library_and_widgets_and_the_lab_extra_adds_jupyterlab(dists):
    wheel, _ = dists
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read("interplab-0.1.0.dist-info/METADATA"))
    assert meta["License-Expression"] == "MIT"
    requires = [r.replace("'", '"') for r in meta.get_all("Requires-Dist")]
    plain = {re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in requires if "extra ==" not in r}
    assert {"torch", "transformers", "anywidget", "ipywidgets"} <= plain and "jupyterlab" not in plain
    assert "lab" in meta.get_all("Provides-Extra")
    lab = [r for r in requires if 'extra == "lab"' in r]
    assert any(r.startswith("jupyterlab") for r in lab) and any(r.startswith("ipykernel") for r in lab)
    dev = [r for r in requires if 'extra == "dev"' in r]  # (hatchling inlines "interplab[lab]" into dev)
    assert any(r.startswith(("interplab[lab]", "jupyterlab")) for r in dev), "dev must include the lab extra"


def test_lab_without_jupyterlab_says_what_to_install_before_writing_anything(dists, tmp_path):
    wheel, _ = dists
    site = tmp_path / "site"  # the wheel unpacked: a pip install, without this checkout's notebooks/ next to it
    zipfile.ZipFile(wheel).extractall(site)
    hidden = tmp_path / "no-jupyter"  # modules that fail to import, as when the lab extra is not installed
    for mod in ("jupyterlab", "jupyter_server", "jupyter"):
        (hidden / mod).mkdir(parents=True)
        (hidden / mod / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{mod}'\")\n")
        (hidden / mod / "__main__.py").write_text("import sys; sys.exit(\"No module named 'jupyter'\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(site)]), "HF_HUB_OFFLINE": "1"}
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, "-m", "interplab", "lab"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert 'pip install "interplab[lab]"' in out.stderr
    assert "http" not in out.stdout, "no URL for a server that cannot start"
    assert list(work.iterdir()) == [], "nothing may be written before the check"
    # with JupyterLab there, the notebooks users see are the notebooks only (no build.py, no __pycache__)
    env["PYTHONPATH"] = str(site)
    code = "from interplab.__main__ import notebooks_dir; print(notebooks_dir())"
    out = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert Path(out.stdout.split()[-1]) == work / "interplab-notebooks"
    assert sorted(p.name for p in (work / "interplab-notebooks").iterdir()) == NOTEBOOKS


# ---- scripts/setup.sh: offline relaunch, the torch build for this machine ----------------------------------------

def _offline_env(tmp_path) -> dict:
    """No package index can be reached: pip's config ignored, its index a closed port, any proxy bogus."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and "proxy" not in k.lower()}
    bogus = "http://127.0.0.1:9"
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"{bogus}/simple", PIP_NO_INDEX="1", PIP_RETRIES="0",
               PIP_LOG=str(tmp_path / "pip.log"), HTTP_PROXY=bogus, HTTPS_PROXY=bogus, http_proxy=bogus,
               https_proxy=bogus)
    return env


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="checks the .venv that scripts/setup.sh made (run by bash scripts/test.sh)")
def test_lab_relaunches_offline_without_running_pip(tmp_path):
    first = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]  # (installs only if not current)
    out = subprocess.run(["bash", "scripts/lab.sh", "--headless"], cwd=ROOT, env=_offline_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "up to date" in out.stdout and "1 = clean behaviour" in out.stdout
    assert not (tmp_path / "pip.log").exists(), "pip ran: " + (tmp_path / "pip.log").read_text()[-2000:]


def _torch_choice(tmp_path, nvidia_smi_rc=None, **env) -> str:
    bin_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    path = os.environ["PATH"]
    if nvidia_smi_rc is None:  # no nvidia-smi anywhere on PATH
        path = os.pathsep.join(d for d in path.split(os.pathsep) if not (Path(d) / "nvidia-smi").exists())
    else:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\necho 'GPU 0: NVIDIA H100'\nexit {nvidia_smi_rc}\n")
        fake.chmod(0o755)
    full = {**_offline_env(tmp_path), "PATH": os.pathsep.join([str(bin_dir), path]), **env}
    out = subprocess.run(["bash", "scripts/setup.sh", "--torch-choice"], cwd=ROOT, env=full, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_setup_picks_the_cpu_build_without_an_nvidia_gpu(tmp_path):
    for rc in (None, 9):  # nvidia-smi absent, or present but failing (no driver)
        said = _torch_choice(tmp_path, rc)
        assert "cpu build" in said and "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in said
    said = _torch_choice(tmp_path, 0)
    assert "cuda build" in said and "index-url" not in said
    assert "cpu build" in _torch_choice(tmp_path, 0, TORCH="cpu")  # the override
    assert not (tmp_path / "pip.log").exists()


# ---- the lowest allowed versions are checked -------------------------------------------------------------------

def _lower_bounds() -> dict[str, str]:
    """{name: lower bound} of [project] dependencies (a regex: tomllib is Python 3.11+)."""
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)', block)}


def test_ci_checks_the_lowest_allowed_versions():
    ci = (ROOT / ".ci/run").read_text()
    assert "scripts/lowest.sh" in ci
    script = (ROOT / "scripts/lowest.sh").read_text()
    assert "--resolution lowest-direct" in script and "tests/core" in script
    assert set(_lower_bounds()) >= {"torch", "transformers", "tokenizers", "safetensors", "numpy"}


@pytest.mark.skipif(not os.environ.get("INTERPLAB_LOWEST"), reason="only in scripts/lowest.sh's environment")
def test_this_environment_holds_the_declared_lowest_versions():
    from importlib.metadata import version

    from packaging.version import Version

    bounds = _lower_bounds()
    assert "torch" in bounds
    for name, low in bounds.items():  # torch too (scripts/lowest.sh installs its floor; "+cpu" is its build)
        got = Version(version(name).split("+")[0])
        assert got == Version(low), f"{name} {version(name)} is not the declared lowest {low}"


# ---- the README: pip users, the torch build, the command and its flags ------------------------------------------

def test_readme_tells_pip_users_and_documents_every_flag():
    from interplab.__main__ import build_parser

    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^bash scripts/lab\.sh +# ", readme, re.M) and re.search(r"^bash scripts/test\.sh +# ", readme,
                                                                               re.M)
    assert 'pip install ".[lab]"' in readme and 'pip install "interplab[lab]"' in readme  # today's, once released
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    ap = build_parser()
    commands = next(a for a in ap._actions if a.dest == "cmd").choices
    for name, parser in commands.items():
        assert f"interplab {name}" in readme
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in readme, f"README does not explain interplab {name} {flag}"


def test_license_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text


def test_a_release_is_one_tag_that_builds_checks_and_publishes():
    """.github/workflows/release.yml: on a version tag, the sdist and wheel are built and checked (twine, and the
    wheel installed fresh must say ready), then published by trusted publishing (no stored token)."""
    import yaml

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    on = flow.get("on", flow.get(True))  # (YAML 1.1 reads a bare `on` as True)
    assert on["push"]["tags"] == ["v*"]
    build = " ".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in flow["jobs"]["build"]["steps"])
    for step in ("python -m build", "twine check --strict dist/*", "interplab check", "pyproject.toml"):
        assert step in build, step
    publish = flow["jobs"]["publish"]
    assert publish["needs"] == "build" and publish["permissions"] == {"id-token": "write"}
    assert any(str(s.get("uses", "")).startswith("pypa/gh-action-pypi-publish") for s in publish["steps"])
    assert not any("password" in str(s.get("with", {})) for s in publish["steps"]), "trusted publishing: no token"

"""The seed 000, 001 and 003 example scripts run and pass their own checks (002's: tests/test_examples_002.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ("000", "001", "003")
SCRIPTS = sorted(p for seed in SEEDS for p in (ROOT / "examples" / "seeds").glob(f"{seed}_*.py"))


@pytest.fixture(scope="module")
def procs():
    """Start every script at once (most of each one's time is importing torch), then let each test wait for its own."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    started = {p.name: subprocess.Popen([sys.executable, str(p)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for p in SCRIPTS}
    yield started
    for proc in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_scripts_exist():
    assert sorted(p.name[:3] for p in SCRIPTS) == list(SEEDS)  # one script per seed


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_seed_script_runs(script, procs):
    out, err = procs[script.name].communicate(timeout=300)
    assert procs[script.name].returncode == 0, f"{script.name} failed:\n{out[-3000:]}\n{err[-3000:]}"
    assert "all checks passed" in out

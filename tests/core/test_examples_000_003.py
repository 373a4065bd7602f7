"""The seed 000 and 003 example scripts run and pass their own checks (other seeds' scripts are tested elsewhere)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for pat in ("000_*.py", "003_*.py") for p in (ROOT / "examples" / "seeds").glob(pat))


def test_scripts_exist():
    assert {p.name[:3] for p in SCRIPTS} == {"000", "003"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_seed_script_runs(script):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "all checks passed" in proc.stdout

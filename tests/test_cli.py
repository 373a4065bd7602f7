"""The command line: a headless sweep as JSON equals the same sweep through the API; the headless demo runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import interplab as ilab

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "interplab", *args], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=300)


def test_sweep_json_matches_the_api():
    out = run_cli("sweep", "--json", "--site", "z", "--by", "layer,head")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    lab = ilab.Lab.load("ioi-tiny")
    from interplab.__main__ import CLEAN, CORRUPT

    res = lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head"), ilab.logit_diff(" Mary", " John"), progress=False)
    assert data["by"] == ["layer", "head"] and data["site"] == "z"
    assert torch.allclose(torch.tensor(data["values"]), res.values, atol=1e-5)


def test_headless_lab_prints_the_ioi_result():
    out = run_cli("lab", "--headless")
    assert out.returncode == 0, out.stderr
    assert "1 = clean behaviour" in out.stdout and "layer |" in out.stdout


def test_bad_input_is_one_clear_line():
    out = run_cli("sweep", "--json", "--answer", " Marylebone Street")
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]  # (transformers may print a weight-loading bar before it)
    assert last.startswith("error:") and "single" in last and "Traceback" not in out.stderr

"""The seed-002 example script runs and its own assertions hold (steering, projection, cap, positions, head, expert,
sampler, bound edits, vectors)."""

import runpy
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "examples" / "seeds").glob("002_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_seed_002_example_runs(script, capsys):
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "all examples passed" in out


def test_there_is_a_002_example():
    assert SCRIPTS, "examples/seeds/002_*.py is missing"

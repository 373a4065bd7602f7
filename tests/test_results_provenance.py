"""Results docs cannot go stale silently: every section of benchmarks/RESULTS.md, and benchmarks/RESULTS_ATP.md,
carries a provenance line (benchmarks/results_file.py writes it: library versions and, where the figures depend on
a shipped model's weights, their hash). A hash that differs from the shipped weights' fails here, naming the
benchmark to re-run."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from interplab.zoo import EMBEDDED

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
LINE = re.compile(r"^Provenance: interplab (\S+), torch ([^,]+), transformers ([^;]+); (.*)$", re.M)
WEIGHTS = re.compile(r"^(\S+) weights sha256:([0-9a-f]{16}) \(the figures depend on them\)\.$")


def _sections() -> list[tuple[str, str]]:
    """(where, text) of every results section: RESULTS.md's "## " sections, and RESULTS_ATP.md whole."""
    text = (BENCH / "RESULTS.md").read_text()
    parts = re.split(r"^(?=## )", text, flags=re.M)[1:]
    found = [(f"RESULTS.md, {p.splitlines()[0][3:]}", p) for p in parts]
    return found + [("RESULTS_ATP.md", (BENCH / "RESULTS_ATP.md").read_text())]


def _shipped_hash(model: str) -> str:
    # computed here, not by results_file.weights_hash: the check must not share the writer's code
    return hashlib.sha256((EMBEDDED[model] / "model.safetensors").read_bytes()).hexdigest()[:16]


@pytest.mark.parametrize("where, text", _sections(), ids=lambda x: x if len(x) < 60 else None)
def test_every_results_section_says_what_it_was_measured_on(where, text):
    lines = LINE.findall(text)
    assert len(lines) == 1, f"{where}: needs exactly one provenance line (benchmarks/results_file.py writes it)"
    _, _, _, weights = lines[0]
    if weights.startswith("the figures depend on no shipped model's weights"):
        return
    m = WEIGHTS.match(weights)
    assert m, f"{where}: unreadable provenance {weights!r}"
    model, measured = m.groups()
    assert model in EMBEDDED, f"{where}: names {model!r}, which interplab does not ship"
    assert measured == _shipped_hash(model), (
        f"{where} was measured on other {model} weights (sha256:{measured}; shipped sha256:{_shipped_hash(model)}): "
        f"its figures are stale. Re-run the benchmark its section names and commit the new figures.")


def test_a_changed_hash_is_caught(tmp_path):
    """The check fails on a section measured on other weights (the same rule, on a copy with one digit changed)."""
    shipped = _shipped_hash("ioi-tiny")
    other = ("0" if shipped[0] != "0" else "1") + shipped[1:]
    text = (f"Provenance: interplab 0.1.0, torch 2, transformers 5; ioi-tiny weights sha256:{other} (the figures "
            f"depend on them).")
    with pytest.raises(AssertionError, match="stale"):
        test_every_results_section_says_what_it_was_measured_on("a copy", text)

"""benchmarks/RESULTS.md is shared: each benchmark owns its own "## <title>" sections and replaces only those.

Every section (and benchmarks/RESULTS_ATP.md) carries a provenance line: the library versions it was measured with
and, where its figures depend on the values of a shipped model's weights, that model's hash.
tests/test_results_provenance.py fails when the shipped weights no longer have that hash: the figures are stale.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
PROVENANCE = "Provenance:"  # the line's first word, read back by the test


def weights_hash(model: str = "ioi-tiny") -> str:
    """The first 16 hex digits of the sha256 of a shipped model's weights file."""
    from interplab.zoo import EMBEDDED

    return hashlib.sha256((EMBEDDED[model] / "model.safetensors").read_bytes()).hexdigest()[:16]


def provenance(weights: str | None = None) -> str:
    """The provenance line: interplab, torch and transformers versions, and `weights`' hash (a shipped model's name)
    when the figures depend on its weights' values (None: they depend on shapes and seeds only)."""
    import torch
    import transformers

    import interplab

    line = (f"{PROVENANCE} interplab {interplab.__version__}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}; ")
    if weights is None:
        return line + "the figures depend on no shipped model's weights."
    return line + f"{weights} weights sha256:{weights_hash(weights)} (the figures depend on them)."


def write_section(title: str, lines: list[str], path: Path = RESULTS, weights: str | None = None) -> Path:
    """Replace the section headed "## <title>" (up to the next "## ") with these lines and the provenance line, or
    append it. weights: the shipped model whose weights the figures depend on, if any (see provenance)."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = "\n".join([f"## {title}", "", *lines, "", provenance(weights), ""])
    start = text.find(f"\n## {title}")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + section + (text[end:] if end >= 0 else "")
    path.write_text(text)
    return path

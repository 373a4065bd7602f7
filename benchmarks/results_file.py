"""benchmarks/RESULTS.md is shared: each benchmark owns its own "## <title>" sections and replaces only those."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(title: str, lines: list[str], path: Path = RESULTS) -> Path:
    """Replace the section headed "## <title>" (up to the next "## ") with these lines, or append it."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = "\n".join([f"## {title}", "", *lines, ""])
    start = text.find(f"\n## {title}")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + section + (text[end:] if end >= 0 else "")
    path.write_text(text)
    return path

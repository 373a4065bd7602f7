"""The teacher pack's numbers cannot drift from the model: docs/teaching/QUESTIONS.md carries the script that makes
its numbers and that script's output. The test runs the script and compares its output with the page's, and every
number the answers put in bold must be one the output prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs/teaching/QUESTIONS.md"


def _blocks(text: str) -> tuple[str, str, str]:
    """(the prose before the script, the script, the output the page shows)."""
    prose, rest = text.split("## The script behind the numbers", 1)
    script = re.search(r"```python\n(.*?)```", rest, re.S).group(1)
    output = re.search(r"Its output:\s*```\n(.*?)```", rest, re.S).group(1)
    return prose, script, output


def test_every_bold_number_of_the_answers_is_printed_by_the_script():
    prose, _, output = _blocks(PAGE.read_text())
    bold = re.findall(r"\*\*([+-]?\d+\.\d+)\*\*", prose)
    assert bold, "the answers quote no numbers in bold: nothing to check"
    printed = set(re.findall(r"[+-]?\d+\.\d+", output))
    missing = [b for b in bold if b not in printed and b.lstrip("+") not in printed]
    assert not missing, f"QUESTIONS.md states {missing}, which its script's output does not print"


@pytest.mark.slow
def test_the_script_prints_what_the_page_shows(tmp_path):
    _, script, output = _blocks(PAGE.read_text())
    path = tmp_path / "questions_numbers.py"
    path.write_text(script)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=900,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == output.strip(), (
        "docs/teaching/QUESTIONS.md shows another output than its script prints now (a retrained model, or changed "
        "code): run the script, paste its output and check the answers' numbers.\n" + run.stdout)

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


RUN_SHEET = ROOT / "docs/teaching/RUN_SHEET.md"
NOTEBOOK_FILES = {n: next((ROOT / "notebooks").glob(f"{n}_*.ipynb")) for n in ("00", "01", "02", "03", "04")}


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with `header`, cells stripped."""
    lines = text[text.index(header):].splitlines()[2:]  # after the header line and the |---| line
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _exercise_headings(number: str) -> dict[str, bool]:
    """Each exercise heading of a notebook ("## Exercise ...", "## Write it yourself...", the primer's "## 1. ...")
    and whether it is on the core path (not marked "(after the workshop)")."""
    import nbformat

    out = {}
    for cell in nbformat.read(NOTEBOOK_FILES[number], as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if re.match(r"#{2,3} (Exercise|Write it yourself|\d\. )", line):
                out[line.lstrip("#").strip()] = "(after the workshop)" not in line
    return out


def test_the_run_sheet_core_path_is_the_notebooks_core_exercises_and_fits_its_slots():
    """The core table lists exactly the exercises the notebooks do not mark "after the workshop", in the notebooks
    of the core path (00, 01, 04; 02 and 03 have no core exercise); each notebook's minutes add up to its "in all"
    row, and the slots of the 90- and 60-minute plans add up to 90 and 60, with the notebooks' slots holding their
    timed minutes."""
    text = RUN_SHEET.read_text()
    rows = _table_rows(text, "| notebook | core exercise")
    listed: dict[str, dict[str, float]] = {}
    in_all: dict[str, float] = {}
    for number, what, minutes in rows:
        if what.startswith("*"):
            in_all[number] = float(minutes.strip("*"))
        else:
            listed.setdefault(number, {})[what] = float(minutes)
    assert set(listed) == {"00", "01", "04"}
    for number in NOTEBOOK_FILES:
        core = {title for title, on_path in _exercise_headings(number).items() if on_path}
        exercises = {what for what in listed.get(number, {}) if not what.startswith("opening text")}
        assert exercises == core, (number, sorted(exercises ^ core))
    for number, minutes in listed.items():
        assert abs(sum(minutes.values()) - in_all[number]) <= 0.5 + 1e-9, (number, minutes, in_all[number])
    plan = _table_rows(text, "| time | min | what | the teacher")
    assert sum(int(r[1]) for r in plan) == 90 and plan[-1][0].endswith("-90")
    slots = {r[2].strip("*").split(":")[0]: int(r[1]) for r in plan}
    assert slots["00"] >= in_all["00"] and slots["01"] >= in_all["01"] and slots["04"] >= in_all["04"], slots
    short = _table_rows(text, "| time | min | what |\n")
    assert sum(int(r[1]) for r in short) == 60 and short[-1][0].endswith("-60")
    assert {r[2].split(":")[0]: int(r[1]) for r in short}["01"] >= in_all["01"] - 3  # the primer done before


def test_the_run_sheet_discusses_only_core_exercises():
    """Every exercise a discussion prompt names is on the core path of its notebook."""
    text = RUN_SHEET.read_text()
    prompts = text.split("## Discussion prompts", 1)[1].split("**Wrap-up", 1)[0]
    for block, number in (("**Discuss 01.**", "01"), ("**Discuss 04.**", "04")):
        part = prompts.split(block, 1)[1].split("**Discuss", 1)[0]
        headings = _exercise_headings(number)
        named = set(re.findall(r"^- Exercise (\d+)", part, re.M))
        assert named, block
        for n in named:
            title = next(t for t in headings if t.startswith(f"Exercise {n}:") or t.startswith(f"Exercise {n} ("))
            assert headings[title], f"{block} discusses {title}, which is after the workshop"
        if "by hand" in part:  # the write-it-yourself exercise of that notebook
            assert any(t.startswith("Write it yourself") and on for t, on in headings.items())

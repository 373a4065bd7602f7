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


def _minutes_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import workshop_minutes
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return workshop_minutes


def test_the_run_sheet_shows_the_measured_minutes_and_its_routes_fit_their_slots():
    """The run sheet's tables are what scripts/workshop_minutes.py counts from the notebooks now (words to read,
    lines to write, one wrong try; median and slowest quarter); the core sections it counts are exactly the
    exercises the notebooks do not mark "after the workshop" (00, 01, 04; 02 and 03 have none); the 90-minute plan
    fits the median student, its "behind" route and the 60-minute variant's fit the slowest quarter; the schedules'
    slots are the ones the script checks, and add up to 90 and 60."""
    minutes = _minutes_module()
    text = RUN_SHEET.read_text()
    assert minutes.report() in text, "RUN_SHEET.md: paste the output of python scripts/workshop_minutes.py"
    counted = {}
    for (notebook, _), row in zip(minutes.CORE, minutes.table()):
        counted.setdefault(notebook[:2], set()).add(row.title.lstrip("# "))
    for number in NOTEBOOK_FILES:
        core = {title for title, on_path in _exercise_headings(number).items() if on_path}
        assert core <= counted.get(number, set()), (number, sorted(core - counted.get(number, set())))
        assert {t for t in counted.get(number, set()) if re.match(r"(Exercise|Write it yourself|\d\. )", t)} == core
    assert minutes.fits("90 min", 0) and minutes.fits("90 min, behind", 1)
    assert minutes.fits("60 min", 0) and minutes.fits("60 min, behind", 1)
    assert not minutes.fits("90 min", 1), "the slowest quarter fits the full route: the sheet's 'behind' is moot"
    plan = _table_rows(text, "| time | min | what | the teacher")
    assert sum(int(r[1]) for r in plan) == 90 and plan[-1][0].endswith("-90")
    slots = {r[2].strip("*").split(":")[0]: int(r[1]) for r in plan}
    assert slots["01"] == minutes.SLOTS["90 min"]["01_ioi_patching"] and slots["04"] == minutes.SLOTS["90 min"][
        "04_circuit"], slots
    short = _table_rows(text, "| time | min | what |\n")
    assert sum(int(r[1]) for r in short) == 60 and short[-1][0].endswith("-60")
    short_slots = {r[2].split(":")[0]: int(r[1]) for r in short}
    assert short_slots["01"] == minutes.SLOTS["60 min"]["01_ioi_patching"] and short_slots["04"] == minutes.SLOTS[
        "60 min"]["04_circuit"], short_slots


def test_interplab_lab_opens_the_notebook_the_run_sheet_starts_with():
    """The 90-minute plan's first notebook (the primer, pre-work recapped in the room) is what `interplab lab` opens."""
    from interplab.__main__ import NOTEBOOK

    plan = _table_rows(RUN_SHEET.read_text(), "| time | min | what | the teacher")
    first = next(re.search(r"\*\*(\d\d):", r[2]).group(1) for r in plan if re.search(r"\*\*\d\d:", r[2]))
    assert NOTEBOOK == NOTEBOOK_FILES[first].name and NOTEBOOK in plan[0][4], (NOTEBOOK, first)


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

"""The minutes each core exercise of the workshop takes, counted from the notebooks' sources (RUN_SHEET.md's tables).

    python scripts/workshop_minutes.py          the table: per exercise, what there is to do and the minutes

Counted per exercise (a section of a notebook, from its heading to the next): the words to read (the markdown and
the comments of its answer cells), the lines of code to read (its cells, answers included), the lines to write (each
`...` a student replaces), the predictions asked, the cells to run. The minutes apply a reader's rates to those
counts, for a median student and for the slowest quarter of a room (RATES), with one wrong first try at each
exercise that has code to write (the check's hint read, the line fixed, the cells run again). The rates were set so
that this count gives what a teacher's walk-through of the notebooks measured (issue 57: 00 28 / 36 minutes, 01 39 /
50, 04 24 / 32, median / slowest quarter); tests/test_teaching_docs.py checks RUN_SHEET.md says what this prints.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext

SOURCES = Path(__file__).resolve().parent.parent / "notebooks" / "sources"

# minutes per unit: (median student, slowest quarter)
RATES = {
    "word": (1 / 110, 1 / 90),           # reading the text: 110 and 90 words a minute (technical prose, new words)
    "code line": (1 / 10, 1 / 8),        # reading a line of code that is given (the checks are run, not read)
    "line written": (2.0, 2.5),          # writing one `...` a student replaces
    "wrong try": (2.0, 3.5),             # one wrong first try per exercise with code to write: hint, fix, rerun
    "prediction": (1.5, 2.0),            # writing a prediction with its reason
    "cell": (0.3, 0.4),                  # running a cell and reading what it prints
}

# The core path: (notebook, the heading the section starts with; "" = the opening, before the first heading).
CORE = [
    ("00_primer", ""), ("00_primer", "## 1."), ("00_primer", "## 2."), ("00_primer", "## 3."),
    ("00_primer", "## 4."), ("00_primer", "## 5."), ("00_primer", "## Ready"),
    ("01_ioi_patching", ""), ("01_ioi_patching", "## The metric: logit difference"),
    ("01_ioi_patching", "## Exercise 1:"), ("01_ioi_patching", "## Write it yourself: activation patching"),
    ("01_ioi_patching", "## Exercise 3:"), ("01_ioi_patching", "## Exercise 4:"),
    ("04_circuit", ""), ("04_circuit", "## Exercise 1:"), ("04_circuit", "## Write it yourself: path patching"),
]


@dataclass
class Section:
    notebook: str
    title: str
    words: int
    code_lines: int
    written: int
    predictions: int
    cells: int

    def minutes(self, who: int) -> float:
        """who: 0 the median student, 1 the slowest quarter."""
        r = {k: v[who] for k, v in RATES.items()}
        return (self.words * r["word"] + self.code_lines * r["code line"] + self.written * r["line written"]
                + (r["wrong try"] if self.written else 0) + self.predictions * r["prediction"]
                + self.cells * r["cell"])


def sections(notebook: str) -> dict[str, list]:
    """A notebook's cells by section: {heading line ("" for the opening): cells}."""
    out, current = {"": []}, ""
    for cell in jupytext.read(SOURCES / f"{notebook}.py").cells:
        heading = next((line for line in cell.source.splitlines() if line.startswith("## ")), None)
        if cell.cell_type == "markdown" and heading:
            before, _, rest = cell.source.partition(heading)
            out[current].append(type(cell)(cell_type="markdown", source=before, metadata={}))
            current = heading
            out[current] = [type(cell)(cell_type="markdown", source=heading + rest, metadata={})]
        else:
            out[current].append(cell)
    return out


def count(notebook: str, start: str) -> Section:
    found = {k: v for k, v in sections(notebook).items() if k.startswith(start) or (start == "" and k == "")}
    title, cells = next(iter(found.items()))
    words = code = written = predictions = runs = 0
    for cell in cells:
        text = cell.source
        if cell.cell_type == "markdown":
            words += len(re.findall(r"\w[\w'-]*", text))
            predictions += text.count("**Predict")
            continue
        lines = [line for line in text.splitlines() if line.strip()]
        runs += 1
        if re.search(r"^def check_", text, flags=re.M):
            continue  # a check is run, not read: what it prints is counted as its cell
        comments = [line.strip()[2:] for line in lines if line.strip().startswith("# ")]
        words += sum(len(re.findall(r"\w[\w'-]*", c)) for c in comments) if text.startswith("# ANSWER") else 0
        code += len([line for line in lines if not line.strip().startswith("#")])
        if not text.startswith("# ANSWER"):  # each `...` a student replaces (an answer's `x[..., i]` is not one)
            written += sum(line.split("#")[0].count("...") for line in lines)
    return Section(notebook, title or "opening", words, code, written, predictions, runs)


# The routes through the core path. A section not named in a route is not done in it (the teacher shows it on the
# projector, or it waits for after the workshop); a number after a section is the `...` lines a student writes in it
# when the teacher writes the rest on the projector.
ROUTES = {
    "90 min": {"01_ioi_patching": None, "04_circuit": None},  # every core section of 01 and 04; 00 is pre-work
    "90 min, behind": {"01_ioi_patching": {"## Exercise 3:": 0, "## Exercise 4:": 0},
                       "04_circuit": {"## Exercise 1:": 0, "## Write it yourself: path patching": 1}},
    "60 min": {"01_ioi_patching": {"## Exercise 1:": 0, "## Exercise 3:": 0, "## Exercise 4:": 0},
               "04_circuit": {"## Write it yourself: path patching": 1}},
    "60 min, behind": {"01_ioi_patching": {"## Exercise 1:": 0, "## Exercise 3:": 0, "## Exercise 4:": 0},
                       "04_circuit": {"## Exercise 1:": 0, "## Write it yourself: path patching": 1}},
}
# The slots the run sheet gives each notebook's core work, in minutes (RUN_SHEET.md's schedules).
SLOTS = {"90 min": {"01_ioi_patching": 40, "04_circuit": 24}, "90 min, behind": {"01_ioi_patching": 40,
                                                                                  "04_circuit": 24},
         "60 min": {"01_ioi_patching": 29, "04_circuit": 21}, "60 min, behind": {"01_ioi_patching": 29,
                                                                                  "04_circuit": 21}}
PRE_WORK = "00_primer"  # done before the day in every route; the room gets a recap on the projector


def table() -> list[Section]:
    return [count(nb, start) for nb, start in CORE]


def route_minutes(rows: list[Section], route: str, who: int) -> dict[str, float]:
    """Minutes of each notebook's core work on a route, for the median student (who=0) or the slowest quarter (1)."""
    out = {}
    for notebook, changes in ROUTES[route].items():
        total = 0.0
        for (nb, start), s in zip(CORE, rows):
            if nb != notebook:
                continue
            change = (changes or {}).get(start) if start else None
            if change == 0:
                continue  # shown on the projector, or after the workshop
            if change is not None:  # the student writes `change` of the lines, the teacher the rest
                s = Section(s.notebook, s.title, s.words, s.code_lines, change, s.predictions, s.cells)
            total += s.minutes(who)
        out[notebook] = total
    return out


def fits(route: str, who: int) -> bool:
    got = route_minutes(table(), route, who)
    return all(got[nb] <= SLOTS[route][nb] for nb in got)


def report() -> str:
    rows = table()
    lines = ["| notebook | section | words to read | code lines to read | lines to write | predictions | cells | "
             "median min | slowest-quarter min |", "|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        lines.append(f"| {s.notebook[:2]} | {s.title.lstrip('# ')} | {s.words} | {s.code_lines} | {s.written} | "
                     f"{s.predictions} | {s.cells} | {s.minutes(0):.1f} | {s.minutes(1):.1f} |")
    pre = [s for s in rows if s.notebook == PRE_WORK]
    lines += ["", "| route | notebook | slot | median min | slowest-quarter min |", "|---|---|---|---|---|",
              f"| before the day | 00 | pre-work | {sum(s.minutes(0) for s in pre):.0f} | "
              f"{sum(s.minutes(1) for s in pre):.0f} |"]
    for route in ROUTES:
        median, slow = route_minutes(rows, route, 0), route_minutes(rows, route, 1)
        for nb in median:
            lines.append(f"| {route} | {nb[:2]} | {SLOTS[route][nb]} | {median[nb]:.0f} | {slow[nb]:.0f} |")
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())

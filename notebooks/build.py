"""Writes the teaching notebooks (without outputs) from their sources: `python notebooks/build.py`.

Each notebook's cells live in notebooks/sources/NN_name.py, in jupytext's percent format (`# %%` starts a code cell,
`# %% [markdown]` a markdown one): plain Python to review and diff, and a teacher with jupytext can open it as a
notebook. The committed .ipynb files are what students open; this step adds what the sources leave out:

- A code cell whose first line is "# ANSWER" is a workshop answer: its input is collapsed in JupyterLab and Notebook
  7, and its code runs only once the student sets `show = True` in the cell (so Run All and Shift-Enter leave it
  closed). In the source it is written plainly, as a teacher would run it.
- The first code cell gets the answer gate (`SHOW_ANSWERS`, `opened`) after it.
- After each markdown cell that asks to **Predict**, a cell to write the prediction in.

tests/test_notebooks.py checks the committed notebooks are exactly what this writes.
"""

from pathlib import Path

import jupytext
import nbformat as nbf

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"

# The line of every answer cell that keeps it closed; the student (or a test) sets it to True.
CLOSED = "show = False  # set to True, then run this cell, to see the answer"
ANSWER_HEADER = "# ANSWER (closed: Run All and Shift-Enter leave it closed until you set show = True below)"

# Appended to each notebook's first code cell: what an answer cell calls to decide whether to run.
ANSWER_GATE = """

SHOW_ANSWERS = False  # True runs every answer cell too (a solved copy for the teacher)


def opened(show):
    \"\"\"Whether an answer cell runs: its own `show = True`, or SHOW_ANSWERS for the whole notebook.\"\"\"
    if not (show or SHOW_ANSWERS):
        print("Answer closed. To see it: open the cell (click the bar on its left), set show = True, run the cell.")
    return bool(show or SHOW_ANSWERS)
"""

PREDICTION = """**Your prediction** (double-click this cell, write it with your reason, then run the next cell):

..."""


def md(text):
    return nbf.v4.new_markdown_cell(text.strip())


def code(text):
    text = text.strip()
    if text.startswith("# ANSWER"):
        body = text.split("\n", 1)[1] if "\n" in text else "pass"
        indented = "\n".join(("    " + line) if line.strip() else "" for line in body.splitlines())
        cell = nbf.v4.new_code_cell(f"{ANSWER_HEADER}\n{CLOSED}\nif opened(show):\n{indented}")
        cell.metadata["jupyter"] = {"source_hidden": True}
        return cell
    return nbf.v4.new_code_cell(text)


def source_cells(path) -> list:
    """A source's cells as the notebook shows them: answers gated, the gate after the first code cell, a box after
    each prediction question."""
    cells, gated = [], False
    for cell in jupytext.read(path, fmt="py:percent").cells:
        if cell.cell_type == "markdown":
            cells.append(md(cell.source))
            if "**Predict" in cell.source:
                cells.append(md(PREDICTION))
        elif not gated:
            cells.append(code(cell.source.strip() + ANSWER_GATE))
            gated = True
        else:
            cells.append(code(cell.source))
    return cells


def notebook_names() -> list[str]:
    return [p.stem + ".ipynb" for p in sorted(SOURCES.glob("*.py"))]


def write(name, folder=HERE):
    """Writes notebook `name` (e.g. "00_primer.ipynb") from sources/ into `folder`."""
    nb = nbf.v4.new_notebook()
    nb.cells = source_cells(SOURCES / (Path(name).stem + ".py"))
    for i, cell in enumerate(nb.cells):  # fixed ids (nbformat draws random ones), so a rebuild changes only what changed
        cell.id = f"cell-{i}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, Path(folder) / name)


if __name__ == "__main__":
    for name in notebook_names():
        write(name)
    print("wrote", ", ".join(notebook_names()))

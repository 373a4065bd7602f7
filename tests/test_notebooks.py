"""Every teaching notebook runs top to bottom in a real kernel with its answers closed, each answer runs on its own
after the non-answer cells before it, the solved copy runs too; notebooks stay small."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from _notebook_claims import CLAIMS, FLAGGED, MATH, METHOD, PAPER, QUESTION, prose_sentences

REASONS = (QUESTION, METHOD, PAPER, MATH)

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_every_sentence_with_a_number_or_a_role_is_listed_with_what_shows_it():
    """tests/_notebook_claims.py lists each sentence of the prose that states a number or names a role, with the
    pattern the solved notebook prints for it (checked by the solved run below) or why it states nothing measured.
    A new such sentence must be listed; a listed quote must still be in the prose."""
    import jupytext

    build = _build_module()
    assert sorted(CLAIMS) == [p.stem for p in sorted(build.SOURCES.glob("*.py"))]
    for stem, claims in CLAIMS.items():
        sentences = prose_sentences(jupytext.read(build.SOURCES / f"{stem}.py").cells)
        quotes = [quote for quote, _ in claims]
        missing = [q for q in quotes if not any(q in s for s in sentences)]
        assert not missing, f"{stem}: listed but no longer in the prose: {missing}"
        unlisted = [s for s in sentences if FLAGGED.search(s) and not any(q in s for q in quotes)]
        assert not unlisted, f"{stem}: sentences with a number or a role, not in tests/_notebook_claims.py: {unlisted}"
        for _, shown in claims:
            assert shown in REASONS or re.compile(shown), shown


def test_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["00_primer.ipynb", "01_ioi_patching.ipynb", "02_steering.ipynb",
                                         "03_logit_lens.ipynb", "04_circuit.ipynb", "05_features.ipynb",
                                         "06_circuits.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_small_and_without_outputs(path):
    assert path.stat().st_size < 200_000
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_committed_notebooks_are_what_build_py_writes(tmp_path):
    """The cells are edited in notebooks/sources/NN_name.py (one percent-format source per notebook); a notebook
    edited by hand, or a source change not rebuilt, would teach something else than the reviewed source (cell ids
    are fixed, so the bytes must match)."""
    build = _build_module()
    assert build.notebook_names() == [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        build.write(path.name, tmp_path)
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), \
            f"{path.name} differs from what notebooks/build.py writes from sources/: run python notebooks/build.py"


def test_each_source_is_a_percent_format_notebook_whose_answers_are_plain_code():
    """A teacher opens a source as a notebook (jupytext reads it) and runs an answer as written: the gating is the
    build's, so no source holds `opened(show)` or the closed line itself."""
    import jupytext

    build = _build_module()
    for path in sorted(build.SOURCES.glob("*.py")):
        text = path.read_text()
        assert text.count("\n# %%") >= 10 and build.CLOSED not in text and "if opened(show)" not in text, path.name
        cells = jupytext.read(path).cells
        answers = [c for c in cells if c.cell_type == "code" and c.source.startswith("# ANSWER")]
        assert answers, path.name
        for cell in answers:
            compile(cell.source, f"{path.name} answer", "exec")


def _build_module():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS[0].parent / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


def _is_answer(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith("# ANSWER")


CLOSED_MESSAGE = "Answer closed."
MAX_EXECUTED = 2_500_000  # bytes of an executed notebook, answers shown (the widget code alone is 1.2 MB)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_answers_are_collapsed_closed_and_come_after_their_check(path):
    """A workshop answer ("# ANSWER" cell) is collapsed, runs its code only under `if opened(show):` with
    `show = False` in the cell (so Run All and Shift-Enter leave it closed), compiles once opened, and follows a code
    cell (the check), never the question."""
    build = _build_module()
    cells = nbformat.read(path, as_version=4).cells
    answers = [i for i, c in enumerate(cells) if _is_answer(c)]
    assert answers
    first_code = next(c for c in cells if c.cell_type == "code")
    assert "SHOW_ANSWERS = False" in first_code.source and "def opened(show)" in first_code.source
    for i in answers:
        lines = cells[i].source.splitlines()
        assert cells[i].metadata.get("jupyter", {}).get("source_hidden") is True
        assert lines[1] == build.CLOSED and lines[2] == "if opened(show):", lines[:3]
        assert all(line.startswith("    ") or not line.strip() for line in lines[3:]), "the whole answer is guarded"
        compile(cells[i].source.replace(build.CLOSED, "show = True"), f"{path.name} cell {i}", "exec")
        assert cells[i - 1].cell_type == "code" and not _is_answer(cells[i - 1]), i


ALONE = """
_answer_ns = dict(get_ipython().user_ns)  # a copy: what the answer defines does not reach the next cells
exec(compile({source!r}, "<answer cell {index}>", "exec"), _answer_ns)
del _answer_ns
"""


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_run_all_leaves_the_answers_closed_and_each_answer_runs_alone(path, tmp_path, monkeypatch):
    """One kernel per notebook, as a student who never opens an answer runs it (Run All): every non-answer cell in
    order, without error, and each answer cell as shipped, which prints only that it is closed. Right after each
    closed answer, the same answer opened (`show = True`, the student's edit) runs in a copy of the kernel's
    namespace, so it sees only what the non-answer cells before it defined, as it would for a student who opens
    only that one."""
    from nbclient import NotebookClient

    build = _build_module()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(path, as_version=4)
    cells, checks = [], []  # checks: (kind, answer cell index, position in `cells`)
    for i, cell in enumerate(nb.cells):
        cells.append(cell)
        if _is_answer(cell):
            checks.append(("closed", i, len(cells) - 1))
            opened = cell.source.replace(build.CLOSED, "show = True")
            cells.append(nbformat.v4.new_code_cell(ALONE.format(source=opened, index=i)))
            checks.append(("alone", i, len(cells) - 1))
    nb.cells = cells
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [(j, o.ename, o.evalue) for j, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    located = {j: (kind, i) for kind, i, j in checks}
    printed_by = lambda j: "".join(o.get("text", "") for o in nb.cells[j].get("outputs", [])  # noqa: E731
                                   if o.output_type == "stream")
    assert not errors, [(located.get(j, ("non-answer cell", j)), name, value, printed_by(j))
                        for j, name, value in errors]
    for kind, i, j in checks:
        outputs = nb.cells[j].get("outputs", [])
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        if kind == "closed":
            assert text.startswith(CLOSED_MESSAGE) and text.count("\n") == 1, (i, outputs)
            assert all(o.output_type == "stream" for o in outputs), (i, outputs)  # nothing displayed either
        else:
            assert CLOSED_MESSAGE not in text, i
    printed = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                        if o.output_type == "stream")
    assert "Traceback" not in printed


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_solved_copy_runs_top_to_bottom(path, tmp_path, monkeypatch):
    """The teacher's solved copy: SHOW_ANSWERS = True in the first cell, then top to bottom with no error (answers
    and later cells share one namespace here, as they do for a student who opens every answer in order)."""
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.source = first.source.replace("SHOW_ANSWERS = False", "SHOW_ANSWERS = True")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                     if o.output_type == "stream")
    assert "Traceback" not in text and CLOSED_MESSAGE not in text
    unshown = [(quote, shown) for quote, shown in CLAIMS[path.stem] if shown not in REASONS
               and not re.search(shown, text)]
    assert not unshown, f"sentences of {path.name} whose number or role the notebook no longer prints: {unshown}"
    # saved as it ran (the views' state and the widget code, once): small enough to mail to a class
    size = len(nbformat.writes(nb).encode())
    print(f"\nexecuted solved {path.name}: {size / 1e6:.2f} MB")
    assert size <= MAX_EXECUTED, f"{path.name} executed is {size / 1e6:.2f} MB (at most {MAX_EXECUTED / 1e6:.1f} MB)"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2] in ("00", "01", "02", "03", "05", "06")],
                         ids=lambda p: p.stem)
def test_prose_states_no_measured_numbers_or_head_names(path):
    """The text cannot drift from a retrained model: no head name (L2H3) and no measured-looking number (0.87) in
    the markdown of notebooks 00-03, 05 and 06; cells print or assert them instead."""
    import re

    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            text = re.sub(r"\[arXiv:[^\]]*\]\([^)]*\)", "", cell.source)
            assert not re.findall(r"\bL\d+H\d+\b|\d\.\d\d", text), cell.source[:200]
            assert "What you should see" not in text


def test_the_notebooks_open_their_views_from_the_lab():
    """The notebooks use lab.lens / lab.attention / lab.steering, never the widget classes (interplab.widgets is
    not the notebooks' API)."""
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            assert "interplab.widgets" not in cell.source, (path.name, cell.source[:200])


def _exercise_cells(nb, title: str) -> list:
    """The code cells of one exercise: from its heading to the next heading."""
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(title))
    stop = next((i for i in range(start + 1, len(nb.cells)) if nb.cells[i].cell_type == "markdown"
                 and nb.cells[i].source.startswith("## ")), len(nb.cells))
    return [c for c in nb.cells[start:stop] if c.cell_type == "code"]


@pytest.mark.slow
def test_the_gpt2_cells_of_notebook_04_run_where_a_gpt2_is_at_hand(tmp_path, monkeypatch):
    """Exercise 12 runs only where GPT-2 small is at hand, which it is not here: its cells run on a GPT-2 of the same
    family and tokenizer, with random weights and 4 layers, saved in a folder (INTERPLAB_GPT2), so every line runs
    and prints the table and the comparison with the paper's heads; without the model they say so and skip."""
    import transformers as tf
    from nbclient import NotebookClient

    from interplab.zoo import EMBEDDED

    tok_dir = EMBEDDED["ioi-tiny"]
    tokenizer = tf.AutoTokenizer.from_pretrained(tok_dir)
    torch_model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=4, n_head=4, n_embd=64, vocab_size=len(tokenizer)))
    folder = tmp_path / "gpt2-shaped"
    torch_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    nb = nbformat.read(NOTEBOOKS[0].parent / "04_circuit.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    cells = _exercise_cells(nb, "## Exercise 12")
    assert len(cells) == 2 and "copying_scores" in cells[0].source and "path_patch" in cells[1].source
    for where, expect in ((str(folder), "the paper's"), (str(tmp_path / "absent"), "not at hand")):
        monkeypatch.setenv("INTERPLAB_GPT2", where)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        run = nbformat.v4.new_notebook(cells=[nbformat.from_dict(c) for c in [setup, *cells]])
        for c in run.cells:
            c.outputs = []
        NotebookClient(run, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        text = "\n".join(o.get("text", "") for c in run.cells for o in c.get("outputs", [])
                         if o.output_type == "stream")
        assert not [o for c in run.cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert expect in text, text[-2000:]
        if expect == "the paper's":
            assert "path to logits" in text and "name movers: found here" in text


def _source_cell(stem: str, start: str) -> str:
    """The code cell of notebooks/sources/<stem>.py that starts with `start` (an answer as a teacher reads it)."""
    import jupytext

    cells = jupytext.read(_build_module().SOURCES / f"{stem}.py").cells
    return next(c.source for c in cells if c.cell_type == "code" and c.source.startswith(start))


def _run_wrong_versions(notebook: str, check_marker: str, versions: dict[str, str], tmp_path) -> dict[str, str]:
    """Runs a notebook's non-answer cells up to and including the check cell (the one holding `check_marker`), then
    each version in the same kernel; returns what each version printed."""
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS[0].parent / notebook, as_version=4)
    stop = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and check_marker in c.source)
    cells = [nbformat.v4.new_code_cell(c.source) for c in nb.cells[:stop + 1]
             if c.cell_type == "code" and not _is_answer(c)]
    first = len(cells)
    cells += [nbformat.v4.new_code_cell(v) for v in versions.values()]
    run = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(run, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    out = {}
    for name, cell in zip(versions, run.cells[first:]):
        out[name] = "".join(o["text"] if o.output_type == "stream" else f"{o.ename}: {o.evalue}"
                            for o in cell.outputs if o.output_type in ("stream", "error"))
    return out


def _versions(answer: str, call: str, slips: dict[str, tuple[str, str, str]]) -> tuple[dict, dict]:
    """Each slip (name: (line in the answer, the wrong line, words its hint must hold)) made in the answer's code."""
    code = answer.split("\n", 1)[1].split(f"assert {call}")[0]  # the answer's definitions, without its own check
    versions, words = {"right": code + call}, {"right": "right:"}
    for name, (right, wrong, hint) in slips.items():
        assert right in code, (name, right)
        versions[name] = code.replace(right, wrong) + call
        words[name] = hint
    return versions, words


PATCHING_SLIPS = {  # 01's activation patching by hand: the line, the slip, what the hint must say
    "shape slip: the whole cached tensor": ('resid[:, pos] = clean_cache["resid_pre", layer][:, pos]',
                                            'resid[:, pos] = clean_cache["resid_pre", layer]', "shape slip"),
    "shape slip: the batch index forgotten": ('resid[:, pos] = clean_cache["resid_pre", layer][:, pos]',
                                              'resid[0, pos] = clean_cache["resid_pre", layer][pos]', "shape slip"),
    "wrong position: the last one": ('resid[:, pos] = clean_cache["resid_pre", layer][:, pos]',
                                     'resid[:, -1] = clean_cache["resid_pre", layer][:, -1]', "wrong position"),
    "wrong position: S2 always": ('resid[:, pos] = clean_cache["resid_pre", layer][:, pos]',
                                  'resid[:, S2] = clean_cache["resid_pre", layer][:, S2]', "Every position gives"),
    "wrong layer: the next block": ("lab.model.transformer.h[layer]", "lab.model.transformer.h[layer + 1]",
                                    "wrong layer"),
    "every position patched": ('resid[:, pos] = clean_cache["resid_pre", layer][:, pos]',
                               'resid[:] = clean_cache["resid_pre", layer]', "whole clean run"),
    "the edited resid not returned": ("return (resid, *args[1:])", "return None", "Nothing changed"),
    "wrong run: the clean prompt": ("lab.model(**corrupt_ids)",
                                    'lab.model(**lab.tokenizer(clean, return_tensors="pt"))', "wrong run"),
    "not normalised": ("return (float(bound(logits)) - corrupt_ld) / (clean_ld - corrupt_ld)",
                       "return float(bound(logits))", "raw logit difference"),
    "normalised by clean only": ("return (float(bound(logits)) - corrupt_ld) / (clean_ld - corrupt_ld)",
                                 "return (float(bound(logits)) - corrupt_ld) / clean_ld", "normalisation slip"),
    "normalised from the clean side": ("return (float(bound(logits)) - corrupt_ld) / (clean_ld - corrupt_ld)",
                                       "return (float(bound(logits)) - clean_ld) / (clean_ld - corrupt_ld)",
                                       "subtract corrupt_ld"),
}

PATH_PATCH_SLIPS = {  # 04's path patching by hand
    "forgetting to freeze": ("for layer, head in HEADS if (layer, head) != sender]", "for layer, head in []]",
                             "forgetting to freeze"),
    "frozen at the corrupt run": ('head=head, source=clean_run) for layer', 'head=head, source=corrupt_run) for layer',
                                  "froze the other heads at the corrupt run"),
    "the sender from the clean run": ('ilab.patch("z", sender[0], head=sender[1], source=corrupt_run)',
                                      'ilab.patch("z", sender[0], head=sender[1], source=clean_run)',
                                      "sender's z from clean_run"),
    "the receiver's v from the corrupt run": ("source=sent)", "source=corrupt_run)", "not from `sent`"),
    "the receiver's z, not its v": ('ilab.patch("v", receiver[0]', 'ilab.patch("z", receiver[0]', "output z"),
    "a (layer, head) tuple where a layer goes": ('ilab.patch("z", sender[0], head=sender[1], source=corrupt_run)',
                                                 'ilab.patch("z", sender, source=corrupt_run)',
                                                 "A head is two numbers"),
    "not normalised": ("return (float(bound(final.last_logits).mean()) - clean_ld) / (corrupt_ld - clean_ld)",
                       "return float(bound(final.last_logits).mean())", "raw mean logit difference"),
    "the sign flipped": ("return (float(bound(final.last_logits).mean()) - clean_ld) / (corrupt_ld - clean_ld)",
                         "return (float(bound(final.last_logits).mean()) - clean_ld) / (clean_ld - corrupt_ld)",
                         "step 3's sign"),
}

EDGE_SLIPS = {  # 06's edge by hand (a last-layer feature to the logit through the frozen final norm)
    "the mean logit not subtracted": ("u = W_U[token] - W_U.mean(0)", "u = W_U[token]", "mean logit"),
    "no centring": ("grad = (wu - wu.mean()) / s", "grad = wu / s", "no centring"),
    "no scale": ("grad = (wu - wu.mean()) / s", "grad = wu - wu.mean()", "scale is missing"),
    "no gain": ("wu = gain * u", "wu = u", "gain is missing"),
    "no activation": ("return float(a * w_dec @ grad)", "return float(w_dec @ grad)", "activation is missing"),
    "unbiased variance": ("x.var(unbiased=False)", "x.var()", "unbiased variance"),
    "the sign flipped": ("return float(a * w_dec @ grad)", "return float(-a * w_dec @ grad)", "sign is flipped"),
    "nothing returned": ("return float(a * w_dec @ grad)", "float(a * w_dec @ grad)", "should return a float"),
}


@pytest.mark.slow
@pytest.mark.parametrize("notebook, marker, answer, call, slips", [
    ("01_ioi_patching", "def check_patching", "# ANSWER\ndef my_patch", "check_patching(my_patch, my_row)",
     PATCHING_SLIPS),
    ("04_circuit", "def check_path_patch", "# ANSWER\ndef my_path_patch", "check_path_patch(my_path_patch)",
     PATH_PATCH_SLIPS),
    ("06_circuits", "def check_edge", "# ANSWER\ndef my_edge", "check_edge(my_edge)", EDGE_SLIPS),
], ids=["01-activation-patching", "04-path-patching", "06-edge-by-hand"])
def test_each_wrong_version_of_a_hand_written_exercise_gets_the_hint_that_names_its_slip(
        notebook, marker, answer, call, slips, tmp_path, monkeypatch):
    """The common slips of the three hand-written exercises, each made in the answer's own code and run against the
    notebook's check in a real kernel: the check says "not yet" and names that slip (and the answer itself passes).
    No traceback reaches the student: a slip that raises inside the model is caught and named too."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    versions, words = _versions(_source_cell(notebook, answer), call, slips)
    printed = _run_wrong_versions(f"{notebook}.ipynb", marker, versions, tmp_path)
    for name, text in printed.items():
        assert words[name] in text, (name, text)
        assert ("not yet" in text) == (name != "right") and "Traceback" not in text, (name, text)

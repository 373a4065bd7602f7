"""The architecture holds: layers import one way (import-linter's contracts in pyproject.toml), only the engine
attaches hooks, and no module reaches into another's private members."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "interplab"
# the embedded model's training, its independent evaluation and its SAE's card hook the model by hand, on purpose
HAND_HOOKS_ALLOWED = {"zoo/train_ioi_tiny.py", "zoo/evaluate_ioi_tiny.py", "zoo/train_ioi_tiny_sae.py",
                      "zoo/train_ioi_tiny_transcoders.py"}
HOOK_CALLS = {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
              "register_full_backward_pre_hook", "register_module_forward_hook", "register_module_forward_pre_hook"}
# names that hold another module's objects: a lab/engine, hook manager, session, result or widget
FOREIGN = {"lab", "engine", "hm", "session", "res", "result", "explorer", "panel", "view", "heatmap", "worker"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def test_layer_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is missing: pip install -e '.[dev]'"
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def import_cycles(package: str = "interplab") -> list[list[str]]:
    """Every import cycle among the package's modules, each as a chain of modules from one back to itself. The layer
    contract sees only imports between layers; this sees one inside a layer too (engine.core -> engine.backends ->
    engine.core was one). A package's own __init__ counts as a module like any other."""
    import grimp  # import-linter's own import graph

    graph = grimp.build_graph(package)
    cycles, seen = [], set()
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                cycles.append([importer, *back])
    return cycles


def test_no_import_cycle_anywhere_in_the_package():
    cycles = import_cycles()
    assert not cycles, "import cycles (break each by moving what both sides need below them):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle_inside_one_layer(tmp_path, monkeypatch):
    """Two modules of one package that import each other (what engine.core and engine.backends did)."""
    pkg = tmp_path / "cyclepkg"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "core.py").write_text("from . import backends\n")
    (pkg / "inner" / "backends.py").write_text("from .core import thing\n")
    (pkg / "inner" / "leaf.py").write_text("from . import core\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles("cyclepkg")
    assert [sorted(set(c)) for c in cycles] == [["cyclepkg.inner.backends", "cyclepkg.inner.core"]]


def test_only_the_engine_attaches_hooks():
    found = []
    for rel, tree in _modules():
        if rel.startswith("engine/") or rel in HAND_HOOKS_ALLOWED:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in HOOK_CALLS:
                found.append(f"{rel}:{node.lineno} {node.attr}")
    assert not found, f"hooks attached outside interplab/engine: {found}"


def _base_name(node):
    """'lab' for lab._x, and for self.lab._x; None otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def test_no_module_reads_another_modules_private_members():
    found = []
    for rel, tree in _modules():
        if rel.startswith("zoo/"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and _base_name(node.value) in FOREIGN):
                found.append(f"{rel}:{node.lineno} {_base_name(node.value)}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module and "interplab" in (node.module or "") or (
                    isinstance(node, ast.ImportFrom) and node.level):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{rel}:{node.lineno} imports {alias.name}")
    assert not found, f"private members read across modules: {found}"


def test_every_module_is_in_a_layer():
    """A module in no layer is checked by no contract: each one under interplab/ must be in the layers (the package's
    own __init__, which re-exports the public names, aside)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    covered = {name.strip() for layer in layers for name in layer.split("|")}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name == "interplab":
            continue
        if not any(name == c or name.startswith(c + ".") for c in covered):
            missing.append(name)
    assert not missing, f"modules in no layer of pyproject.toml's import contract: {missing}"


def test_no_alias_keeps_an_old_name_alive():
    """No release exists, so no one needs a moved name kept: no module-level __getattr__ (PEP 562's alias hook), no
    __getattr__ on the Lab, no DeprecationWarning raised anywhere in the package."""
    found = []
    for rel, tree in _modules():
        for node in tree.body:
            names = [node.name] if isinstance(node, ast.FunctionDef) else [
                n.id for t in getattr(node, "targets", []) for n in ast.walk(t) if isinstance(n, ast.Name)]
            if "__getattr__" in names:
                found.append(f"{rel}:{node.lineno} module __getattr__")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "__getattr__" for f in node.body):
                found.append(f"{rel}:{node.lineno} {node.name}.__getattr__")
            if isinstance(node, ast.Name) and node.id in ("DeprecationWarning", "FutureWarning"):
                found.append(f"{rel}:{node.lineno} {node.id}")
    assert not found, found


def _texts(tree):
    """Every string constant of a module (docstrings, messages, f-strings' literal parts)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_every_lab_name_the_package_tells_users_to_call_exists():
    """A message or docstring that says `lab.x(...)`, `lab.engine.x(...)` or `ilab.x(...)` names something a Lab (or
    the interplab package) has: moved names leave no message pointing at them."""
    import re

    import interplab as ilab
    from interplab.zoo import load_embedded

    lab = ilab.Lab(*load_embedded("ioi-tiny"))
    call = re.compile(r"\b(lab|ilab)((?:\.[A-Za-z_]\w*)+)\(")
    missing = []
    for rel, tree in _modules():
        if rel.startswith("zoo/"):
            continue
        for lineno, text in _texts(tree):
            for root, chain in call.findall(text):
                obj = lab if root == "lab" else ilab
                for part in chain.strip(".").split("."):
                    if not hasattr(obj, part):
                        missing.append(f"{rel}:{lineno} {root}{chain}")
                        break
                    obj = getattr(obj, part)
    assert not missing, f"messages that name what does not exist: {missing}"


def test_the_code_passes_its_linter():
    """ruff (pyproject.toml [tool.ruff]) on the package, tests, benchmarks and scripts: what one session lets slip
    (a long line, an unsorted import, an unused loop variable) fails here, not in the next session's review."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: pip install -e '.[dev]' (the dev extra has it)"
    out = subprocess.run([ruff, "check", "interplab", "tests", "benchmarks", "scripts"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:]

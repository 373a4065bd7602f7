"""Every backend behind the engine: generation and hooks only in interplab/engine, no code outside it branches on a
backend's name, the engine chooses, and the Hugging Face backend's sweep cells equal plain patched runs (written out
here with ilab.patch, one run per cell, not the resumed batched forward). The vLLM backend against this one:
tests/vllm_engine."""

import ast
from pathlib import Path

import pytest
import torch

import interplab as ilab
from interplab.engine.backends import HFBackend
from interplab.errors import InterplabError

PACKAGE = Path(ilab.__file__).resolve().parent
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def _outside_engine():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith("engine/") and not rel.startswith("zoo/"):
            yield rel, ast.parse(path.read_text(), rel)


def test_generation_and_hook_managers_live_in_the_engine():
    found = []
    for rel, tree in _outside_engine():
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "HookManager" or (
                    isinstance(node, ast.Attribute) and node.attr == "HookManager"):
                found.append(f"{rel}:{node.lineno} HookManager")
            if isinstance(node, ast.Attribute) and node.attr == "generate" and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "model":
                found.append(f"{rel}:{node.lineno} .model.generate")
    assert not found, found


def test_no_code_outside_the_engine_branches_on_a_backend():
    """No comparison with a backend's name ('hf', 'vllm') and no import of the vLLM backend outside the engine:
    callers pass backend= through, the engine chooses. Not checked: Lab.load's engine= option, which names what to
    start at load."""
    found = []
    for rel, tree in _outside_engine():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "engine" \
                    and rel == "lab.py":  # Lab.load(engine="vllm"): start a vLLM engine after loading
                continue
            if isinstance(node, ast.Compare):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                if set(consts) & {"hf", "vllm"}:
                    found.append(f"{rel}:{node.lineno} compares with {consts}")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("engine.vllm"):
                found.append(f"{rel}:{node.lineno} imports {node.module}")
    assert not found, found


@pytest.fixture()
def lab(models, tokenizer):
    return ilab.Lab(models["gpt2"], tokenizer, model_id="tiny-gpt2")


def test_the_engine_chooses_and_names_what_is_missing(lab):
    engine = lab.engine
    assert isinstance(engine.backend(), HFBackend) and engine.backend("hf") is engine.backends["hf"]
    assert engine.vllm is None
    with pytest.raises(InterplabError, match="use_vllm"):
        engine.backend("vllm")
    with pytest.raises(InterplabError, match="use_vllm"):
        lab.patch_sweep(CLEAN, CORRUPT, metric=ilab.logit_diff(5, 9), backend="vllm")
    with pytest.raises(InterplabError, match="'hf'"):
        lab.generate(CLEAN, max_new_tokens=1, backend="tpu")
    # backend=None without a serving engine: the Hugging Face model, the same numbers
    m = ilab.logit_diff(5, 9)
    assert torch.equal(lab.patch_sweep(CLEAN, CORRUPT, metric=m, backend=None, progress=False).raw,
                       lab.patch_sweep(CLEAN, CORRUPT, metric=m, progress=False).raw)
    assert lab.sample(CLEAN, temperature=None, max_new_tokens=2).backend == "hf"


def test_forward_with_edits_and_records_equals_runs(lab):
    v = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0))
    edits = [ilab.steer("resid_post", 1, v, alpha=2.0)]
    logits, acts = lab.engine.forward([CLEAN, CORRUPT], edits, record=[("resid_pre", 1)])
    run = lab.run([CLEAN, CORRUPT], edits, cache=[("resid_pre", 1)])
    assert torch.equal(logits, run.last_logits) and torch.equal(acts["resid_pre", 1], run.cache["resid_pre", 1])
    logits, _ = lab.engine.forward([CLEAN, CORRUPT], per_prompt=[edits, []], backend="hf")
    assert torch.allclose(logits[0], lab.run(CLEAN, edits).last_logits[0], atol=1e-5)
    assert torch.allclose(logits[1], lab.run(CORRUPT).last_logits[0], atol=1e-5)


@pytest.mark.parametrize("site,cells", [("resid_pre", [(3, None), (-1, None), (None, None)]),
                                        ("z", [(None, 1), (-2, 0)]),
                                        ("attn_out", [(-1, None), (-4, None)])])
def test_a_sweeps_cells_equal_one_patched_run_each(lab, site, cells):
    """HFBackend.sweep_cells (one batched forward resumed at the layer, cached keys and values before the first
    changed position) against ilab.patch of each cell in a plain lab.run."""
    layer = 1
    start = layer + 1 if site == "resid_post" else layer
    base, source = lab.run(CORRUPT, cache=[(site, layer), ("resid_pre", start)]), lab.run(CLEAN, cache=[(site, layer)])
    engine = lab.engine
    ids, mask, lengths = engine.encode([CORRUPT])
    n = lengths[0]
    # each cell with the first position it changes: the forward computes from the chunk's earliest one
    cells = [((p % n, h), p % n) if p is not None else ((None, h), 0) for p, h in cells]
    got = engine.backend("hf").sweep_cells(engine, site, layer, cells, [CORRUPT], ids=ids, mask=mask,
                                           lengths=lengths, hidden=base.cache["resid_pre", start],
                                           source=source.cache[site, layer], n_heads=lab.n_heads)
    assert got.shape == (len(cells), lab.model.config.vocab_size)
    for row, ((p, h), _) in zip(got, cells):
        want = lab.run(CORRUPT, [ilab.patch(site, layer, pos=p, head=h, source=source)]).last_logits[0]
        assert torch.allclose(row.float(), want.float(), atol=1e-4)
    assert (got.float() - base.last_logits.float()).abs().max() > 1e-3  # the patches changed something


def test_steering_generate_takes_a_lab_and_runs_the_hugging_face_model(lab):
    import warnings

    from interplab.analyses import steering

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing deprecated is reached
        got = steering.generate(lab, CLEAN, [ilab.zero("attn_out", 0)], max_new_tokens=3)
        hooks = steering.bind_hooks(lab, [ilab.zero("attn_out", 0)])
        try:
            assert lab.hooks() and {h["owner"] for h in lab.hooks()} == {"interplab.bound"}
        finally:
            hooks.remove_all()
    assert got.texts == lab.generate(CLEAN, [ilab.zero("attn_out", 0)], max_new_tokens=3, backend="hf").texts
    assert lab.hooks() == []

"""Code blocks of the docs run as written. docs/SCALE.md's vLLM block: every name it uses is defined in it, its
scored tokens are single tokens of the model it loads, and every call exists with those arguments. It runs here on
the Hugging Face engine (engine="vllm" and backend="vllm" taken out: the main environment has no vLLM); on vLLM,
as written, in tests/vllm_engine/test_doc_block.py, in the vLLM environment."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _block_after(page: Path, heading: str) -> str:
    """The first ```python block after a heading."""
    return page.read_text().split(heading, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def test_scale_md_vllm_block_runs_on_the_embedded_model(monkeypatch):
    block = _block_after(ROOT / "docs/SCALE.md", "## Serving engines (vLLM)")
    assert 'engine="vllm"' in block and 'backend="vllm"' in block  # what is replaced below is really there
    here = block.replace(', engine="vllm"', "").replace(', backend="vllm"', ', backend="hf"')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scope: dict = {}
    exec(compile(here, "docs/SCALE.md (vLLM block)", "exec"), scope)
    samples = scope["s"]
    assert [len(t) for t in samples.texts] == [16, 16, 16]
    assert samples.scores.shape[-1] == 2 and len(samples.score_tokens) == 2  # " Paris", " Madrid": one token each


def _blocks(page: Path) -> list[str]:
    text = page.read_text()
    return [part.split("```", 1)[0] for part in text.split("```python\n")[1:]]


def test_the_readme_blocks_run_as_written_in_order(monkeypatch):
    """README.md's Python blocks, each continuing the ones before it (they use its lab, prompts and metric)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    blocks = _blocks(ROOT / "README.md")
    assert len(blocks) == 3
    scope: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md block {i + 1}", "exec"), scope)
    import interplab as ilab

    assert ilab.settle(300)  # the views the blocks opened finish their jobs (their hooks come off) before the checks
    assert "lab.patch_sweep" in scope["lab"].log.to_code() or scope["lab"].log.to_code()
    assert scope["res"].values.shape == (4, len(scope["lab"].to_str_tokens(scope["clean"])))


def test_scale_md_device_map_block_runs_on_the_embedded_model(monkeypatch, tmp_path):
    """docs/SCALE.md's first block loads a 70B model over two GPUs, the CPU and disk; here the same call, with its
    device_map and offload folder, loads the embedded model on this machine's CPU."""
    pytest.importorskip("accelerate")
    block = _blocks(ROOT / "docs/SCALE.md")[0]
    old_load = block[block.index("lab = ilab.Lab.load("):block.index(")\n", block.index("lab = ilab.Lab.load(")) + 1]
    assert "device_map=\"auto\"" in old_load and "offload_folder" in old_load
    here = block.replace(old_load, f'lab = ilab.Lab.load("ioi-tiny", device_map="auto", '
                                   f'max_memory={{"cpu": "20MiB"}}, offload_folder={str(tmp_path)!r})')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scope: dict = {}
    exec(compile(here, "docs/SCALE.md (device_map block)", "exec"), scope)
    assert "device_map=" in scope["lab"].log.to_code()  # loaded through accelerate (tests/core/test_offload.py
    # checks the numbers of models it really spreads over memory and disk)

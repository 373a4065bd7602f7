"""Code blocks of the docs run as written. docs/SCALE.md's vLLM block: every name it uses is defined in it, its
scored tokens are single tokens of the model it loads, and every call exists with those arguments. It runs here on
the Hugging Face engine (engine="vllm" and backend="vllm" taken out: the main environment has no vLLM; the engine
itself is tested in tests/vllm_engine/, in an environment of its own)."""

from __future__ import annotations

from pathlib import Path

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

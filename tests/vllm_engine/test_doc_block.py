"""docs/SCALE.md's vLLM block, as written: it starts its own engine on the embedded model, steers, samples and
sweeps on vLLM. Its steered greedy texts must be the Hugging Face engine's (the same edits, run by other code)."""

from pathlib import Path

import interplab as ilab

ROOT = Path(__file__).resolve().parents[2]


def test_scale_md_vllm_block_runs_as_written():
    page = (ROOT / "docs/SCALE.md").read_text()
    block = page.split("## Serving engines (vLLM)", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert 'engine="vllm"' in block and 'backend="vllm"' in block
    scope: dict = {}
    try:
        exec(compile(block, "docs/SCALE.md (vLLM block)", "exec"), scope)
        lab, v, prompts = scope["lab"], scope["v"], scope["prompts"]
        assert lab.engine.vllm is not None
        assert [len(t) for t in scope["s"].texts] == [16, 16, 16] and scope["s"].backend == "vllm"
        steer = [ilab.steer("resid_post", 1, v, batch=[0, 2])]
        on_vllm = lab.generate(prompts, steer, max_new_tokens=4)
        on_hf = lab.generate(prompts, steer, max_new_tokens=4, backend="hf")
        assert on_vllm.texts == on_hf.texts
    finally:
        if scope.get("lab") is not None and scope["lab"].engine.vllm is not None:
            scope["lab"].engine.vllm.close()

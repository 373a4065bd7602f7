"""Memo-key benchmark: what it costs to read the model's state (weights' versions, hooks, modes) on every run.

    python benchmarks/bench_memo.py            # GPT-2-small-shaped random model, the 15-token IOI prompt, 1 thread

Prints the median time of interplab.memo.model_state, of a memo hit (lab.run of a memoised prompt, key included)
and of a plain forward of the same prompt, measured in the same run, with their ratios. Goal: the key < 1 ms.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.engine import model_state  # noqa: E402
from interplab.zoo import random_model  # noqa: E402

PROMPT = "When Mary and John went to the store, then John gave a drink to"


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    model, tok = random_model("gpt2-small")
    lab = ilab.Lab(model, tok)
    ids = lab.to_tokens(PROMPT)
    n_tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    n_modules = sum(1 for _ in model.modules())
    key = median_ms(lambda: model_state(model), 500)
    lab.run(PROMPT)
    hit = median_ms(lambda: lab.run(PROMPT), 500)

    def forward():
        with torch.no_grad():
            model(input_ids=ids)
    fwd = median_ms(forward, 20)
    print(f"GPT-2-small shape: {n_tensors} parameters/buffers, {n_modules} modules, {ids.shape[1]} tokens, 1 thread")
    print(f"{'':34}{'ms':>8}{'vs forward':>12}")
    for name, ms in (("memo key (model_state)", key), ("memo hit (lab.run, key included)", hit),
                     ("plain forward", fwd)):
        print(f"{name:34}{ms:8.3f}{ms / fwd:12.4f}")
    print(f"goal: key < 1 ms -> {'met' if key < 1 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""The same inputs give the same bits whichever thread runs the forward, the Lab's worker or the caller, however busy
the machine is (issue #53 item 2).

A thread keeps the torch intra-op thread count it had at its first torch call: a torch.set_num_threads in the
notebook afterwards does not reach an older worker thread, and a forward split over two threads adds its reductions
in another order than one thread's (a 768-wide GPT-2: logits 1.7e-6 apart). So the worker runs each job with the
count of the thread that submitted it (interplab.worker). Without that, this test fails: the worker thread below is
made while the caller computes with 2 threads, then the caller changes to 1 (and back).

Same code path on both threads, so the results must be bit-identical: torch.equal, not a tolerance."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import interplab as ilab

PROMPTS = ["When Mary and John went to the store, John gave a drink to"] * 2


@pytest.fixture(scope="module")
def wide_lab():
    """A 2-layer, 768-wide GPT-2, random weights: its matrix products and reductions are large enough to be split
    over two threads (a tiny test model's never are, so its bits never depend on the thread count)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from interplab.zoo import gpt2_tokenizer

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=768, n_head=12, vocab_size=len(tok))).eval()
    return ilab.Lab(model, tok)


@pytest.fixture()
def busy_machine():
    """Two processes spinning on the CPU while the test runs (the first report came from a loaded machine)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _run(lab):
    """lab.run with a cache and a patch edit, computed afresh (the memo emptied: no earlier result is handed back)."""
    lab.engine.clear_memo()
    run = lab.run(PROMPTS, edits=[ilab.patch("resid_pre", 1, pos=4, source=["When John and Mary went to the store, "
                                                                           "Mary gave a drink to"] * 2)],
                  cache=["resid_post"])
    return [run.logits, run.cache["resid_post", 1], run.cache["resid_post", 0]]


def _on_worker(lab, fn):
    out = {}
    assert lab.engine.worker.submit("thread-bits", fn, done=lambda r: out.update(result=r),
                             error=lambda e: out.update(error=e))
    assert lab.engine.worker.join(120)
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_the_worker_and_the_caller_give_the_same_bits_under_load(wide_lab, busy_machine):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _on_worker(wide_lab, lambda: torch.ones(4) + 1)  # the worker thread's first torch call: 2 threads
        for caller in (1, 2, 1):  # the caller's later choices, which that thread never sees by itself
            torch.set_num_threads(caller)
            mine = _run(wide_lab)
            theirs = _on_worker(wide_lab, lambda: _run(wide_lab))
            for name, a, b in zip(("logits", "resid_post 1", "resid_post 0"), mine, theirs):
                assert torch.equal(a, b), (caller, name, float((a - b).abs().max()))
            assert torch.get_num_threads() == caller  # the job's count is the caller's; the caller's is left as is
    finally:
        torch.set_num_threads(before)

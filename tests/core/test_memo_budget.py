"""The memo is bounded in bytes, per device (issue #46): many long runs on a big vocabulary stay within it, a result
bigger than the budget is returned and not kept, and reading a run gives the numbers of a plain forward."""

from __future__ import annotations

import gc

import psutil
import pytest
import torch
import transformers as tf
from _fake_device import FakeDevice

import interplab as ilab
from interplab.engine.memo import default_memo_budget, tensor_bytes

VOCAB = 50257
MIB = 2**20


@pytest.fixture(scope="module")
def wide():
    """A GPT-2 shape with GPT-2's vocabulary and 1024 positions, but narrow (so a 1000-token run is fast): a run's
    fp32 logits are 1000 x 50257 x 4 bytes = 201 MB, most of what it holds."""
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=1024, vocab_size=VOCAB, bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def _long_prompt(tokenizer, i: int, n: int = 1000) -> str:
    words = f"prompt {i}: " + " ".join(["Mary", "John", "store", "drink", "Paris", "Rome"][(i + k) % 6]
                                        for k in range(n))
    ids = tokenizer(words)["input_ids"][:n]
    return tokenizer.decode(ids)


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def test_many_long_runs_stay_within_the_budget(wide, tokenizer):
    lab = ilab.Lab(wide, tokenizer)
    budget = lab.engine.memo.budget("cpu")
    assert budget == default_memo_budget("cpu") <= 512 * MIB
    prompts = [_long_prompt(tokenizer, i) for i in range(16)]
    assert all(len(lab.to_str_tokens(p)) >= 990 for p in prompts)
    before, peak_held = _rss(), 0
    for p in prompts:
        lab.run(p, log=False)
        peak_held = max(peak_held, lab.engine.memo.held().get("cpu", 0))
        assert lab.engine.memo.held().get("cpu", 0) <= budget
    grown = _rss() - before
    assert peak_held > budget // 2  # it did keep runs: the bound, not an empty memo
    assert grown <= 2**30, f"16 runs of 1000 tokens grew the process by {grown / MIB:.0f} MiB"
    # the newest runs are the ones kept, and reading one gives a plain forward's numbers
    last = lab.run(prompts[-1], log=False)
    assert lab.engine.memo.get(lab.engine.memo.key(lab.engine.memo.requests()[-1])) is last
    ids = torch.tensor([tokenizer(prompts[-1])["input_ids"]])
    with torch.no_grad():
        plain = wide(input_ids=ids).logits
    assert torch.equal(last.logits, plain) and torch.equal(last.last_logits, plain[:, -1])


def test_a_result_bigger_than_the_budget_is_returned_not_kept(wide, tokenizer):
    lab = ilab.Lab(wide, tokenizer, memo_budget=100 * MIB)
    p = _long_prompt(tokenizer, 99)
    run = lab.run(p, log=False)
    assert run.held_logits.nbytes > 100 * MIB and len(lab.engine.memo) == 0 and lab.engine.memo.held() == {}
    small = lab.run("When Mary and John went", log=False)  # small ones are kept
    assert lab.run("When Mary and John went", log=False) is small and len(lab.engine.memo) == 1
    assert torch.equal(run.logits, lab.run(p, log=False).logits)


def test_oldest_out_first_and_sizes_by_storage(tokenizer, models):
    lab = ilab.Lab(models["gpt2"], tokenizer, memo_budget=0)
    assert lab.run("When Mary", log=False) is not lab.run("When Mary", log=False)  # a budget of 0 keeps nothing
    lab = ilab.Lab(models["gpt2"], tokenizer)
    runs = [lab.run(p, log=False) for p in ("When Mary", "When John", "When Alice")]
    one = tensor_bytes(runs[0])["cpu"]
    assert one == sum(t.untyped_storage().nbytes() for t in (runs[0].held_logits, runs[0].input_ids,
                                                             runs[0].attention_mask))
    t = torch.zeros(100)
    assert tensor_bytes([t, t[:10], {"a": t}]) == {"cpu": 400}  # a storage once, a view as its whole storage
    sizes = [tensor_bytes(r)["cpu"] for r in runs]
    lab.engine.memo._budget, lab.engine.memo._budgets = None, {"cpu": sizes[1] + sizes[2]}  # room for the newest two
    lab.engine.memo.clear()
    for p in ("When Mary", "When John", "When Alice"):
        lab.run(p, log=False)
    assert [r[1] for r in lab.engine.memo.requests()] == [("When John",), ("When Alice",)]  # the oldest went


def test_each_device_has_its_own_budget(tokenizer, models):
    lab = ilab.Lab(models["gpt2"], tokenizer, memo_budget={"cpu": 10 * MIB, "cuda": 123})
    with FakeDevice(lab.model):
        lab.run("When Mary and John went to the store", cache=["resid_post"], log=False)  # > 123 bytes on cuda:0
        assert len(lab.engine.memo) == 0
    memo = lab.engine.memo
    assert memo.budget("cuda:0") == 123 and memo.budget("cuda:1") == 123 and memo.budget("cpu") == 10 * MIB
    lab = ilab.Lab(models["gpt2"], tokenizer, memo_budget={"cpu": 10 * MIB, "cuda": 10 * MIB})
    with FakeDevice(lab.model):
        run = lab.run("When Mary and John went to the store", cache=["resid_post"], log=False)
        held = lab.engine.memo.held()
    assert set(held) == {"cpu", "cuda:0"} and held["cuda:0"] >= run.held_logits.nbytes


def test_memo_budget_is_checked_and_passed_through_load():
    lab = ilab.Lab.load("ioi-tiny", memo_budget=12345)
    assert lab.engine.memo.budget("cpu") == 12345
    for bad in (-1, 1.5, "1GiB", {"nope": 1}, True):
        with pytest.raises(ilab.InterplabError, match="memo_budget"):
            ilab.Lab(lab.model, lab.tokenizer, memo_budget=bad)

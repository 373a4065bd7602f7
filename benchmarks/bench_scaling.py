"""Cost of a residual-stream patching sweep as prompts grow (issue #16), each row one run:

    python benchmarks/bench_scaling.py                                   # GPT-2-small, 15 / 64 / 256 tokens, CPU
    python benchmarks/bench_scaling.py --models gpt2-small,pythia-410m,llama-1b --device cuda   # the whole table
    python benchmarks/bench_scaling.py --quick                           # a 2-layer model, for a smoke test

For each model shape (random weights, real GPT-2 tokenizer) and prompt length, a resid_pre (layer x position)
sweep of the logit difference, the pair differing at the FIRST token (the worst case: after layer 0 every position
differs, so almost every cell runs), timed three ways in the same process:
  (a) the plain hook loop, one hooked forward of the whole prompt per cell (timed on a sample of cells, spread over
      layers and positions, when the whole loop would take over --loop-budget seconds, and said so);
  (b) interplab's exact sweep (batched; each patched forward starts at the patched layer and at the patched
      position, earlier keys and values from the cached corrupt run; last-position unembedding only);
  (c) interplab's attribution sweep (one forward and one backward per run).
Peak memory above the loaded model is read per method (CUDA: max_memory_allocated; CPU: the process's peak RSS,
reset through /proc/self/clear_refs). (b) is checked against (a) on the cells (a) ran.
Writes/replaces a "## Cost as prompts grow (<device>)" section of benchmarks/RESULTS.md (unless --no-write), and
with --json PATH the rows as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.zoo import gpt2_tokenizer  # noqa: E402

ANSWER, WRONG = " Mary", " John"
# plain words that keep their tokens when a prefix is decoded and encoded again
TEXT = ("When Mary and John went to the store on a cold morning in the middle of the long winter, they saw that the "
        "old man who sold bread at the corner had left his cart by the road, and so they waited for him to come back "
        "while the wind blew down the street and the children ran home from school with their books under their arms. "
        "After a while the man came back with a small dog, and he told them that the bread was still warm from the "
        "oven, so they bought two loaves and a cake for the party that their friends would hold at the house near the "
        "river, where the lights were already on and the music could be heard from far away. Then John gave a drink "
        "to")

# shapes of the public checkpoints, random weights (no download); vocabularies cover the GPT-2 tokenizer's ids
SHAPES = {
    "gpt2-tiny": ("gpt2", dict(n_layer=2, n_head=4, n_embd=64, vocab_size=50257, n_positions=1024)),
    "gpt2-small": ("gpt2", dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024)),
    "pythia-410m": ("gpt_neox", dict(num_hidden_layers=24, num_attention_heads=16, hidden_size=1024,
                                     intermediate_size=4096, vocab_size=50304, rotary_pct=0.25,
                                     max_position_embeddings=2048, tie_word_embeddings=False)),
    "llama-1b": ("llama", dict(num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, hidden_size=2048,
                               intermediate_size=8192, vocab_size=128256, max_position_embeddings=2048,
                               tie_word_embeddings=True, rope_theta=500000.0)),
}


def build(name: str, device: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, size = SHAPES[name]
    tok = gpt2_tokenizer()
    cfg = AutoConfig.for_model(kind, bos_token_id=50256, eos_token_id=50256, pad_token_id=50256, **size)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model.eval()
    return model, tok


def pair(tok, n: int) -> tuple[str, str]:
    """A clean prompt of exactly n tokens ending in " to", and its corrupt twin differing at token 0."""
    ids = tok(" ".join([TEXT] * (1 + n // 100)))["input_ids"]  # the paragraph repeated as often as needed
    clean = tok.decode(ids[: n - 1] + ids[-1:])
    corrupt = "After" + clean[len("When"):]
    for text in (clean, corrupt):
        assert len(tok(text)["input_ids"]) == n, (n, text)
    return clean, corrupt


def sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Peak:
    """Peak memory above what is held when the block starts (bytes)."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self):
        gc.collect()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            _trim_heap()  # the base is what is held, not free memory an earlier method left in the C heap
            Path("/proc/self/clear_refs").write_text("5")
            self.base = _status("VmRSS")
        return self

    def __exit__(self, *exc):
        sync(self.device)
        top = torch.cuda.max_memory_allocated() if self.device.startswith("cuda") else _status("VmHWM")
        self.bytes = max(0, top - self.base)


def _trim_heap() -> None:
    """glibc's malloc_trim(0): the C heap's free pages back to the system (nothing elsewhere)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def hooked_loop(model, tok, layers_path: str, clean: str, corrupt: str, cells, device: str):
    """(a): one forward of the whole corrupt prompt per cell, the clean residual copied in by a pre-hook."""
    layers = model.get_submodule(layers_path)
    ci = tok(clean, return_tensors="pt")["input_ids"].to(device)
    xi = tok(corrupt, return_tensors="pt")["input_ids"].to(device)
    a, w = tok(ANSWER)["input_ids"][0], tok(WRONG)["input_ids"][0]
    saved = {}

    def grab(l):
        def fn(mod, args, kwargs):
            saved[l] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        return fn

    hs = [layers[l].register_forward_pre_hook(grab(l), with_kwargs=True) for l in range(len(layers))]
    try:
        with torch.no_grad():
            model(ci)
    finally:
        for h in hs:
            h.remove()
    out = {}
    for l, p in cells:
        def put(mod, args, kwargs, l=l, p=p):
            if args:
                x = args[0].clone()
                x[:, p] = saved[l][:, p]
                return (x, *args[1:]), kwargs
            x = kwargs["hidden_states"].clone()
            x[:, p] = saved[l][:, p]
            return args, {**kwargs, "hidden_states": x}
        h = layers[l].register_forward_pre_hook(put, with_kwargs=True)
        try:
            with torch.no_grad():
                logits = model(xi).logits[0, -1]
        finally:
            h.remove()
        out[l, p] = float(logits[a] - logits[w])
    return out


def sample_cells(n_layers: int, n_pos: int, k: int):
    """k cells spread over the grid (every layer, positions strided), for timing the loop on a sample."""
    cells = [(l, p) for l in range(n_layers) for p in range(n_pos)]
    if k >= len(cells):
        return cells
    step = len(cells) / k
    return [cells[int(i * step)] for i in range(k)]


def one_row(name: str, n: int, device: str, loop_budget: float, max_batch: int, memory_budget: str | None = None
            ) -> dict:
    model, tok = build(name, device)
    lab = ilab.Lab(model, tok, model_id=name)
    clean, corrupt = pair(tok, n)
    metric = ilab.logit_diff(ANSWER, WRONG)
    n_layers = lab.n_layers
    total = n_layers * n
    with torch.no_grad():  # warm up kernels and allocators
        model(tok(corrupt, return_tensors="pt")["input_ids"].to(device))
    sync(device)

    # (a) the loop: time a few cells first, then the whole grid or a sample of it
    probe = sample_cells(n_layers, n, 4)
    t0 = time.perf_counter()
    hooked_loop(model, tok, lab.sites.arch.layers, clean, corrupt, probe, device)
    sync(device)
    per_cell = (time.perf_counter() - t0) / len(probe)
    cells = [(l, p) for l in range(n_layers) for p in range(n)]
    sampled = per_cell * total > loop_budget
    if sampled:
        cells = sample_cells(n_layers, n, max(8, int(loop_budget / 4 / per_cell)))
    with Peak(device) as mem_loop:
        t0 = time.perf_counter()
        ref = hooked_loop(model, tok, lab.sites.arch.layers, clean, corrupt, cells, device)
        sync(device)
        t_loop = (time.perf_counter() - t0) * total / len(cells)

    lab.engine.clear_memo()
    budget = {} if memory_budget is None else {"memory_budget": memory_budget}  # None: the library's default
    with Peak(device) as mem_exact:
        t0 = time.perf_counter()
        res = lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, progress=False,
                              max_batch=max_batch, **budget)
        sync(device)
        t_exact = time.perf_counter() - t0
    diff = max(abs(float(res.raw[l, p]) - v) for (l, p), v in ref.items())

    lab.engine.clear_memo()
    lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, method="attribution")  # warm-up
    lab.engine.clear_memo()
    with Peak(device) as mem_attr:
        t0 = time.perf_counter()
        est = lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, method="attribution")
        sync(device)
        t_attr = time.perf_counter() - t0
    flat = torch.stack([est.raw.flatten().float(), res.raw.flatten().float()])
    corr = float(torch.corrcoef(flat)[0, 1]) if flat.std(1).min() > 0 else float("nan")
    row = {"model": name, "tokens": n, "cells": total, "cells_run": res.cells_run,
           "loop_s": t_loop, "loop_cells_timed": len(cells), "loop_sampled": sampled,
           "exact_s": t_exact, "attr_s": t_attr, "exact_x": t_loop / t_exact, "attr_x": t_loop / t_attr,
           "max_abs_diff": diff, "attr_corr": corr, "max_batch": max_batch, "memory_budget": memory_budget,
           "mem_loop_mib": mem_loop.bytes / 2**20, "mem_exact_mib": mem_exact.bytes / 2**20,
           "mem_attr_mib": mem_attr.bytes / 2**20,
           "params_m": sum(p.numel() for p in model.parameters()) / 1e6}
    del lab, model, res, est
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def table(rows: list[dict], device: str, args) -> list[str]:
    where = (torch.cuda.get_device_name() if device.startswith("cuda")
             else f"{platform.machine()} CPU, {os.cpu_count()} cores, {torch.get_num_threads()} thread(s)")
    lines = [
        f"`python benchmarks/bench_scaling.py --models {args.models} --lengths {args.lengths} --device {device}"
        f"{f' --memory-budget {args.memory_budget}' if args.memory_budget else ''}` on "
        f"{where}, torch {torch.__version__}, fp32, {time.strftime('%Y-%m-%d')}. Random weights, real GPT-2 "
        "tokenizer; a resid_pre (layer x position) sweep of a logit difference, the pair differing at the first "
        "token (every cell from layer 1 on runs). Speed-ups are against (a) in the same run; (a) marked * was timed "
        f"on a sample of cells spread over the grid (its whole would take over {args.loop_budget:.0f} s) and scaled "
        "to the grid. Memory: peak above the loaded model during that method.",
        "",
        "| model | tokens | cells (run) | (a) hook loop s | (b) exact s | exact vs (a) | (c) attribution s | "
        "attribution vs (a) | max abs diff (b)-(a) | corr (c),(b) | peak MiB (a) / (b) / (c) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        star = "*" if r["loop_sampled"] else ""
        lines.append(
            f"| {r['model']} ({r['params_m']:.0f}M) | {r['tokens']} | {r['cells']} ({r['cells_run']}) | "
            f"{r['loop_s']:.2f}{star} | {r['exact_s']:.2f} | {r['exact_x']:.1f}x | {r['attr_s']:.3f} | "
            f"{r['attr_x']:.0f}x | {r['max_abs_diff']:.1e} | {r['attr_corr']:.2f} | "
            f"{r['mem_loop_mib']:.0f} / {r['mem_exact_mib']:.0f} / {r['mem_attr_mib']:.0f} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2-small")
    ap.add_argument("--lengths", default="15,64,256")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--loop-budget", type=float, default=600.0,
                    help="seconds: a loop that would take longer is timed on a sample of cells")
    ap.add_argument("--max-batch", type=int, default=64, help="exact sweep: rows per batched forward")
    ap.add_argument("--memory-budget", help="exact sweep: memory per batched forward, e.g. 1GiB (default: the "
                    "library's, from free memory)")
    ap.add_argument("--quick", action="store_true", help="gpt2-tiny at 15 and 64 tokens")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if args.quick:
        args.models, args.lengths, args.no_write = "gpt2-tiny", "15,64", True
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models.split(","):
        if name not in SHAPES:
            raise SystemExit(f"--models: unknown {name!r}; use {', '.join(SHAPES)}")
        for n in (int(x) for x in args.lengths.split(",")):
            t0 = time.perf_counter()
            row = one_row(name, n, args.device, args.loop_budget, args.max_batch, args.memory_budget)
            rows.append(row)
            print(json.dumps(row), f"({time.perf_counter() - t0:.0f} s)", flush=True)
    lines = table(rows, args.device, args)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if not args.no_write:
        kind = "cuda" if args.device.startswith("cuda") else "cpu"
        print("wrote", write_section(f"Cost as prompts grow ({kind})", lines))
    ok = all(r["max_abs_diff"] < 1e-3 for r in rows)
    print("exact agrees with the loop:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Memory and speed of an exact sweep over a long prompt (issue #40 item 4), against a plain hook loop:

    python benchmarks/bench_long_sweep.py                    # the issue's setup, CPU, 1 thread; writes RESULTS.md
    python benchmarks/bench_long_sweep.py --quick            # 64 tokens, a few cells: a smoke test, writes nothing
    python benchmarks/bench_long_sweep.py --memory-budget 256 --no-write      # another chunk budget (MiB)

The same run of older code, shown as a row above this code's (what the section in RESULTS.md holds):

    git worktree add /tmp/before a646d88 && cp benchmarks/bench_*.py benchmarks/results_file.py /tmp/before/benchmarks/
    (cd /tmp/before && PYTHONPATH=. python benchmarks/bench_long_sweep.py --no-write --json /tmp/before.json)
    python benchmarks/bench_long_sweep.py --also "before (a646d88)=/tmp/before.json"

Model: GPT2Config(n_layer=4, n_embd=768, n_head=12, the local GPT-2 tokenizer's vocabulary), random weights, eager
attention (--attn: sdpa, or the model's default), whose [rows, heads, positions, keys] scores make the largest
tensors. A 256-token pair differing at token 0 (after layer 0 every position differs, so every
cell from layer 1 on runs); an exact resid_pre sweep of a logit difference by layer x position, against (a) a plain
hook loop, one hooked forward of the whole corrupt prompt per cell (torch forward pre-hooks, no interplab; timed on
a sample of cells spread over the grid and scaled to the grid, as bench_scaling.py does), in the same process.
Peak memory above the loaded model and its plain forward (the process's peak RSS, reset through
/proc/self/clear_refs, from the memory held when the method starts: bench_scaling.Peak). The exact values
are checked against (a) on the cells (a) ran. Goals: the sweep's peak <= 600 MiB and >= 4x the loop.
Writes/replaces the "## Long-prompt sweep memory (cpu)" section of benchmarks/RESULTS.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from bench_scaling import ANSWER, WRONG, Peak, hooked_loop, pair, sample_cells, sync  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.zoo import gpt2_tokenizer  # noqa: E402

TITLE = "Long-prompt sweep memory (cpu)"
GOAL_MIB, GOAL_X = 600, 4.0


def build(attn: str | None = "eager"):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=len(tok), n_positions=1024)
    if attn is not None:
        cfg._attn_implementation = attn
    return GPT2LMHeadModel(cfg).eval(), tok


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    model, tok = build(None if args.attn == "default" else args.attn)
    lab = ilab.Lab(model, tok, model_id="gpt2-4x768")
    layers_path = lab.sites.arch.layers
    clean, corrupt = pair(tok, args.tokens)
    metric = ilab.logit_diff(ANSWER, WRONG)
    n_layers, n = lab.n_layers, args.tokens
    total = n_layers * n
    with torch.no_grad():  # warm up kernels and the allocator
        model(tok(corrupt, return_tensors="pt")["input_ids"])

    # (a) the plain loop, on a sample of cells spread over the grid, scaled to the grid
    cells = sample_cells(n_layers, n, args.loop_cells)
    with Peak("cpu") as mem_loop:
        t0, c0 = time.perf_counter(), time.process_time()
        ref = hooked_loop(model, tok, layers_path, clean, corrupt, cells, "cpu")
        t_loop = (time.perf_counter() - t0) * total / len(cells)
        c_loop = (time.process_time() - c0) * total / len(cells)

    # (b) the exact sweep; every forward (the sweep's two full runs too) passes the final norm once: its input's
    # rows x positions is that forward's size
    kw = {"max_batch": args.max_batch}
    takes_budget = "memory_budget" in inspect.signature(ilab.analyses.patching.patch_sweep).parameters
    if takes_budget and args.memory_budget is not None:
        kw["memory_budget"] = args.memory_budget * 2**20
    rows = []
    final_norm = model.get_submodule(lab.sites.arch.final_norm)

    def count(module, args_, kwargs_):
        x = args_[0] if args_ else kwargs_["hidden_states"]
        rows.append((int(x.shape[0]), int(x.shape[1])))

    lab.engine.clear_memo()
    gc.collect()
    with Peak("cpu") as mem_exact:
        handle = final_norm.register_forward_pre_hook(count, with_kwargs=True)
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            res = lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, progress=False, **kw)
            sync("cpu")
            t_exact, c_exact = time.perf_counter() - t0, time.process_time() - c0
        finally:
            handle.remove()
    diff = max(abs(float(res.raw[l, p]) - v) for (l, p), v in ref.items())
    widest = max(r * q for r, q in rows)
    return {
        "interplab": os.path.dirname(ilab.__file__), "tokens": n, "cells": total, "cells_run": res.cells_run,
        "loop_s": t_loop, "loop_cells_timed": len(cells), "exact_s": t_exact, "exact_x": t_loop / t_exact,
        "loop_cpu_s": c_loop, "exact_cpu_s": c_exact, "exact_cpu_x": c_loop / c_exact,
        "load": os.getloadavg()[0],
        "max_abs_diff": diff, "mem_loop_mib": mem_loop.bytes / 2**20, "mem_exact_mib": mem_exact.bytes / 2**20,
        "max_batch": args.max_batch, "memory_budget_mib": args.memory_budget if takes_budget else None,
        "takes_budget": takes_budget, "forwards": len(rows), "max_rows": max(r for r, _ in rows),
        "widest_rows_x_pos": widest, "attn": model.config._attn_implementation,
    }


def section(r: dict, args, rows: list[tuple[str, dict]]) -> list[str]:
    where = f"{platform.machine()} CPU, {os.cpu_count()} cores, {args.threads} thread(s)"
    lines = [
        f"`python benchmarks/bench_long_sweep.py` on {where}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, fp32, {r['attn']} attention, {time.strftime('%Y-%m-%d')}. GPT2Config(n_layer=4, "
        f"n_embd=768, n_head=12), random weights, the local GPT-2 tokenizer; a {r['tokens']}-token pair differing at "
        f"token 0; an exact resid_pre sweep of a logit difference by layer x position (max_batch {r['max_batch']}), "
        "against (a) a plain hook loop (one hooked forward of the whole prompt per cell), timed on "
        f"{r['loop_cells_timed']} cells spread over the grid and scaled to the grid, in the same run. Peak: the "
        "process's peak RSS above the loaded model during that method. Seconds are wall time, with the process's CPU "
        "time in brackets (one torch thread, so CPU time is the work done: the machine is shared, and its load "
        "stretches wall time). Goals (issue #40): the sweep's peak <= "
        f"{GOAL_MIB} MiB and >= {GOAL_X:.0f}x the loop.",
        "",
        "| code | cells (run) | (a) loop s | exact s | exact vs (a) | peak MiB (a) / exact | largest forward "
        "(rows x positions) | forwards | max abs diff vs (a) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, x in rows:
        lines.append(
            f"| {name} | {x['cells']} ({x['cells_run']}) | {x['loop_s']:.0f} ({x['loop_cpu_s']:.0f}) | "
            f"{x['exact_s']:.1f} ({x['exact_cpu_s']:.1f}) | {x['exact_x']:.1f}x ({x['exact_cpu_x']:.1f}x) | "
            f"{x['mem_loop_mib']:.0f} / **{x['mem_exact_mib']:.0f}** | {x['widest_rows_x_pos']} ({x['max_rows']} rows) "
            f"| {x['forwards']} | {x['max_abs_diff']:.1e} | {x['load']:.1f} |")
    met_mem = r["mem_exact_mib"] <= GOAL_MIB
    met_x = min(r["exact_x"], r["exact_cpu_x"]) >= GOAL_X
    lines += ["", f"Goals, last row: peak {r['mem_exact_mib']:.0f} MiB <= {GOAL_MIB}: "
              f"**{'met' if met_mem else 'not met'}**; {r['exact_x']:.1f}x ({r['exact_cpu_x']:.1f}x in CPU time) >= "
              f"{GOAL_X:.0f}x: **{'met' if met_x else 'not met'}**. 'forwards': batched forwards the sweep ran (its "
              "two unpatched runs included); 'load': the 1-minute load average at the end of the row's run."]
    return lines


def budget_label(r: dict) -> str:
    if not r["takes_budget"]:
        return "no memory_budget"
    budget = r["memory_budget_mib"]
    return "memory_budget default" if budget is None else f"memory_budget {budget:g} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--loop-cells", type=int, default=48, help="cells the loop is timed on (spread over the grid)")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--attn", default="eager", help="attention implementation: eager (the issue's), sdpa, or default")
    ap.add_argument("--memory-budget", type=float, default=None, help="MiB; default: the library's default")
    ap.add_argument("--quick", action="store_true", help="64 tokens, 8 loop cells, writes nothing")
    ap.add_argument("--json", help="write the figures here (JSON)")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=JSON",
                    help="a row from another run's --json (e.g. of the code before a change), shown above this one")
    ap.add_argument("--label", default="this code")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.loop_cells, args.no_write = 64, 8, True
    r = run(args)
    print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    rows = []
    for item in args.also:
        label, _, path = item.partition("=")
        with open(path) as f:
            other = json.load(f)
        rows.append((f"{label} ({budget_label(other)})", other))
    lines = section(r, args, rows + [(f"{args.label} ({budget_label(r)})", r)])
    print("\n".join(lines))
    if not args.no_write:
        print("wrote", write_section(TITLE, lines))
    ok = r["max_abs_diff"] < 1e-3
    print("exact agrees with the loop:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

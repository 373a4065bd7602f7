"""Big models on a GPU (issue #46): each figure as a ratio to a plain forward or to the arithmetic floor.

    python benchmarks/bench_gpu.py                  # small shapes (runs on a CPU in a few minutes)
    python benchmarks/bench_gpu.py --big            # gpt2-small, pythia-410m, llama-1b, llama-8b, 256 tokens
    python benchmarks/bench_gpu.py --shapes gpt2-small --dtypes bfloat16 --tokens 128 --no-write

Models are random weights in the shapes of the named configs (no download), on CUDA when there is a GPU, else the
CPU; fp32 and bf16 (bf16 on the CPU only with --dtypes). Per shape and dtype, one IOI-like prompt pair of `tokens`
tokens (the pair differs in one name) and logit_diff(" Mary", " John"):

  sweep     an exact patch_sweep of resid_pre by layer x position;
  vs loop   a plain hook loop (one full forward per cell with a forward pre-hook writing the clean value), timed on a
            sample of cells and scaled to all of them: loop / sweep (> 1: the sweep is faster);
  / floor   the sweep's time over its arithmetic floor: the FLOPs of the cells that need a forward (layer 0: the
            positions whose token differs; above: every position from the first difference), each from its own
            layer and position up, plus one unembedding row, at the peak the table prints (`peak`: the spec sheet's
            dense figure for known GPUs, else the fastest square matmul measured here in that dtype);
  peak mem  the sweep's peak device memory above what was allocated before it (CUDA only);
  rows      the sweep's default rows per forward (engine.default_max_rows); where that is not 64, the time of the
            same sweep in 64-row chunks over the default's (> 1: the bigger chunks pay);
  run/fwd   `lab.run(prompt)` (the memo cleared) over one plain forward of the model;
  click/fwd a click on a fresh heatmap cell (session.logits_view of that cell's patch, no sweep result to read
            from, the session warmed) over one plain forward;
  bf16 diff (bf16 rows) the largest |bf16 - fp32| of the sweep's normalised values on the same weights, and the
            range of the fp32 values.

Writes the "## GPU scale" section of benchmarks/RESULTS.md with the device's name (unless --no-write).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.views.patching import PatchSession  # noqa: E402

SHAPES = {  # (transformers config class, keywords): the real models' shapes
    "gpt2-small": ("GPT2Config", dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)),
    "pythia-410m": ("GPTNeoXConfig", dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                                          intermediate_size=4096, max_position_embeddings=2048, vocab_size=50304,
                                          rotary_pct=0.25, use_parallel_residual=True)),
    "llama-1b": ("LlamaConfig", dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32,
                                     num_key_value_heads=8, intermediate_size=8192, head_dim=64,
                                     max_position_embeddings=4096, vocab_size=128256, tie_word_embeddings=True)),
    "llama-8b": ("LlamaConfig", dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                                     num_key_value_heads=8, intermediate_size=14336, head_dim=128,
                                     max_position_embeddings=4096, vocab_size=128256)),
    # small stand-ins for a CPU (the default): the same families, few layers, narrow, the real vocabularies
    "gpt2-mini": ("GPT2Config", dict(n_layer=4, n_embd=256, n_head=4, n_positions=1024, vocab_size=50257)),
    "llama-mini": ("LlamaConfig", dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                                       num_key_value_heads=2, intermediate_size=768, head_dim=32,
                                       max_position_embeddings=4096, vocab_size=128256)),
}
BIG = ["gpt2-small", "pythia-410m", "llama-1b", "llama-8b"]
SMALL = ["gpt2-mini", "llama-mini"]
SPEC_PEAK = {  # dense tensor-core peak FLOP/s by GPU name and dtype (spec sheets; fp32: no TF32)
    "H200": {torch.bfloat16: 989e12, torch.float32: 67e12},
    "H100": {torch.bfloat16: 989e12, torch.float32: 67e12},
    "A100": {torch.bfloat16: 312e12, torch.float32: 19.5e12},
}
SENTENCE = "When Mary and John went to the store, John gave a drink to"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device):
    """Wall time on a GPU (synchronised); on a CPU this process's CPU time, so that other processes sharing the
    cores do not count (every figure of a run, the floor's measured peak included, uses the same clock)."""
    return time.perf_counter if device.type == "cuda" else time.process_time


def timed(fn, device, repeat: int = 3) -> float:
    """Median seconds of fn() over `repeat` calls after one warm-up."""
    fn()
    out, now = [], clock(device)
    for _ in range(repeat):
        sync(device)
        t = now()
        fn()
        sync(device)
        out.append(now() - t)
    return statistics.median(out)


def measured_peak(device, dtype) -> float:
    n = 4096 if device.type == "cuda" else 1024
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    best = min(timed(lambda: a @ b, device, repeat=5) for _ in range(2))
    return 2 * n ** 3 / best


def peak_flops(device, dtype) -> tuple[float, str]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, table in SPEC_PEAK.items():
            if key in name and dtype in table:
                return table[dtype], f"{table[dtype] / 1e12:.0f} TFLOP/s ({key} spec, dense)"
    p = measured_peak(device, dtype)
    return p, f"{p / 1e12:.3f} TFLOP/s (measured matmul)"


def make_model(shape: str, device, dtype):
    import transformers as tf

    cls_name, kw = SHAPES[shape]
    cfg = getattr(tf, cls_name)(bos_token_id=0, eos_token_id=0, attn_implementation="eager", **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def prompts(tokenizer, n_tokens: int) -> tuple[str, str]:
    """A clean/corrupt pair of about n_tokens GPT-2 tokens: the IOI sentence repeated, its first S2 name swapped
    (early: most cells of the sweep then need a forward, the case the floor describes)."""
    text = SENTENCE
    while len(tokenizer(text)["input_ids"]) + len(tokenizer(" " + SENTENCE)["input_ids"]) <= n_tokens:
        text += " " + SENTENCE
    clean = text
    corrupt = clean.replace(" John gave", " Mary gave", 1)
    return clean, corrupt


def floor_flops(model, lab, clean_ids: list[int], corrupt_ids: list[int]) -> tuple[float, float]:
    """(FLOPs of the exact resid_pre sweep's cells, FLOPs of one plain forward), from the parameter counts."""
    arch = lab.sites.arch
    layer = model.get_submodule(f"{arch.layers}.0")
    p_layer = sum(p.numel() for p in layer.parameters())
    d, vocab, n_layers, t = lab.d_model, model.config.vocab_size, lab.n_layers, len(clean_ids)
    differ = [i for i, (a, b) in enumerate(zip(clean_ids, corrupt_ids)) if a != b]
    first = min(differ)

    def cone(start: int, pos: int) -> float:  # layers start.. for positions pos..t-1, then one unembedding row
        per_pos = sum(2 * p_layer + 4 * d * (k + 1) for k in range(pos, t))
        return (n_layers - start) * per_pos + 2 * d * vocab

    sweep = sum(cone(0, p) for p in differ) + sum(cone(layer_i, p) for layer_i in range(1, n_layers)
                                                  for p in range(first, t))
    forward = n_layers * sum(2 * p_layer + 4 * d * (k + 1) for k in range(t)) + 2 * d * vocab * t
    return sweep, forward


def hook_loop_time(lab, clean, corrupt, metric, sample: int) -> tuple[float, int]:
    """Seconds a plain hook loop takes for every cell, from `sample` cells spread over the grid."""
    model, arch, dev = lab.model, lab.sites.arch, lab.engine.device
    ids_c = lab.to_tokens(clean).to(dev)
    ids_k = lab.to_tokens(corrupt).to(dev)
    n_layers, t = lab.n_layers, ids_c.shape[1]
    layers = [model.get_submodule(f"{arch.layers}.{i}") for i in range(n_layers)]
    clean_resid = {}
    hs = [m.register_forward_pre_hook(lambda m, a, i=i: clean_resid.__setitem__(i, a[0].detach()))
          for i, m in enumerate(layers)]
    with torch.no_grad():
        model(input_ids=ids_c)
    for h in hs:
        h.remove()
    cells = [(i, p) for i in range(n_layers) for p in range(t)]
    step = max(1, len(cells) // sample)
    chosen = cells[::step][:sample]
    a_id, w_id = lab.token_id(" Mary"), lab.token_id(" John")

    def one(cell):
        i, p = cell

        def patch(m, args):
            x = args[0].clone()
            x[:, p] = clean_resid[i][:, p]
            return (x, *args[1:])
        h = layers[i].register_forward_pre_hook(patch)
        try:
            with torch.no_grad():
                out = model(input_ids=ids_k).logits[0, -1]
            return float(out[a_id] - out[w_id])
        finally:
            h.remove()
    one(chosen[0])
    sync(dev)
    now = clock(dev)
    t0 = now()
    for c in chosen:
        one(c)
    sync(dev)
    return (now() - t0) / len(chosen) * len(cells), len(chosen)


def bench(shape: str, dtype, device, n_tokens: int, sample: int, fp32_values=None) -> dict:
    base = ilab.Lab.load("ioi-tiny")  # its GPT-2 tokenizer, for every shape (random weights read any id)
    model = make_model(shape, device, dtype)
    lab = ilab.Lab(model, base.tokenizer)
    clean, corrupt = prompts(base.tokenizer, n_tokens)
    metric = ilab.logit_diff(" Mary", " John")
    ids_c, ids_k = base.tokenizer(clean)["input_ids"], base.tokenizer(corrupt)["input_ids"]
    row = {"shape": shape, "dtype": str(dtype).replace("torch.", ""), "tokens": len(ids_c),
           "params": sum(p.numel() for p in model.parameters())}

    ids = torch.tensor([ids_c], device=device)

    def forward():
        with torch.no_grad():
            model(input_ids=ids)
    row["forward_s"] = timed(forward, device)

    def run():
        lab.engine.clear_memo()
        lab.run(clean, log=False)
    row["run_s"] = timed(run, device)

    session = PatchSession(lab, clean, corrupt, " Mary", " John")
    session.warm()
    session.logits_view([], log=False)
    n_layers, t = lab.n_layers, len(ids_c)
    fresh = [(layer, pos) for layer, pos in ((n_layers // 2, t - 3), (n_layers - 1, t - 2), (1, t - 4),
                                             (n_layers // 3, t - 5))]
    clicks, now = [], clock(device)
    for layer, pos in fresh:
        edit = session.cell_edit(layer, pos)  # (its source run: memoised once, outside the timing)
        sync(device)
        t0 = now()
        session.logits_view([edit], log=False)
        sync(device)
        clicks.append(now() - t0)
    row["click_s"] = statistics.median(clicks)

    lab.engine.clear_memo()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    sync(device)
    t0 = now()
    res = lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, progress=False)
    sync(device)
    row["sweep_s"] = now() - t0
    row["cells_run"] = res.cells_run
    row["peak_mib"] = ((torch.cuda.max_memory_allocated(device) - before) / 2**20) if device.type == "cuda" \
        else None
    row["values"] = res.values
    row["rows"] = ilab.engine.default_max_rows(device)  # the sweep's default chunk; where it is not 64, time 64
    if row["rows"] != 64:
        lab.engine.clear_memo()
        sync(device)
        t0 = now()
        lab.patch_sweep(clean, corrupt, "resid_pre", ("layer", "pos"), metric, progress=False, max_batch=64)
        sync(device)
        row["sweep64_s"] = now() - t0
    row["loop_s"], row["loop_sample"] = hook_loop_time(lab, clean, corrupt, metric, sample)
    row["sweep_flops"], row["forward_flops"] = floor_flops(model, lab, ids_c, ids_k)
    row["peak"], row["peak_note"] = peak_flops(device, dtype)
    if fp32_values is not None:
        row["bf16_diff"] = float((res.values - fp32_values).abs().max())
        row["fp32_range"] = float(fp32_values.max() - fp32_values.min())
    return row


def _load() -> str:
    import os
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def fits(shape: str, dtype, device) -> bool:
    """Whether the shape's weights (x 2.5, for activations, the memo and the fp32 reference) fit the device."""
    import transformers as tf

    cls_name, kw = SHAPES[shape]
    with torch.device("meta"):
        n = sum(p.numel() for p in tf.AutoModelForCausalLM.from_config(getattr(tf, cls_name)(**kw)).parameters())
    need = n * torch.empty((), dtype=dtype).element_size() * 2.5
    if device.type == "cuda":
        return need < torch.cuda.mem_get_info(device)[0]
    import psutil
    return need < psutil.virtual_memory().available


def main(argv=None) -> list[str]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big", action="store_true", help="the real shapes (gpt2-small ... llama-8b), 256 tokens")
    ap.add_argument("--shapes", nargs="*", choices=sorted(SHAPES))
    ap.add_argument("--dtypes", nargs="*", choices=["float32", "bfloat16"])
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--sample", type=int, default=None, help="cells timed for the hook loop's estimate")
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shapes = args.shapes or (BIG if args.big else SMALL)
    dtypes = [getattr(torch, d) for d in (args.dtypes or (["float32", "bfloat16"] if device.type == "cuda"
                                                            or args.big else ["float32"]))]
    tokens = args.tokens or (256 if args.big else 64)
    sample = args.sample or (64 if device.type == "cuda" else 16)
    if device.type == "cpu":
        torch.set_num_threads(1)  # CPU time then counts work only (idle threads spinning would count too)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or 'x86'}, " \
        f"{torch.get_num_threads()} threads)"
    lines = [f"Device: {name}. Command: `python benchmarks/bench_gpu.py {' '.join(argv or sys.argv[1:])}`. "
             f"Random weights in each shape; an IOI-like pair of {tokens} tokens; times are medians"
             f"{' (wall, synchronised)' if device.type == 'cuda' else ' of this process CPU time (one thread)'}."
             + ("" if device.type == "cuda" else f" Load average while starting: {_load()}."), "",
             "| shape | dtype | tokens | cells run | sweep s | hook loop s (est.) | loop / sweep | sweep FLOPs | "
             "peak assumed | sweep / floor | peak mem MiB | rows (64-row sweep / default) | run / fwd (ms) | "
             "click / fwd (ms) | bf16 vs fp32 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for shape in shapes:
        fp32_values = None
        for dtype in dtypes:
            if not fits(shape, dtype, device):
                line = f"| {shape} | {str(dtype)[6:]} | - | skipped: does not fit in this device's free memory |"
                print(line, flush=True)
                lines.append(line)
                continue
            r = bench(shape, dtype, device, tokens, sample, fp32_values if dtype != torch.float32 else None)
            if dtype == torch.float32:
                fp32_values = r["values"]
            floor_s = r["sweep_flops"] / r["peak"]
            mem = "-" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
            rows_note = f" ({r['sweep64_s'] / r['sweep_s']:.2f}x)" if "sweep64_s" in r else ""
            diff = (f"max diff {r['bf16_diff']:.4f} on a range of {r['fp32_range']:.3f}" if "bf16_diff" in r
                    else "-")
            line = (f"| {shape} | {r['dtype']} | {r['tokens']} | {r['cells_run']} | {r['sweep_s']:.2f} | "
                    f"{r['loop_s']:.2f} ({r['loop_sample']} cells) | {r['loop_s'] / r['sweep_s']:.1f}x | "
                    f"{r['sweep_flops'] / 1e12:.3f} T | {r['peak_note']} | {r['sweep_s'] / floor_s:.1f}x | "
                    f"{mem} | {r['rows']}{rows_note} | "
                    f"{r['run_s'] / r['forward_s']:.2f}x ({1e3 * r['run_s']:.1f} / {1e3 * r['forward_s']:.1f}) | "
                    f"{r['click_s'] / r['forward_s']:.2f}x ({1e3 * r['click_s']:.1f} / "
                    f"{1e3 * r['forward_s']:.1f}) | {diff} |")
            print(line, flush=True)
            lines.append(line)
    lines += ["", "A plain forward of the prompt is the `fwd` baseline (same run, same device); the floor is "
              "FLOPs / peak; `loop / sweep` > 1 means the sweep is that many times faster than one forward per "
              "cell."]
    if device.type == "cpu":
        lines += ["", "This run is on a CPU: it shows the benchmark's structure and the CPU's own ratios, with small "
                  "stand-in shapes unless --big. The GPU table (bash scripts/gpu_check.sh on a machine with one) "
                  "writes the section \"GPU scale\". The bf16 column compares sweeps of random weights; tests/gpu "
                  "bounds bf16 against fp32 on ioi-tiny's trained weights."]
    if not args.no_write:
        title = "GPU scale" if device.type == "cuda" else "GPU scale (CPU run)"
        write_section(title, lines)
    return lines


if __name__ == "__main__":
    main()

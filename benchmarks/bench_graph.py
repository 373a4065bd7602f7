"""Attribution graphs (issue #56 item 9): speed on ioi-tiny, memory as the prompt grows, and a GPU section.

    python benchmarks/bench_graph.py              # CPU; writes the "## Attribution graphs (cpu)" section of RESULTS.md
    python benchmarks/bench_graph.py --quick      # few kept rows in the memory part: a smoke test, writes nothing
    python benchmarks/bench_graph.py --no-write

1. The IOI prompt's graph on ioi-tiny with its shipped transcoders (ilab.analyses.graph.attribution_graph, all 892
   active features as nodes), in seconds, against a plain forward and backward of the model on the same prompt
   (transformers, no hooks), measured in the same run. Goal: <= 2 s.
2. Memory: a GPT-2-small-shaped model (random weights, 12 layers, width 768) with random TopK transcoders (3,072
   features, k = 8), graphs of a prompt of 64, 128 and 256 tokens keeping `--rows` feature nodes (circuit-tracer's
   max_feature_nodes; default 7,500), each in a fresh process: peak resident memory above the loaded model and
   transcoders, and the seconds per computed row. Goal: at most linear growth in tokens; 256 tokens within 4 GiB.
3. Where CUDA is present (scripts/gpu_check.sh runs this): the same graphs of a GPT-2-small and a Gemma-2-2B-shaped
   model with random transcoders at 32 and 64 tokens, in seconds (Neuronpedia's published planning time on an A40:
   about 49 s at 32 tokens, 60 s at 64).
Each time is the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.analyses.graph import attribution_graph  # noqa: E402

TITLE = "Attribution graphs (cpu)"
PROMPT = "When Mary and John went to the store, John gave a drink to"
GOAL_IOI_S, GOAL_256_MIB = 2.0, 4096


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def plain_forward_backward(lab) -> None:
    ids = lab.tokenizer(PROMPT, return_tensors="pt").input_ids
    emb = lab.model.get_input_embeddings()(ids).detach().requires_grad_(True)
    logits = lab.model(inputs_embeds=emb).logits[0, -1]
    torch.autograd.grad(logits.max(), emb)


def random_transcoders(n_layers: int, d: int, d_tc: int, k: int, seed: int = 0, device="cpu") -> ilab.Transcoders:
    g = torch.Generator().manual_seed(seed)
    return ilab.Transcoders([ilab.Transcoder(
        (torch.randn(d, d_tc, generator=g) / d ** 0.5).to(device), torch.zeros(d_tc, device=device),
        (torch.randn(d_tc, d, generator=g) / d_tc ** 0.5).to(device), torch.zeros(d, device=device), layer=layer,
        activation="topk", k=k) for layer in range(n_layers)])


def memory_child(n_tokens: int, rows: int) -> dict:
    """In a fresh process: the graph of an n_tokens prompt on random GPT-2 small; peak RSS above the loaded state."""
    import resource

    torch.manual_seed(0)
    model, tok = ilab.zoo.random_model("gpt2-small")
    lab = ilab.Lab(model, tok)
    tcs = random_transcoders(12, 768, 3072, 8)
    prompt = tok.decode(torch.randint(1000, 20000, (n_tokens,), generator=torch.Generator().manual_seed(1)))
    ids = tok(prompt)["input_ids"][:n_tokens]
    prompt = tok.decode(ids)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    g = attribution_graph(lab, prompt, tcs, max_feature_nodes=rows, progress=True)  # (a bar on stderr)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    return {"tokens": len(g.tokens), "rows": g.n_features, "active": int(g.adjacency.shape[0]), "seconds": seconds,
            "peak_mib": peak / 1024}


def gpu_section(repeats: int) -> list[str]:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from interplab.zoo import load_embedded

    lines = ["| model | tokens | nodes kept | seconds (median) |", "|---|---|---|---|"]
    _, tok = load_embedded()
    for name in ("gpt2-small", "gemma-2-2b-shaped"):
        if name == "gpt2-small":
            model, tok_m = ilab.zoo.random_model("gpt2-small")
            n_layers, d, d_tc = 12, 768, 3072
        else:
            cfg = Gemma2Config(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                               num_key_value_heads=4, head_dim=256, vocab_size=256000, attn_implementation="eager")
            model, tok_m = Gemma2ForCausalLM(cfg).eval(), tok
            n_layers, d, d_tc = 26, 2304, 16384
        lab = ilab.Lab(model.to("cuda"), tok_m)
        tcs = random_transcoders(n_layers, d, d_tc, 32, device="cuda")
        for n in (32, 64):
            prompt = " ".join(["word"] * n)
            s = median_time(lambda lab=lab, prompt=prompt, tcs=tcs: attribution_graph(
                lab, prompt, tcs, max_feature_nodes=7500, progress=False), repeats)
            lines.append(f"| {name} | {n} | 7500 | {s:.1f} |")
        del lab, model
        torch.cuda.empty_cache()
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=7500, help="kept feature nodes in the memory part")
    ap.add_argument("--tokens", default="64,128,256", help="prompt lengths of the memory part ('' skips it)")
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(memory_child(*args.child)))
        return
    torch.set_num_threads(1)
    rows = 64 if args.quick else args.rows
    lab = ilab.Lab.load("ioi-tiny")
    tcs = ilab.Transcoders.load("ioi-tiny-transcoders")
    graph = attribution_graph(lab, PROMPT, tcs, progress=False)  # (warm)
    plain = median_time(lambda: plain_forward_backward(lab), args.repeats)
    ours = median_time(lambda: attribution_graph(lab, PROMPT, tcs, progress=False), args.repeats)
    lines = [f"1. The IOI prompt's graph on ioi-tiny ({graph.n_features} active features, {len(graph.adjacency)} "
             f"nodes, one thread): **{ours:.2f} s** (goal <= {GOAL_IOI_S} s), {ours / plain:.0f}x a plain forward "
             f"and backward of the model ({plain * 1000:.1f} ms), median of {args.repeats}.", "",
             f"2. Memory, GPT-2-small-shaped (random), random TopK transcoders (3,072 features, k = 8), keeping "
             f"{rows} feature nodes; a fresh process each:", "",
             "| tokens | kept feature nodes | peak above the loaded model (MiB) | seconds | s per row |",
             "|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    results = []
    for n in [int(x) for x in args.tokens.split(",") if x]:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), str(rows)], stdout=subprocess.PIPE,
                             text=True, check=True)  # (the child's progress bar on this stderr)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        line = (f"| {r['tokens']} | {r['rows']} | {r['peak_mib']:.0f} | {r['seconds']:.0f} | "
                f"{r['seconds'] / r['rows']:.2f} |")
        lines.append(line)
        print(line, flush=True)
    if len(results) > 1:
        a, b = results[0], results[-1]
        growth = (b["peak_mib"] / max(a["peak_mib"], 1)) / (b["tokens"] / a["tokens"])
        lines += ["", f"Peak growth from {a['tokens']} to {b['tokens']} tokens: {growth:.2f}x linear "
                      f"(<= 1 is at most linear); {b['tokens']} tokens: {b['peak_mib']:.0f} MiB "
                      f"(goal <= {GOAL_256_MIB})."]
        print(lines[-1])
    if torch.cuda.is_available():
        lines += ["", "3. GPU (" + torch.cuda.get_device_name() + "):", "", *gpu_section(3)]
    else:
        lines += ["", "3. GPU: not run (no CUDA device here; scripts/gpu_check.sh runs it where there is one)."]
    if not (args.no_write or args.quick):
        write_section(TITLE, lines, weights="ioi-tiny")


if __name__ == "__main__":
    main()

"""interplab against the references it is checked against, on the same work, each in its own environment, one thread:

    python benchmarks/bench_references.py            # writes the "## Against the references (cpu)" section
    python benchmarks/bench_references.py --no-write

1. Feature statistics (issue 55 item 9): ilab.analyses.feature_stats.feature_stats of all 512 features of
   ioi-tiny-sae over N documents of its training corpus that tokenize to exactly 26 tokens (sae-dashboard takes a
   [batch, seq] token tensor without padding), against sae-dashboard's SaeVisRunner.run on the same token ids with
   the same work (the activation histogram, the top 20 and 5 interval groups of examples; it cannot leave out its
   logit table and histogram, one small product, nor a feature table, the smallest, its correlations off), in
   build/venv-saedash (scripts/sae_dashboard.sh builds it).
2. The IOI attribution graph (issue 56 item 9): ilab.analyses.graph.attribution_graph on ioi-tiny with its shipped
   transcoders, against circuit_tracer.attribute on the same model (converted to its TransformerLens backend), the
   same transcoders and the same token ids, in build/venv-saelens (scripts/circuit_tracer.sh builds it).
Each time is the best of --repeats runs, the loading of models and files not counted. A reference whose environment
is missing is reported as not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.analyses.feature_stats import feature_stats  # noqa: E402
from interplab.zoo.train_ioi_tiny_sae import corpus_texts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TITLE = "Against the references (cpu)"
PROMPT = "When Mary and John went to the store, John gave a drink to"
LENGTH = 26  # tokens per document: what sae-dashboard's [batch, seq] tensor needs, and the corpus's commonest


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def side(venv: str, script: str, *args: str) -> dict | None:
    """Run a reference's timing script in its environment; None when that environment is missing."""
    python = ROOT / "build" / venv / "bin" / "python"
    if not python.exists():
        return None
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([str(python), str(ROOT / script), *args], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{script} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=2000, help="documents of 26 tokens for the statistics")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lab = ilab.Lab.load("ioi-tiny")
    sae = ilab.SAE.load("ioi-tiny-sae")
    docs = [d for d in corpus_texts(40 * args.docs, 3) if len(lab.tokenizer(d)["input_ids"]) == LENGTH][:args.docs]
    if len(docs) < args.docs:
        print(f"only {len(docs)} documents of {LENGTH} tokens; using them", file=sys.stderr)
    ours_stats = best_of(lambda: feature_stats(lab, docs, sae, top_k=20, n_bands=5, per_band=5, cache=False,
                                               progress=False), args.repeats)
    tcs = ilab.Transcoders.load("ioi-tiny-transcoders")
    graph = ilab.analyses.graph.attribution_graph
    ours_graph = best_of(lambda: graph(lab, PROMPT, tcs, progress=False), args.repeats)
    n_features = len(graph(lab, PROMPT, tcs, progress=False).features)

    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.pt"
        torch.save(torch.tensor([lab.tokenizer(d)["input_ids"] for d in docs]), tokens)
        dash = side("venv-saedash", "tests/sae_dashboard_ref/timed_sae_dashboard.py", str(tokens), str(args.repeats))
    tracer = side("venv-saelens", "tests/circuit_tracer_ref/timed_circuit_tracer.py", str(args.repeats))

    def row(what, mine, theirs, name):
        if theirs is None:
            return f"| {what} | {mine:.2f} s | not run ({name}'s environment is missing) | |"
        return f"| {what} | {mine:.2f} s | {theirs['seconds']:.2f} s | {theirs['seconds'] / mine:.2f}x |"

    lines = [
        f"`python benchmarks/bench_references.py --docs {args.docs} --repeats {args.repeats}` (one thread, best of "
        f"{args.repeats}; loading not counted):",
        "",
        "| work | interplab | reference | reference / interplab |",
        "|---|---|---|---|",
        row(f"statistics of 512 features over {len(docs):,} documents ({len(docs) * LENGTH:,} tokens) vs "
            "sae-dashboard 0.8", ours_stats, dash, "sae-dashboard"),
        row(f"the IOI attribution graph ({n_features} active features) vs circuit-tracer 0.5", ours_graph, tracer,
            "circuit-tracer"),
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section(TITLE, lines, weights="ioi-tiny")
    return 0


if __name__ == "__main__":
    sys.exit(main())

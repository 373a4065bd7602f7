"""Speed of the feature analyses on ioi-tiny with its shipped SAE (issue #48 item 8), as ratios measured in one run:

    python benchmarks/bench_features.py          # CPU, 1 thread; writes the "## Features (cpu)" section of RESULTS.md
    python benchmarks/bench_features.py --quick      # 1,000 prompts for the scan: a smoke test, writes nothing
    python benchmarks/bench_features.py --no-write

1. Attribution over every feature x position (ilab.analyses.features.feature_attribution: 512 features x every
   position of
   8 IOI pairs, one forward of the clean prompts, one forward and backward of the corrupt ones, the encodes) against
   one forward and backward of the plain model on the same corrupt prompts (transformers, no hooks: the metric's
   gradient with respect to the input embeddings). Goal: <= 3x.
2. Top-activating contexts of all 512 features over 10,000 documents of ioi-tiny's corpus
   (ilab.analyses.features.top_contexts, its default batches and memory budget), in seconds, and against plain batched
   forwards of the same documents (transformers, no hooks). Goal: <= 60 s.
4. Feature statistics (ilab.analyses.feature_stats: density, mean and max, histogram, top and per-band examples) of
   all 512 features over the same 10,000 documents, against the same plain batched forwards; then the second call,
   which reads the disk cache. Goals: <= 60 s; the cache read <= 1 s.
3. The compute of a feature click (what the feature panel asks the kernel for): the feature's logit effects, its top
   contexts shaded (from a scan already made) and the patched last logits with the feature ablated at the clicked
   token (a resumed forward). In ms; the painting is the view's (not measured here).
Each time is the median of --repeats runs (the memo cleared before each, so every run computes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.zoo import corpus_repeated_name  # noqa: E402
from interplab.zoo.train_ioi_tiny_sae import corpus_texts  # noqa: E402

TITLE = "Features (cpu)"
GOAL_ATTR_X, GOAL_SCAN_S = 3.0, 60.0


def median_time(fn, repeats: int, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pairs(lab, n=8):
    data = corpus_repeated_name.ioi_dataset(400, "test", seed=3)
    n_tok = len(lab.to_str_tokens(data[0]["clean"]))
    same = [d for d in data if len(lab.to_str_tokens(d["clean"])) == n_tok][:n]
    answers, wrongs = [d["answer"] for d in same], [d["wrong"] for d in same]
    return [d["clean"] for d in same], [d["corrupt"] for d in same], answers, wrongs


def plain_forward_backward(lab, prompts, answers, wrongs):
    model = lab.model
    ids = lab.to_tokens(prompts)
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=emb).logits[:, -1]
    rows = torch.arange(len(prompts))
    value = (logits[rows, answers] - logits[rows, wrongs]).sum()
    torch.autograd.grad(value, [emb])


def plain_forwards(lab, texts, batch=256):
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            rows = [lab.tokenizer(t)["input_ids"][:128] for t in texts[i:i + batch]]
            n = max(map(len, rows))
            ids = torch.full((len(rows), n), lab.tokenizer.pad_token_id)
            mask = torch.zeros_like(ids)
            for r, row in enumerate(rows):
                ids[r, :len(row)], mask[r, :len(row)] = torch.tensor(row), 1
            lab.model(input_ids=ids, attention_mask=mask)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lab = ilab.Lab.load("ioi-tiny")
    sae = ilab.SAE.load("ioi-tiny-sae")
    clear = lab.engine.clear_memo

    clean, corrupt, answer, wrong = pairs(lab)
    metric = ilab.logit_diff(answer, wrong)
    answers, wrongs = (torch.tensor([lab.token_id(t) for t in ts]) for ts in (answer, wrong))
    attr = median_time(lambda: ilab.analyses.features.feature_attribution(lab, clean, corrupt, sae, metric),
                       args.repeats,
                       clear)
    plain = median_time(lambda: plain_forward_backward(lab, corrupt, answers, wrongs), args.repeats)
    n_pos = len(lab.to_str_tokens(clean[0]))

    n_docs = 1000 if args.quick else 10_000
    texts = corpus_texts(n_docs, seed=2)
    t = time.perf_counter()
    top = ilab.analyses.features.top_contexts(lab, texts, sae, k=10, progress=False)
    scan = time.perf_counter() - t
    t = time.perf_counter()
    plain_forwards(lab, texts)
    scan_plain = time.perf_counter() - t

    import tempfile

    from interplab.analyses.feature_stats import feature_stats

    with tempfile.TemporaryDirectory() as cache:
        os.environ["INTERPLAB_CACHE"] = cache
        t = time.perf_counter()
        feature_stats(lab, texts, sae, progress=False)
        stats_s = time.perf_counter() - t
        t = time.perf_counter()
        feature_stats(lab, texts, sae, progress=False)
        stats_read = time.perf_counter() - t

    prompt = clean[0]
    feature = int(lab.feature_acts(prompt, sae)[0, -1].argmax())
    panel = lab.feature(sae, feature)

    def click():
        panel.logit_effects()
        top.examples(feature, n=5)
        lab.engine.last_logits(prompt, [panel.ablate(pos=n_pos - 1)], log=False)
    lab.engine.warm(prompt)
    click_ms = 1000 * median_time(click, args.repeats)

    lines = [
        f"ioi-tiny, its shipped SAE ({sae.d_sae} features at {sae.hook_name}), {args.threads} CPU thread(s), median of "
        f"{args.repeats}; `python benchmarks/bench_features.py`.",
        "",
        "| measure | interplab | baseline | ratio | goal |",
        "|---|---|---|---|---|",
        f"| attribution, {sae.d_sae} features x {n_pos} positions x {len(clean)} pairs | {attr * 1000:.1f} ms | "
        f"{plain * 1000:.1f} ms (one forward + backward, plain model) | {attr / plain:.2f}x | <= {GOAL_ATTR_X:g}x |",
        f"| top contexts, {sae.d_sae} features over {n_docs:,} documents | {scan:.1f} s | {scan_plain:.1f} s (plain "
        f"batched forwards) | {scan / scan_plain:.2f}x | <= {GOAL_SCAN_S:g} s |",
        f"| feature statistics, {sae.d_sae} features over {n_docs:,} documents | {stats_s:.1f} s | {scan_plain:.1f} s "
        f"(plain batched forwards) | {stats_s / scan_plain:.2f}x | <= {GOAL_SCAN_S:g} s |",
        f"| the same statistics read back from the disk cache | {stats_read:.2f} s | | | <= 1 s |",
        f"| a feature click's compute (logit effects, 5 shaded contexts, ablated logits) | {click_ms:.1f} ms | | | "
        f"(painting: the view's) |",
    ]
    print("\n".join(lines))
    ok = attr / plain <= GOAL_ATTR_X and (args.quick or scan <= GOAL_SCAN_S and stats_s <= GOAL_SCAN_S)
    if not (args.quick or args.no_write):
        print("wrote", write_section(TITLE, lines, weights="ioi-tiny"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""How much AtP*'s two fixes close the gap between attribution patching and exact patching.

    python benchmarks/bench_atp.py            # ioi-tiny and a random GPT-2-small-shaped model
    python benchmarks/bench_atp.py --quick    # ioi-tiny only

For each sweep (site x layout) it runs the exact sweep once and the attribution estimate plain, with the QK fix,
with GradDrop and with both (AtP*), and prints, against exact: the correlation of the effect sizes |metric change|
over all cells, and how many of the exact top 10 cells (by size) the estimate's top 10 holds. Each estimate's time
is printed next to the exact sweep's, measured in the same run. Writes the tables to benchmarks/RESULTS_ATP.md
(unless --no-write).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from results_file import provenance  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.zoo import random_model  # noqa: E402

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
SWEEPS = [("z", ("layer", "head")), ("z", ("layer", "head", "pos")), ("q", ("layer", "head")),
          ("q", ("layer", "head", "pos")), ("k", ("layer", "head")), ("k", ("layer", "head", "pos"))]
VARIANTS = {"AtP": {}, "+QK fix": {"qk_fix": True}, "+GradDrop": {"grad_drop": True},
            "AtP* (both)": {"qk_fix": True, "grad_drop": True}}


def agreement(exact, estimate) -> tuple[float, int]:
    a = (exact.raw - exact.corrupt_value).flatten().abs()
    b = (estimate.raw - estimate.corrupt_value).flatten().abs()
    corr = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    top = len(set(a.argsort(descending=True)[:10].tolist()) & set(b.argsort(descending=True)[:10].tolist()))
    return corr, top


def table(name: str, lab) -> list[str]:
    metric = ilab.logit_diff(" Mary", " John")
    lines = [f"## {name}", "", "corr(|exact|, |estimate|) / top-10 overlap / seconds; the exact sweep's seconds first",
             "", f"| sweep | exact s | {' | '.join(VARIANTS)} |", "|---|---|" + "---|" * len(VARIANTS)]
    print("\n".join(lines), flush=True)
    for site, by in SWEEPS:
        t = time.perf_counter()
        exact = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric, progress=False)
        cells = [f"{time.perf_counter() - t:.2f}"]
        for opts in VARIANTS.values():
            if opts.get("qk_fix") and site not in ("q", "k"):
                cells.append("n/a")
                continue
            t = time.perf_counter()
            est = lab.patch_sweep(CLEAN, CORRUPT, site=site, by=by, metric=metric, method="attribution", **opts)
            s = time.perf_counter() - t
            corr, top = agreement(exact, est)
            cells.append(f"{corr:.3f} / {top} / {s:.2f}")
        lines.append(f"| {site} by {'x'.join(by)} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="ioi-tiny only")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    lines = ["# AtP* against exact patching", "",
             f"`python benchmarks/bench_atp.py` on {platform.machine()}, {os.cpu_count()} cores, torch "
             f"{torch.__version__}, {torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')}. IOI pair: "
             f"{CLEAN!r} / {CORRUPT!r}, metric logit diff ' Mary' - ' John', denoising.", ""]
    lines += table("ioi-tiny", ilab.Lab.load("ioi-tiny"))
    if not args.quick:
        model, tok = random_model("gpt2-small")
        lines += table("random GPT-2 small (12 layers x 12 heads, random weights)", ilab.Lab(model, tok))
    lines += [provenance("ioi-tiny"), ""]  # the ioi-tiny table depends on its weights
    if not args.no_write:
        (pathlib.Path(__file__).resolve().parent / "RESULTS_ATP.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()

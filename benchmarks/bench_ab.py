"""A/B: the same sweeps timed on an earlier commit's code and on this checkout, in one run, on one machine.

    python benchmarks/bench_ab.py 6a37c81          # GPT-2-small-shaped random model, 15-token IOI pair, 1 thread

Each side runs in a fresh subprocess with its own tree on PYTHONPATH (the old one from `git archive`), best of 3,
memo cleared before each sweep. Single-shot figures drift +-15% on a shared machine; an A/B in one run does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, time, torch
torch.set_num_threads(1)
import interplab as ilab
from interplab.zoo import random_model
model, tok = random_model("gpt2-small")
lab = ilab.Lab(model, tok)
clean = "When Mary and John went to the store, then John gave a drink to"
corrupt = "When Mary and John went to the store, then Mary gave a drink to"
metric = ilab.logit_diff(" Mary", " John")
out = {}
for site, by in (("resid_pre", ("layer", "pos")), ("z", ("layer", "head"))):
    times = []
    for _ in range(3):
        lab.engine.clear_memo()
        t = time.perf_counter()
        lab.patch_sweep(clean, corrupt, site=site, by=by, metric=metric, progress=False)
        times.append(time.perf_counter() - t)
    out[f"{site} by {' x '.join(by)}"] = min(times)
print(json.dumps(out))
"""


def run(tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else "HEAD~1"
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "old.tar"
        subprocess.run(["git", "archive", "-o", str(archive), commit], cwd=ROOT, check=True)
        old = Path(tmp) / "old"
        with tarfile.open(archive) as tf:
            tf.extractall(old)
        before = run(old)
    after = run(ROOT)
    print(f"best of 3, 1 thread, gpt2-small shape; {commit} vs this checkout")
    for key in before:
        print(f"  {key:24s} {before[key]:7.2f} s -> {after[key]:7.2f} s   ({before[key] / after[key]:.2f}x)")


if __name__ == "__main__":
    main()

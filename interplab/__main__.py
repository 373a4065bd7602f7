"""Command line: `python -m interplab lab | sweep | bench`.

    python -m interplab lab                 JupyterLab on notebooks/01_ioi_patching.ipynb (embedded model, offline)
    python -m interplab lab --headless      no browser: print the IOI result of the embedded model
    python -m interplab sweep --json ...    a patching sweep for scripts, as JSON on stdout
    python -m interplab bench               the benchmarks in benchmarks/ (from a source checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def _notebooks_dir() -> Path:
    """The repository's notebooks/, or (pip installs) a copy of the packaged ones in ./interplab-notebooks."""
    repo = Path(__file__).resolve().parent.parent / "notebooks"
    if repo.is_dir():
        return repo
    packaged = Path(__file__).resolve().parent / "notebooks"
    target = Path.cwd() / "interplab-notebooks"
    if packaged.is_dir() and not target.exists():
        shutil.copytree(packaged, target)
    return target


def cmd_lab(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.headless:
        return headless_demo(args.model)
    nb_dir = _notebooks_dir()
    notebook = "01_ioi_patching.ipynb"
    url = f"http://{args.ip}:{args.port}/lab/tree/{notebook}"
    print(f"interplab: starting JupyterLab on {nb_dir / notebook}")
    print(f"interplab: open {url}" + ("" if args.token == "" else " (with the token JupyterLab prints)"), flush=True)
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ip={args.ip}", f"--port={args.port}", "--no-browser",
           f"--ServerApp.root_dir={nb_dir}", f"--IdentityProvider.token={args.token}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    return subprocess.call(cmd)


def headless_demo(model: str) -> int:
    import interplab as ilab

    lab = ilab.Lab.load(model)
    print(lab)
    print("clean:  ", CLEAN)
    print("corrupt:", CORRUPT)
    metric = ilab.logit_diff(" Mary", " John")
    res = lab.patch_sweep(CLEAN, CORRUPT, "resid_pre", ("layer", "pos"), metric, progress=False)
    print(res.describe())
    tokens = res.labels["pos"]
    print("layer | " + " ".join(f"{t[:6]:>6}" for t in tokens))
    for i, layer in enumerate(res.labels["layer"]):
        print(f"{layer:5d} | " + " ".join(f"{v:6.2f}" for v in res.values[i].tolist()))
    return 0


def cmd_sweep(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import interplab as ilab

    lab = ilab.Lab.load(args.model)
    by = tuple(args.by.split(","))
    res = lab.patch_sweep(args.clean, args.corrupt, site=args.site, by=by,
                          metric=ilab.logit_diff(args.answer, args.wrong), direction=args.direction,
                          method=args.method, progress=not args.json)
    out = {"model": args.model, "site": res.site, "by": list(res.by), "direction": res.direction,
           "method": res.method, "metric": res.metric_name, "clean_value": res.clean_value,
           "corrupt_value": res.corrupt_value, "labels": res.labels, "values": res.values.tolist(),
           "raw": res.raw.tolist()}
    if args.json:
        print(json.dumps(out))
    else:
        print(res.describe())
        print(res.values)
    return 0


def cmd_bench(args) -> int:
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    if not bench.is_dir():
        print("benchmarks/ is part of the source checkout, not of the installed package.", file=sys.stderr)
        return 2
    rc = 0
    for script in args.which or ["bench_sweep.py"]:
        rc |= subprocess.call([sys.executable, str(bench / script), *args.extra])
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m interplab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("lab", help="JupyterLab on the IOI notebook")
    p.add_argument("--headless", action="store_true", help="print the IOI result instead of starting JupyterLab")
    p.add_argument("--model", default="ioi-tiny")
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--token", default="", help="JupyterLab token (empty: none; the server listens on loopback)")
    p.set_defaults(fn=cmd_lab)
    p = sub.add_parser("sweep", help="a patching sweep, headless")
    p.add_argument("--model", default="ioi-tiny")
    p.add_argument("--clean", default=CLEAN)
    p.add_argument("--corrupt", default=CORRUPT)
    p.add_argument("--answer", default=" Mary")
    p.add_argument("--wrong", default=" John")
    p.add_argument("--site", default="resid_pre")
    p.add_argument("--by", default="layer,pos")
    p.add_argument("--direction", default="denoise", choices=["denoise", "noise"])
    p.add_argument("--method", default="exact", choices=["exact", "attribution"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_sweep)
    p = sub.add_parser("bench", help="run the benchmarks (source checkout)")
    p.add_argument("which", nargs="*")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[])
    p.set_defaults(fn=cmd_bench)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except Exception as e:  # a clear one-line error, not a traceback, for bad input
        from .errors import InterplabError

        if isinstance(e, InterplabError):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())

"""The `interplab` command (also `python -m interplab`): the lab in JupyterLab, a headless demo, sweeps for scripts.

    interplab lab                   JupyterLab on notebooks/00_primer.ipynb (embedded model, offline),
                                    behind a fresh random token that the printed URL carries
    interplab lab --headless        no JupyterLab: print the IOI patching result of the embedded model
    interplab sweep --json          a patching sweep for scripts, as JSON on stdout
    interplab bench                 the speed benchmarks in benchmarks/ (a source checkout)
    interplab export NB.ipynb       an executed notebook as HTML whose widgets draw offline (--execute runs it first)
    interplab check                 a pre-flight check before a workshop: versions, the widget code, the embedded
                                    model's IOI sweep checked against an invariant; says "ready" or what to fix

`interplab lab` and `interplab export` need JupyterLab: pip install "interplab[lab]". `interplab <command> --help`
explains each option.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
NOTEBOOK = "00_primer.ipynb"  # the notebook the run sheet starts with (docs/teaching/RUN_SHEET.md; tested)
REPO_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"  # a source checkout
PACKAGED_NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"  # a wheel (pyproject's force-include)
LAB_MODULES = ("jupyterlab", "jupyter_server", "ipykernel")  # what the `lab` extra installs
# jupyter_server's default hide_globs, plus the notebooks' generator and sources (notebooks/build.py and
# notebooks/sources/ in a source checkout: the sources hold the answers open).
HIDE_GLOBS = ("__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "build.py", "sources")
PORT_TRIES = 50  # as Jupyter's own port_retries: 8888 busy -> 8889 ...


class LabError(Exception):
    """`interplab lab` cannot start: the message says why and what to do."""


# ---- lab ------------------------------------------------------------------------------------------------

def missing_lab_modules() -> list[str]:
    """The modules `interplab lab` needs that do not import (the `lab` extra not installed)."""
    missing = []
    for name in LAB_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def notebooks_dir() -> Path:
    """The repository's notebooks/, or (pip installs) ./interplab-notebooks with a copy of the packaged notebooks.

    Only *.ipynb files are copied, and a notebook already there is kept (it may hold the user's work)."""
    if REPO_NOTEBOOKS.is_dir():
        return REPO_NOTEBOOKS
    target = Path.cwd() / "interplab-notebooks"
    target.mkdir(exist_ok=True)
    copied = [shutil.copy2(nb, target / nb.name) for nb in sorted(PACKAGED_NOTEBOOKS.glob("*.ipynb"))
              if not (target / nb.name).exists()]
    if copied:
        print(f"interplab: copied {len(copied)} notebook(s) to {target}")
    return target


def _port_is_free(ip: str, port: int) -> bool:
    host = "" if ip in ("0.0.0.0", "::") else ip
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tornado binds: a TIME_WAIT port is free
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(ip: str, port: int) -> int:
    """`port` if it is free, else the next free one (port 0: any free port). Jupyter is then told to use exactly
    this port (port_retries=0), so the printed URL is the server's."""
    if port == 0:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind(("" if ip in ("0.0.0.0", "::") else ip, 0))
            return s.getsockname()[1]
    for p in range(port, min(port + PORT_TRIES, 65536)):
        if _port_is_free(ip, p):
            if p != port:
                print(f"interplab: port {port} is busy; using {p}", file=sys.stderr)
            return p
    raise LabError(f"ports {port}-{port + PORT_TRIES - 1} on {ip} are all busy. Pick another with --port "
                   f"(--port 0: any free port).")


def lab_url(ip: str, port: int, token: str, notebook: str = NOTEBOOK) -> str:
    host = socket.gethostname() if ip in ("0.0.0.0", "::", "") else (f"[{ip}]" if ":" in ip else ip)
    return f"http://{host}:{port}/lab/tree/{notebook}" + (f"?token={token}" if token else "")


def auth_token(args, port: int) -> str:
    """A fresh random token, the one given with --token, or "" with --no-token (said loudly)."""
    if args.no_token:
        print(f"WARNING: --no-token: authentication is OFF. Anyone who can connect to {args.ip}:{port} can run code "
              f"as you. Use it only where no one else can reach that port.", file=sys.stderr)
        return ""
    return args.token or secrets.token_urlsafe(24)


def server_command(args, port: int, token: str, root: Path) -> tuple[list[str], dict]:
    """The Jupyter command line and environment. The token travels in the environment (JUPYTER_TOKEN), not on the
    command line, which any local user can read with `ps`."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ip={args.ip}", f"--port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root}", f"--LabApp.default_url=/lab/tree/{NOTEBOOK}"]
    if not args.browser:
        cmd.append("--no-browser")
    cmd += [f"--ContentsManager.hide_globs={g}" for g in HIDE_GLOBS]
    if not token:
        cmd.append("--IdentityProvider.token=")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {**os.environ, "JUPYTER_TOKEN": token}
    env.setdefault("HF_HUB_OFFLINE", "1")  # the kernel: the embedded model needs no network
    return cmd, env


def _wait_until_serving(proc, ip: str, port: int, token: str, timeout: float = 120.0) -> bool:
    """True once this server answers /api/status with our token (so another program on the port cannot pass)."""
    host = "127.0.0.1" if ip in ("0.0.0.0", "") else ("::1" if ip == "::" else ip)
    host = f"[{host}]" if ":" in host else host
    req = urllib.request.Request(f"http://{host}:{port}/api/status",
                                 headers={"Authorization": f"token {token}"} if token else {})
    # our own server on this machine: never through an HTTP(S)_PROXY from the environment (a proxy cannot reach it,
    # and the lab would wait its whole timeout)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with direct.open(req, timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


def cmd_lab(args) -> int:
    offline_unless_hub(args.model)
    if args.headless:
        return headless_demo(args.model)
    missing = missing_lab_modules()  # before anything is written
    if missing:
        print(f"error: `interplab lab` needs JupyterLab, which is not installed here (missing: {', '.join(missing)}).\n"
              f"How to fix:  pip install \"interplab[lab]\"\n"
              f"(`interplab lab --headless` prints the IOI result without JupyterLab.)", file=sys.stderr)
        return 2
    try:
        port = choose_port(args.ip, args.port)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    token = auth_token(args, port)
    root = notebooks_dir()
    cmd, env = server_command(args, port, token, root)
    url = lab_url(args.ip, port, token)
    print(f"interplab: starting JupyterLab on {root / NOTEBOOK}", flush=True)
    proc = subprocess.Popen(cmd, env=env)
    # Ctrl-C reaches Jupyter too (same process group), which asks and shuts down; a TERM is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    if _wait_until_serving(proc, args.ip, port, token):
        print(f"interplab: JupyterLab is ready. Open\n\n    {url}\n", flush=True)
    elif proc.poll() is None:
        print(f"interplab: JupyterLab has not answered yet; it should come up on {url}", flush=True)
    return proc.wait()


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


# ---- sweep ----------------------------------------------------------------------------------------------

def offline_unless_hub(model: str) -> None:
    """The embedded model or a local folder needs no network: say so to the hub library (an uncached hub id would
    otherwise wait on an unreachable hub). A hub id keeps the network as the user has it: it may need a download."""
    if model == "ioi-tiny" or Path(model).exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def sweep_table(res) -> str:
    """A sweep's normalised values as a labelled text table: a row per layer, a column per cell of the row."""
    cols = res.cells.col_labels(short=True)
    grid = res.cells.grid(res.values).tolist()
    width = max(7, *(len(c) for c in cols))
    lines = ["layer ".ljust(7) + " ".join(c.rjust(width) for c in cols)]
    for layer, row in zip(res.labels["layer"], grid):
        lines.append(f"L{layer}".ljust(7) + " ".join(("-" if v != v else f"{v:.3f}").rjust(width) for v in row))
    return "\n".join(lines)


def cmd_sweep(args) -> int:
    offline_unless_hub(args.model)
    import interplab as ilab

    # A bar only on a terminal (the library's bar clears itself there); a script's stderr gets none.
    progress = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.json)
    lab = ilab.Lab.load(args.model, progress=bool(args.progress))
    by = tuple(args.by.split(","))
    res = lab.patch_sweep(args.clean, args.corrupt, site=args.site, by=by,
                          metric=ilab.logit_diff(args.answer, args.wrong), direction=args.direction,
                          method=args.method, progress=progress)
    out = {"model": args.model, "site": res.site, "by": list(res.by), "direction": res.direction,
           "method": res.method, "metric": res.metric_name, "clean_value": res.clean_value,
           "corrupt_value": res.corrupt_value, "labels": res.labels, "values": res.values.tolist(),
           "raw": res.raw.tolist()}
    if args.json:
        print(json.dumps(out))
    else:
        print(res.describe())
        print(sweep_table(res))
    return 0


# ---- bench ----------------------------------------------------------------------------------------------

def cmd_bench(args) -> int:
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    if not bench.is_dir():
        print("error: benchmarks/ is part of the source checkout, not of the installed package.", file=sys.stderr)
        return 2
    rc = 0
    for script in args.which or ["bench_sweep.py"]:
        rc |= subprocess.call([sys.executable, str(bench / script), *args.extra])
    return rc


# ---- check ----------------------------------------------------------------------------------------------

def cmd_check(args) -> int:
    """Each step prints ok or FAIL with what to do; the exit status is 0 only when everything needed works."""
    offline_unless_hub(args.model)
    failed = []

    def step(name: str, ok: bool, detail: str, fix: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'}  {name}: {detail}")
        if not ok:
            failed.append(name)
            if fix:
                print(f"      fix: {fix}")

    import platform

    step("python", sys.version_info >= (3, 10), platform.python_version(), "use Python 3.10 or newer")
    versions = {}
    for module in ("torch", "transformers", "anywidget", "ipywidgets", "interplab"):
        try:
            versions[module] = importlib.import_module(module).__version__
        except Exception as e:  # a broken install shows here, with the reason
            step(module, False, f"cannot be imported ({type(e).__name__}: {e})",
                 'pip install "interplab[lab]" (on a machine without an NVIDIA GPU, first: pip install torch '
                 "--index-url https://download.pytorch.org/whl/cpu)")
    if versions:
        step("packages", len(versions) == 5, ", ".join(f"{k} {v}" for k, v in versions.items()))
    lab_missing = missing_lab_modules()  # only `interplab lab` needs it: a note, not a failure (VS Code, Colab, ...)
    print(f"{'ok  ' if not lab_missing else 'note'}  jupyterlab: " + ("installed" if not lab_missing else
          f"not installed (missing {', '.join(lab_missing)}): the library and its widgets work in the Jupyter you "
          f"have; `interplab lab` needs the lab extra (pip install \"interplab[lab]\")"))
    static = Path(__file__).resolve().parent / "static"
    bundle = [static / name for name in ("widgets.js", "loader.js")]
    step("widget code", all(f.is_file() and f.stat().st_size > 0 for f in bundle),
         ", ".join(f"{f.name} {f.stat().st_size // 1024} kB" if f.is_file() else f"{f.name} missing"
                   for f in bundle), "reinstall interplab: its wheel carries the built widget code")
    def not_ready() -> int:
        print(f"not ready: {', '.join(failed)} failed. Fix the lines marked FAIL, then run `interplab check` again.")
        return 1

    if "torch" not in versions or "transformers" not in versions:
        return not_ready()
    import interplab as ilab

    start = time.perf_counter()
    try:
        lab = ilab.Lab.load(args.model)
    except Exception as e:
        step("model", False, f"{args.model!r} does not load: {e}")  # the load error says how to fix it
        return not_ready()
    step("model", True, f"{lab} loaded in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    res = lab.patch_sweep(CLEAN, CORRUPT, "resid_pre", ("layer", "pos"), ilab.logit_diff(" Mary", " John"),
                          progress=False)
    seconds = time.perf_counter() - start
    # Patching the whole clean residual at layer 0 where the prompts differ makes the run the clean run: 1 exactly.
    differ = [i for i, (a, b) in enumerate(zip(lab.to_str_tokens(CLEAN), lab.to_str_tokens(CORRUPT))) if a != b]
    restored = float(res.values[0, differ[0]]) if differ else float("nan")
    step("IOI sweep", abs(restored - 1) < 1e-3,
         f"{res.values.numel()} cells in {seconds:.1f} s; clean {res.clean_value:+.2f}, corrupt "
         f"{res.corrupt_value:+.2f}; layer 0 at {lab.to_str_tokens(CLEAN)[differ[0]]!r} restores {restored:.4f} "
         f"(must be 1)", "the numbers on this machine are wrong: report it with this output")
    if failed:
        return not_ready()
    if any(os.environ.get(k) for k in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_USER")):
        # a JupyterHub server (a workshop room): the lab is already open in the browser
        print("ready: this is a JupyterHub server; open the notebooks in JupyterLab here (interplab-notebooks/).")
    else:
        print("ready: start the lab with `interplab lab` (in a workshop room, log in at the hub's address instead).")
    return 0


# ---- export ---------------------------------------------------------------------------------------------

def cmd_export(args) -> int:
    src = Path(args.notebook)
    if not src.is_file():
        print(f"error: no notebook at {src}", file=sys.stderr)
        return 2
    try:
        import nbformat

        from interplab_export import InterplabHTMLExporter  # (nbconvert and nbclient)
    except ImportError as e:
        print(f"error: interplab export needs nbconvert ({e.name} is missing): pip install \"interplab[lab]\"",
              file=sys.stderr)
        return 2
    nb = nbformat.read(src, as_version=4)
    if args.execute:
        from nbclient.exceptions import CellExecutionError

        from interplab_export import execute

        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the kernel: the embedded model needs no network
        try:  # nbclient keeps the widgets' state in the notebook's metadata, which the page draws from
            execute(nb, timeout=args.timeout, path=str(src.parent))
        except CellExecutionError as e:
            print(f"error: a cell of {src} failed:\n{e}", file=sys.stderr)
            return 1
    elif not nb.metadata.get("widgets"):
        print(f"interplab: {src} holds no saved widget state, so its widgets will be empty: run it with --execute "
              f"(or save it from Jupyter with the widget state)", file=sys.stderr)
    out = Path(args.output) if args.output else src.with_suffix(".html")
    from interplab_export import UnfinishedViewsError, check_finished

    try:
        check_finished(nb, str(src))
    except UnfinishedViewsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    body, _ = InterplabHTMLExporter().from_notebook_node(
        nb, resources={"metadata": {"name": src.stem, "path": str(src.parent)}})
    out.write_text(body, encoding="utf-8")
    print(f"interplab: wrote {out} ({out.stat().st_size / 1e6:.1f} MB; opens with no network)")
    return 0


# ---- the parser -----------------------------------------------------------------------------------------

def _nonempty(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("an empty token would turn authentication off: say --no-token for that")
    return value


def _wrap(text: str) -> str:
    return textwrap.fill(text, 88)  # (RawDescriptionHelpFormatter keeps the examples' lines, so paragraphs wrap here)


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(prog="interplab", description=__doc__, formatter_class=fmt,
                                 epilog="examples:\n  interplab lab\n  interplab lab --headless\n"
                                        "  interplab sweep --json --site z --by layer,head\n"
                                        "  interplab export notebooks/01_ioi_patching.ipynb --execute\n"
                                        "  interplab check\n"
                                        "  interplab lab --help")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{lab,sweep,bench,export,check}")

    p = sub.add_parser(
        "lab", formatter_class=fmt, help="JupyterLab on the IOI notebook (needs pip install \"interplab[lab]\")",
        description=_wrap("Start JupyterLab on the IOI notebook with the embedded model (offline) and print its "
                          "URL. The server asks for a token: a fresh random one, carried in the printed URL. A source "
                          "checkout serves notebooks/; a pip install copies the notebooks to ./interplab-notebooks "
                          "first."),
        epilog="examples:\n  interplab lab                          # http://127.0.0.1:8888/lab/tree/...?token=...\n"
               "  interplab lab --port 9000 --browser\n"
               "  interplab lab --ip 0.0.0.0 --token my-workshop-secret   # reachable from other machines\n"
               "  interplab lab --headless               # the IOI result as text, no JupyterLab")
    p.add_argument("--headless", action="store_true",
                   help="print the IOI patching result as text instead of starting JupyterLab")
    p.add_argument("--model", default="ioi-tiny", metavar="NAME",
                   help="the model of --headless: 'ioi-tiny' (embedded), a hub id or a local directory "
                        "(default: %(default)s)")
    p.add_argument("--ip", default="127.0.0.1",
                   help="the address to listen on; 0.0.0.0 makes the lab reachable from other machines "
                        "(default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8888,
                   help="the port; if busy, the next free one is used and printed (0: any free port; "
                        "default: %(default)s)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token", type=_nonempty, default=None,
                      help="use this token instead of a fresh random one (e.g. one shared with a workshop)")
    auth.add_argument("--no-token", action="store_true",
                      help="turn authentication off (a warning says so): anyone who can reach the port can run code")
    p.add_argument("--browser", action=argparse.BooleanOptionalAction, default=False,
                   help="open the lab in your web browser (default: --no-browser, only print the URL)")
    p.set_defaults(fn=cmd_lab)

    p = sub.add_parser(
        "sweep", formatter_class=fmt, help="a patching sweep for scripts (JSON with --json)",
        description=_wrap("Run one activation-patching sweep headless and print the result (JSON with --json: model, "
                    "site, by, labels, values (1 = clean behaviour, 0 = corrupted), raw metric values)."),
        epilog="examples:\n  interplab sweep --json\n"
               "  interplab sweep --json --site z --by layer,head --method attribution\n"
               "  interplab sweep --model ./my-gpt2 --clean \"...\" --corrupt \"...\" --answer \" Mary\" "
               "--wrong \" John\"")
    p.add_argument("--model", default="ioi-tiny", metavar="NAME",
                   help="'ioi-tiny' (embedded), a hub id (cached) or a local directory (default: %(default)s)")
    p.add_argument("--clean", default=CLEAN, metavar="TEXT", help="the clean prompt (default: the IOI prompt)")
    p.add_argument("--corrupt", default=CORRUPT, metavar="TEXT",
                   help="the corrupt prompt, same token length (default: the IOI prompt with the names swapped)")
    p.add_argument("--answer", default=" Mary", metavar="TOKEN",
                   help="the clean answer, one token (default: '%(default)s')")
    p.add_argument("--wrong", default=" John", metavar="TOKEN",
                   help="the competing answer, one token; the metric is logit(answer) - logit(wrong) "
                        "(default: '%(default)s')")
    p.add_argument("--site", default="resid_pre",
                   help="where to patch: resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, ... "
                        "(default: %(default)s)")
    p.add_argument("--by", default="layer,pos", metavar="AXES",
                   help="the heatmap's axes, comma-separated: layer,pos or layer,head or layer "
                        "(default: %(default)s)")
    p.add_argument("--direction", default="denoise", choices=["denoise", "noise"],
                   help="denoise: clean into the corrupt run; noise: corrupt into the clean run "
                        "(default: %(default)s)")
    p.add_argument("--method", default="exact", choices=["exact", "attribution"],
                   help="exact: one forward pass per cell; attribution: a gradient estimate from two passes "
                        "(default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show progress bars (loading and sweep) on stderr (default: the sweep's bar on a "
                        "terminal, none in scripts or with --json)")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser(
        "bench", formatter_class=fmt, help="run the speed benchmarks (a source checkout)",
        description=_wrap("Run benchmark scripts from benchmarks/ (in a source checkout; not part of the wheel)."),
        epilog="examples:\n  interplab bench\n  interplab bench bench_memo.py\n"
               "  interplab bench bench_click.py --extra --clicks 30 --no-write")
    p.add_argument("which", nargs="*", metavar="SCRIPT",
                   help="benchmark scripts in benchmarks/ (default: bench_sweep.py)")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], metavar="ARG",
                   help="everything after --extra is passed to each script")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser(
        "export", formatter_class=fmt, help="a notebook as HTML whose widgets draw offline",
        description=_wrap("Write a notebook as one HTML file whose widgets (heatmaps, logit panels, ...) are drawn "
                          "from the notebook's saved widget state with no network: nothing is fetched from a CDN. "
                          "Clicking a heatmap cell of an exact sweep still shows that cell's top tokens. The same as "
                          "`jupyter nbconvert --to interplab_html`, plus --execute."),
        epilog="examples:\n  interplab export notebooks/01_ioi_patching.ipynb --execute -o ioi.html\n"
               "  interplab export my_saved_notebook.ipynb          # already run, saved with its widget state")
    p.add_argument("notebook", metavar="NOTEBOOK", help="the .ipynb file")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the HTML file to write (default: the notebook's name with .html)")
    p.add_argument("--execute", action="store_true",
                   help="run the notebook in a fresh kernel first (offline), keeping its widgets' state")
    p.add_argument("--timeout", type=int, default=600, metavar="S",
                   help="with --execute: seconds one cell may run (default: %(default)s)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser(
        "check", formatter_class=fmt, help="a pre-flight check: versions, widget code, the embedded model's sweep",
        description=_wrap("Check that this machine is ready for the lab: the Python and package versions, "
                          "JupyterLab, the widget code, and the embedded model's IOI patching sweep, whose layer-0 "
                          "cell where the prompts differ must restore exactly 1. Prints ok or FAIL for each, with "
                          "what to do; exits 0 only when everything needed works. Runs offline."),
        epilog="examples:\n  interplab check\n  interplab check --model /path/to/gpt2   # a local model folder")
    p.add_argument("--model", default="ioi-tiny", type=_nonempty,
                   help="the model to check (default: %(default)s, the embedded one)")
    p.set_defaults(fn=cmd_check)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
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

"""A real JupyterLab on 127.0.0.1 driven by Debian's Chromium (python playwright): shared by the e2e test and
benchmarks/bench_click.py.

    with JupyterServer(root_dir, work_dir) as server, launch_browser() as browser:
        nb = LabNotebook.open(browser, server, "01_ioi_patching.ipynb")
        i = nb.find_cell(r"^\\s*explorer\\s*=")
        nb.run_through(i)                       # the cells above i and cell i, as a user would
        nb.wait_heatmap(i)
        nb.click_heatmap_cell(i, row=1, col=3)  # real pixels: mouse down/up on the plot

Everything is private: JUPYTER_CONFIG_DIR / DATA_DIR / RUNTIME_DIR, workspaces, user settings and IPYTHONDIR live in
the work dir; the python3 kernelspec there points at this interpreter (the venv's python); no token, no browser, no
network beyond the loopback server. `JupyterServer.stop` shuts the kernels down over the REST API, stops the server
(SIGTERM, then SIGKILL) and kills any of its child processes still alive, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

CHROMIUM = os.environ.get("INTERPLAB_CHROMIUM", "/usr/bin/chromium")
DEFINES_EXPLORER = r"^\s*explorer\s*="  # the notebook cell whose widget the end-to-end test clicks
# The IOI pair the e2e notebooks run (notebook 01's names, "then" before S2), and their first lines
CLEAN = "When Mary and John went to the store, then John gave a drink to"
CORRUPT = "When Mary and John went to the store, then Mary gave a drink to"
LOAD_IOI = f'''import interplab as ilab
lab = ilab.Lab.load("ioi-tiny")
clean, corrupt = {CLEAN!r}, {CORRUPT!r}'''
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# JupyterLab settings that keep a headless run deterministic: every cell attached to the DOM (no virtual
# scrolling, so widgets below the fold render), no news / update checks (no network), no autosave dialogs.
USER_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def chromium_missing() -> str | None:
    """A reason to skip, or None when Chromium and python playwright are there."""
    if not pathlib.Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing: install Debian's Chromium (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python playwright is not installed (pip install playwright; no `playwright install` needed)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: pathlib.Path, sources: list[str]) -> pathlib.Path:
    """A notebook of code cells with the python3 kernelspec (so JupyterLab asks no kernel question)."""
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                   "source": src} for i, src in enumerate(sources)],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))
    return path


def _children(pid: int) -> list[int]:
    """Every descendant of pid (from /proc), deepest last."""
    parents: dict[int, list[int]] = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            ppid = int(text.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until_serving(proc: subprocess.Popen, answers, *, name: str, timeout: float, log_tail, stop) -> None:
    """Poll ``answers()`` every 0.3 s until it is true: the server started as ``proc`` answers. An OSError from it
    (refused, timed out: urllib's and requests' errors are OSErrors) means not yet. Raises RuntimeError with
    ``log_tail()`` when the process exits first; calls ``stop()`` and raises TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail()}")
        with contextlib.suppress(OSError):
            if answers():
                return
        if time.monotonic() > deadline:
            stop()
            raise TimeoutError(f"{name} did not answer in {timeout:.0f} s:\n{log_tail()}")
        time.sleep(0.3)


def file_tail(path: pathlib.Path, n: int) -> str:
    """The last ``n`` characters of a server's log file ("" while there is none)."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def answers_200(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 within 5 s (an OSError when nothing listens yet)."""
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


class JupyterServer:
    """`jupyter lab` on 127.0.0.1:<free port>, no token, private dirs under work_dir, serving root_dir."""

    def __init__(self, root_dir: pathlib.Path, work_dir: pathlib.Path, start_timeout: float = 120.0):
        self.root_dir = pathlib.Path(root_dir)
        self.work = pathlib.Path(work_dir)
        self.start_timeout = start_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.work / "jupyter.log"
        self._pids: set[int] = set()

    # ---- environment ------------------------------------------------------------------------------------------
    def env(self) -> dict:
        env = dict(os.environ)
        for name in ("config", "data", "runtime", "ipython"):
            (self.work / name).mkdir(parents=True, exist_ok=True)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.work / "config"),
            JUPYTER_DATA_DIR=str(self.work / "data"),
            JUPYTER_RUNTIME_DIR=str(self.work / "runtime"),
            IPYTHONDIR=str(self.work / "ipython"),
            JUPYTER_PLATFORM_DIRS="0",
            JUPYTER_PREFER_ENV_PATH="0",  # the private data dir (our python3 kernelspec) before the venv's
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_TOKEN", None)
        # the kernel: this interpreter (the venv's python) and the repo's interplab
        repo = str(pathlib.Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        return env

    def _install_kernelspec(self) -> None:
        """python3 in the private data dir (it wins over the venv's and the system's): argv[0] = sys.executable."""
        kdir = self.work / "data" / "kernels" / "python3"
        kdir.mkdir(parents=True, exist_ok=True)
        (kdir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "metadata": {"debugger": False},
        }, indent=1))

    def _write_settings(self) -> pathlib.Path:
        settings = self.work / "user-settings"
        for rel, value in USER_SETTINGS.items():
            p = settings / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(value))
        return settings

    def kernelspecs(self) -> dict:
        """`jupyter kernelspec list --json` as the server sees it."""
        out = subprocess.run([sys.executable, "-m", "jupyter", "kernelspec", "list", "--json"], env=self.env(),
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)["kernelspecs"]

    # ---- life cycle ---------------------------------------------------------------------------------------------
    def start(self) -> JupyterServer:
        env = self.env()
        self._install_kernelspec()
        settings = self._write_settings()
        (self.work / "workspaces").mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser", "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
            f"--ServerApp.root_dir={self.root_dir}",
            "--IdentityProvider.token=", "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.expose_app_in_browser=True",
            "--JupyterNotebookApp.expose_app_in_browser=True",  # Notebook 7's /notebooks/ pages, when installed
            f"--LabApp.workspaces_dir={self.work / 'workspaces'}",
            f"--LabApp.user_settings_dir={settings}",
            "--LabApp.news_url=", "--LabServerApp.open_browser=False",
            "--ServerApp.terminals_enabled=False",
            "--ContentsManager.allow_hidden=True",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=self.root_dir, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self._pids.add(self.proc.pid)
        wait_until_serving(self.proc, lambda: answers_200(f"{self.url}/api/status"), name="jupyter lab",
                           timeout=self.start_timeout, log_tail=self.log_tail, stop=self.stop)
        return self

    def log_tail(self, n: int = 4000) -> str:
        return file_tail(self.log_path, n)

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.url}{path}", method=method)
        with urllib.request.urlopen(req, timeout=20) as r:
            body = r.read()
        return json.loads(body) if body else None

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            self._pids.update(_children(proc.pid))  # the kernels run in sessions of their own
            with contextlib.suppress(Exception):
                for k in self.api("/api/kernels"):
                    with contextlib.suppress(Exception):
                        self.api(f"/api/kernels/{k['id']}", method="DELETE")
            self._pids.update(_children(proc.pid))
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=15)
        for pid in self._pids - {proc.pid}:  # anything the server started that outlived it, by pid
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self._log.close()

    def __enter__(self) -> JupyterServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def serving(notebook: pathlib.Path, tmp_path_factory, name: str):
    """JupyterLab serving a tmp copy of `notebook` (its own root and work folders, named after `name`)."""
    root = tmp_path_factory.mktemp(f"{name}-root")
    shutil.copy(notebook, root / notebook.name)
    with JupyterServer(root, tmp_path_factory.mktemp(f"{name}-work")) as server:
        yield server


@contextlib.contextmanager
def launch_browser():
    """Debian's Chromium, headless, via python playwright (no downloaded browsers)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


# ---- the notebook in the page ---------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NB = "window.jupyterapp.shell.currentWidget"

_JS_HELPERS = r"""
() => {
  if (window.__il) return;
  const nbw = () => window.jupyterapp.shell.currentWidget;
  const cellNode = (i) => nbw().content.widgets[i].node;
  window.__il = {
    nbw, cellNode,
    gd: (i, kind) => cellNode(i).querySelector(`.interplab-${kind} .js-plotly-plot`),
    paints: (kind, after = -1) => (window.__interplab_paints || []).filter((p) => p.widget === kind && p.t > after),
    errors: () => {
      const out = [];
      nbw().content.widgets.forEach((c, i) => {
        if (c.model.type !== "code") return;
        for (const o of c.model.outputs.toJSON()) {
          if (o.output_type === "error") out.push({ cell: i, ename: o.ename, evalue: o.evalue,
                                                    traceback: (o.traceback || []).join("\n") });
        }
      });
      return out;
    },
    run: (command, index) => {
      const nb = nbw();
      nb.content.activeCellIndex = index;
      nb.content.deselectAll();
      window.__il_run = { done: false, t0: performance.now() };
      const job = window.__il_run;
      window.jupyterapp.commands.execute(command).then(
        (ok) => { job.done = true; job.ok = ok; job.t1 = performance.now(); },
        (err) => { job.done = true; job.ok = false; job.err = String(err); job.t1 = performance.now(); });
      return job.t0;
    },
    exec: async (code) => {
      // run code in the notebook's kernel over the page's own kernel connection; the stream output as text
      const kernel = nbw().sessionContext.session.kernel;
      const future = kernel.requestExecute({ code, silent: false, store_history: false });
      let text = "", error = null;
      future.onIOPub = (msg) => {
        const t = msg.header.msg_type;
        if (t === "stream") text += msg.content.text;
        else if (t === "execute_result") text += (msg.content.data["text/plain"] || "") + "\n";
        else if (t === "error") error = `${msg.content.ename}: ${msg.content.evalue}`;
      };
      await future.done;
      if (error) throw new Error(error);
      return text;
    },
  };
  // the time a real mouse press reaches the page (capture phase, before plotly sees it)
  window.__il_clicks = [];
  window.addEventListener("mousedown", () => window.__il_clicks.push(performance.now()), true);
}
"""


class LabNotebook:
    """One notebook open in JupyterLab in its own browser context (a fresh page: the widget bundle loads cold)."""

    def __init__(self, context, page, server: JupyterServer, path: str):
        self.context, self.page, self.server, self.path = context, page, server, path
        self.page_errors: list[str] = []
        self.console: list[str] = []
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
                else None)

    @classmethod
    def open(cls, browser, server: JupyterServer, path: str, timeout: float = 120.0,
             viewport=(1400, 1000), app: str = "lab", context=None) -> LabNotebook:
        """app: "lab" (JupyterLab 4, /lab/tree/) or "notebook" (Notebook 7, /notebooks/; the `notebook` package).
        context: a browser context to open it in (one logged in to a JupyterHub, tests/room): server.url is then the
        student's server (https://NAME.hub/user/NAME) and server.origin the origins the page may load from (a tuple:
        the student's and the hub's, where its login pages are)."""
        context = context or browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        page = context.new_page()
        nb = cls(context, page, server, path)
        origin = getattr(server, "origin", server.url)

        def route(r):  # nothing but the loopback server (and inline data)
            url = r.request.url
            if url.startswith(origin) or url.startswith("data:") or url.startswith("blob:"):
                return r.continue_()
            return r.abort()

        page.route("**/*", route)
        url = f"{server.url}/lab/tree/{path}?reset" if app == "lab" else f"{server.url}/notebooks/{path}"
        page.goto(url, timeout=timeout * 1000)
        page.wait_for_function(
            f"() => !!window.jupyterapp && !!{_NB} && !!{_NB}.content && !!{_NB}.context"
            f" && {_NB}.context.isReady && {_NB}.context.path.endsWith({json.dumps(path)})",
            timeout=timeout * 1000, polling=200)
        page.evaluate(_JS_HELPERS)
        nb.wait_kernel_idle(timeout)
        return nb

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.context.close()

    # ---- kernel ---------------------------------------------------------------------------------------------------
    def dismiss_dialogs(self) -> None:
        """Accept a kernel-selection or other modal dialog if JupyterLab shows one."""
        btn = self.page.locator(".jp-Dialog .jp-mod-accept")
        if btn.count():
            btn.first.click()

    def wait_kernel_idle(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.dismiss_dialogs()
            state = self.page.evaluate(f"() => {_NB}.sessionContext.session?.kernel?.status ?? 'none'")
            if state == "idle":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kernel not idle after {timeout:.0f} s (status {state!r})\n"
                                   f"{self.server.log_tail()}")
            time.sleep(0.2)

    def exec(self, code: str, timeout: float = 60.0) -> str:
        """Run code in the notebook's kernel (over the page's kernel connection); its printed output."""
        self.page.evaluate("() => { window.__il_exec = null; }")
        self.page.evaluate("(code) => { window.__il.exec(code).then((t) => { window.__il_exec = {text: t}; },"
                           " (e) => { window.__il_exec = {error: String(e)}; }); }", code)
        self.page.wait_for_function("() => window.__il_exec !== null", timeout=timeout * 1000, polling=50)
        out = self.page.evaluate("() => window.__il_exec")
        if "error" in out:
            raise RuntimeError(f"kernel error running {code!r}: {out['error']}")
        return out["text"]

    # ---- cells ----------------------------------------------------------------------------------------------------
    def sources(self) -> list[str]:
        return self.page.evaluate(f"() => {_NB}.content.widgets.map((c) => c.model.sharedModel.getSource())")

    def find_cell(self, pattern: str) -> int:
        rx = re.compile(pattern, re.M)
        for i, src in enumerate(self.sources()):
            if rx.search(src):
                return i
        raise LookupError(f"no cell of {self.path} matches {pattern!r}")

    def run(self, command: str, index: int, timeout: float = 180.0) -> dict:
        """execute a notebook command with cell `index` active, wait until it finished; raise on cell errors."""
        self.page.evaluate("([c, i]) => window.__il.run(c, i)", [command, index])
        self.page.wait_for_function("() => window.__il_run.done", timeout=timeout * 1000, polling=100)
        job = self.page.evaluate("() => window.__il_run")
        errors = self.page.evaluate("() => window.__il.errors()")
        if errors or job.get("err"):
            errors = [{k: _ANSI.sub("", str(v)) for k, v in e.items()} for e in errors]
            raise RuntimeError(f"running {command} at cell {index} failed: {job.get('err')}\n"
                               + "\n".join(f"cell {e['cell']}: {e['ename']}: {e['evalue']}\n{e['traceback']}"
                                           for e in errors))
        return job

    def run_cell(self, index: int, timeout: float = 180.0) -> dict:
        return self.run("notebook:run-cell", index, timeout)

    def run_through(self, index: int, timeout: float = 300.0) -> None:
        """Run every cell above `index` and then cell `index` (the rest of the notebook stays unrun)."""
        if index > 0:
            self.run("notebook:run-all-above", index, timeout)
        self.run_cell(index, timeout)

    def has_widget(self, index: int, kind: str = "heatmap") -> bool:
        return self.page.evaluate("([i, k]) => !!window.__il.cellNode(i).querySelector(`.interplab-${k}`)",
                                  [index, kind])

    def wait_widget(self, index: int, kind: str, timeout: float = 60.0) -> None:
        """Until a `kind` view is drawn under cell `index`: the page renders it after the cell's run has finished
        (its code loads, then it draws), later under load."""
        try:
            self.page.wait_for_function("([i, k]) => !!window.__il.cellNode(i).querySelector(`.interplab-${k}`)",
                                        arg=[index, kind], timeout=timeout * 1000, polling=100)
        except Exception as e:
            raise AssertionError(f"no {kind} view under cell {index} after {timeout:.0f} s") from e

    # ---- widgets --------------------------------------------------------------------------------------------------
    def paints(self, kind: str, after: float = -1.0) -> list[dict]:
        return self.page.evaluate("([k, a]) => window.__il.paints(k, a)", [kind, after])

    def wait_paint(self, kind: str, after: float, timeout: float = 30.0) -> dict:
        """The first paint of a `kind` widget later than performance.now() == after; on a timeout, an error that says
        what the page saw (its last mouse presses, replies and paints)."""
        try:
            self.page.wait_for_function("([k, a]) => window.__il.paints(k, a).length > 0", arg=[kind, after],
                                        timeout=timeout * 1000, polling="raf")
        except Exception as e:
            seen = self.page.evaluate("() => ({ now: performance.now(), presses: window.__il_clicks.slice(-3),"
                                      " replies: (window.__interplab_replies || []).slice(-3),"
                                      " paints: (window.__interplab_paints || []).slice(-4) })")
            raise TimeoutError(f"no {kind} paint after t={after:.0f} in {timeout:.0f} s; the page saw {seen}; "
                               f"JS errors {self.page_errors}; console {self.console[-5:]}") from e
        return self.paints(kind, after)[0]

    def wait_heatmap(self, index: int, timeout: float = 120.0) -> None:
        """Until the heatmap in cell `index` is painted with numbers (the sweep's values)."""
        self.page.wait_for_function(
            "(i) => { const gd = window.__il.gd(i, 'heatmap'); const z = gd?.__interplab_grid?.z;"
            " return !!z && z.some((r) => r.some((v) => typeof v === 'number')); }",
            arg=index, timeout=timeout * 1000, polling=100)

    def selected_outlines(self, index: int) -> list[list[int]]:
        """The cells outlined as selected on the heatmap of cell `index` (the kernel's `selected`, echoed), sorted."""
        return self.page.evaluate(
            "(i) => [...window.__il.cellNode(i).querySelectorAll('.interplab-heatmap .il-cell-selected')]"
            ".map((d) => [Number(d.dataset.row), Number(d.dataset.col)]).sort((a, b) => a[0] - b[0] || a[1] - b[1])",
            index)

    def wait_selected(self, index: int, cells: list[list[int]], timeout: float = 30.0) -> None:
        """Until the heatmap's outlined selection is exactly `cells`."""
        want = sorted([list(c) for c in cells])
        deadline = time.monotonic() + timeout
        while (got := self.selected_outlines(index)) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"selection outlined {got}, expected {want}")
            time.sleep(0.05)

    def series_names(self, index: int) -> list[str]:
        return self.page.evaluate(
            "(i) => [...(window.__il.cellNode(i).querySelector('.interplab-logits')?.querySelectorAll("
            "'.il-series-name') ?? [])].map((d) => d.textContent)",
            index)

    def logits_text(self, index: int) -> str:
        return self.page.evaluate("(i) => window.__il.cellNode(i).querySelector('.interplab-logits')?.innerText ?? ''",
                                  index)

    def heatmap_shape(self, index: int) -> tuple[int, int]:
        return tuple(self.page.evaluate(
            "(i) => { const z = window.__il.gd(i, 'heatmap').__interplab_grid.z;"
            " return [z.length, z.reduce((m, r) => Math.max(m, r.length), 0)]; }", index))

    def cell_pixel(self, index: int, row: int, col: int) -> tuple[float, float]:
        """Page pixel of a heatmap cell's centre (scrolls the plot into view first)."""
        p = self.page.evaluate(
            """([i, row, col]) => {
                 const gd = window.__il.gd(i, 'heatmap');
                 const box0 = gd.getBoundingClientRect();
                 if (box0.top < 0 || box0.bottom > window.innerHeight) gd.scrollIntoView({ block: 'center' });
                 const fl = gd._fullLayout, box = gd.getBoundingClientRect();
                 return { x: box.left + fl.xaxis._offset + fl.xaxis.d2p(col),
                          y: box.top + fl.yaxis._offset + fl.yaxis.d2p(row) };
               }""", [index, row, col])
        return p["x"], p["y"]

    def click_heatmap_cell(self, index: int, row: int, col: int, shift: bool = False) -> float:
        """A real mouse click on a heatmap cell (with the Shift key held down on the keyboard when shift); returns
        performance.now() at the page's mousedown."""
        x, y = self.cell_pixel(index, row, col)
        n = self.page.evaluate("() => window.__il_clicks.length")
        self.page.mouse.move(x, y)
        if shift:
            self.page.keyboard.down("Shift")
        self.page.mouse.down()
        self.page.mouse.up()
        if shift:
            self.page.keyboard.up("Shift")
        self.page.wait_for_function("(n) => window.__il_clicks.length > n", arg=n, timeout=5000, polling=20)
        return self.page.evaluate("() => window.__il_clicks[window.__il_clicks.length - 1]")

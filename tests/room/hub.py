"""A real JupyterHub for the workshop room, on this machine: shared by tests/room/test_room.py and
benchmarks/bench_room.py.

    room = Room.create(work_dir)               # the shared folder: the room config, notebooks, a GPT-2 stand-in
    users = room.add_students("ilab-s", 5)     # docs/teaching/room/students.sh: real system accounts (root)
    hub = room.start_hub()                     # docs/teaching/room/jupyterhub_config.py, dummy authenticator
    token = hub.login("ilab-s1")               # the login form, then a token from the REST API
    hub.spawn("ilab-s1", token)                # the student's server, as the student
    outputs = hub.run_notebook("ilab-s1", token, "interplab-notebooks/01_ioi_patching.ipynb")
    hub.stop(); room.remove_students()

The hub runs the documented config file, changed only through its INTERPLAB_ROOM_* variables (ports, folders, the
dummy authenticator). Everything it starts is stopped by pid: the hub, the proxy, the students' servers and kernels.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pwd
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROOM_DOCS = ROOT / "docs" / "teaching" / "room"
NOTEBOOK = "interplab-notebooks/01_ioi_patching.ipynb"
PASSWORD = "room-test"  # the dummy authenticator's shared password (a closed test machine only)
GROUP = "ilab-room-test"  # the students' group of the test, not a real room's
CHP_DIR = ROOT / "build" / "chp"  # configurable-http-proxy from npm, when it is not on PATH
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness import _alive, _children, free_port  # noqa: E402


def missing_prerequisite() -> str | None:
    """A reason the room cannot run here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: it creates system users (useradd) and the hub starts servers as them"
    for tool in ("useradd", "userdel", "groupadd", "chpasswd", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (Debian: the passwd / util-linux packages)"
    try:
        import jupyterhub  # noqa: F401
        import jupyterhub_idle_culler  # noqa: F401
    except ImportError:
        return 'jupyterhub is not installed: pip install -e ".[room]" (the dev extra includes it)'
    return None


def proxy_command() -> str:
    """configurable-http-proxy: on PATH, or installed from npm into build/chp (once); raises with a reason."""
    found = shutil.which("configurable-http-proxy") or (CHP_DIR / "node_modules" / ".bin" / "configurable-http-proxy")
    if pathlib.Path(found).exists():
        return str(found)
    if shutil.which("npm") is None:
        raise FileNotFoundError("configurable-http-proxy is not installed and npm is missing to install it "
                                "(apt-get install npm, or npm install -g configurable-http-proxy)")
    CHP_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", str(CHP_DIR), "--no-audit", "--no-fund", "--loglevel=error",
                    "configurable-http-proxy@5"], check=True, timeout=300)
    return str(found)


def write_gpt2_standin(hub_cache: pathlib.Path, small: bool = False) -> None:
    """A random 2-layer GPT-2 with the real GPT-2 tokenizer, as `gpt2` in a Hugging Face cache (snapshots/ + refs/):
    what the notebooks' optional GPT-2 cell loads from the room's shared cache (the real one is 0.5 GB). small: the
    shape of GPT-2 small instead (GPT2Config's defaults: 12 layers, 768 wide, 124M parameters; random weights)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    snap = hub_cache / "models--gpt2" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (hub_cache / "models--gpt2" / "refs").mkdir()
    (hub_cache / "models--gpt2" / "refs" / "main").write_text("0" * 40)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config() if small else GPT2Config(n_layer=2, n_head=4, n_embd=64)).save_pretrained(snap)
    tok = ROOT / "interplab" / "zoo" / "gpt2_tokenizer"
    PreTrainedTokenizerFast.from_pretrained(tok).save_pretrained(snap)


class Room:
    """The shared room folder (docs/teaching/ROOM.md's /srv/interplab) in a world-readable temporary directory."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.state = root.parent / (root.name + "-state")  # the hub's database and secret: root only
        self.python = sys.executable
        self.students: list[str] = []
        self._prefix: str | None = None

    @classmethod
    def create(cls, gpt2: bool | str = True) -> Room:
        """gpt2: True, the 2-layer stand-in; "small", a GPT-2-small-shaped one; False, none."""
        # under /tmp, not pytest's tmp dirs (they are root-only, and students must read the room folder)
        root = pathlib.Path(tempfile.mkdtemp(prefix="ilab-room-"))
        room = cls(root)
        root.chmod(0o755)
        room.state.mkdir(mode=0o700)
        shutil.copytree(ROOM_DOCS, root / "room")  # as ROOM.md says: the documented files, copied
        (root / "notebooks").mkdir()
        for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
            shutil.copy(nb, root / "notebooks" / nb.name)
        if gpt2:
            write_gpt2_standin(root / "hf-home" / "hub", small=gpt2 == "small")
        for p in [root, *root.rglob("*")]:  # read-only for the students
            p.chmod(0o755 if p.is_dir() else 0o644)
        return room

    def hf_cache(self) -> pathlib.Path:
        return self.root / "hf-home" / "hub"

    # ---- the students -------------------------------------------------------------------------------------------
    def students_sh(self, *args: str) -> str:
        env = {**os.environ, "INTERPLAB_ROOM_GROUP": GROUP}
        return subprocess.run(["bash", str(self.root / "room" / "students.sh"), *args], check=True, text=True,
                              capture_output=True, timeout=120, env=env).stdout

    def add_students(self, prefix: str, n: int) -> list[str]:
        self._prefix, self._n = prefix, n
        self.students_sh("remove", prefix, str(n))  # leftovers of an interrupted run
        out = self.students_sh("add", prefix, str(n))
        self.students = [line.split(",")[0] for line in out.splitlines()[1:]]
        assert self.students == [f"{prefix}{i}" for i in range(1, n + 1)], out
        self.python = self._student_python()
        return self.students

    def remove_students(self) -> None:
        if self._prefix is None:
            return
        for pid in self.student_pids():  # whatever a student still runs (the hub stops them first), by pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.students_sh("remove", self._prefix, str(self._n))
        self._prefix = None

    def student_pids(self, name: str | None = None) -> list[int]:
        uids = {pwd.getpwnam(n).pw_uid for n in ([name] if name else self.students)}
        pids = []
        for status in pathlib.Path("/proc").glob("[0-9]*/status"):
            with contextlib.suppress(OSError):
                m = re.search(r"^Uid:\s+(\d+)", status.read_text(), re.M)
                if m and int(m.group(1)) in uids:
                    pids.append(int(status.parent.name))
        return pids

    def runs_as(self, user: str, python: str, code: str = "import interplab, jupyterhub.singleuser, ipykernel"):
        return subprocess.run(["runuser", "-u", user, "--", python, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd="/")

    def _student_python(self) -> str:
        """This venv's python if the students can run it with its packages; else (the venv's interpreter under a
        root-only home, as pyenv's under /root) a venv of the system's python of the same version that reads this
        venv's packages, its share/ (JupyterLab's extensions) and etc/ (server extensions)."""
        user = self.students[0]
        if self.runs_as(user, sys.executable).returncode == 0:
            return sys.executable
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        system = shutil.which(f"python{version}", path="/usr/local/bin:/usr/bin:/bin")
        if system is None:
            raise PermissionError(f"the students cannot run {sys.executable} and there is no system "
                                  f"python{version} to reach this venv's packages with")
        venv = self.root / "venv"
        subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = pathlib.Path(sysconfig.get_paths()["purelib"])
        target = pathlib.Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                             capture_output=True, text=True, check=True).stdout.strip())
        (target / "interplab-room.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
        for d in ("share", "etc"):
            if (pathlib.Path(sys.prefix) / d).is_dir():
                (venv / d).symlink_to(pathlib.Path(sys.prefix) / d)
        for p in [venv, *venv.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o755 if p.is_dir() else p.stat().st_mode | 0o444)
        python = str(venv / "bin" / "python")
        check = self.runs_as(user, python)
        if check.returncode != 0:
            raise PermissionError(f"the students cannot import this venv's packages ({site}): {check.stderr[-800:]}")
        return python

    # ---- the hub ------------------------------------------------------------------------------------------------
    def start_hub(self, **env) -> Hub:
        return Hub(self, env).start()

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)


class Hub:
    """`jupyterhub -f <room>/room/jupyterhub_config.py` on 127.0.0.1:<free port>."""

    def __init__(self, room: Room, extra_env: dict):
        self.room = room
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = room.state / "jupyterhub.log"
        self.extra_env = extra_env
        self.proc: subprocess.Popen | None = None
        self._pids: set[int] = set()

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "INTERPLAB_ROOM"))}
        env.update(
            INTERPLAB_ROOM_DIR=str(self.room.root),
            INTERPLAB_ROOM_STATE=str(self.room.state),
            INTERPLAB_ROOM_PYTHON=self.room.python,
            INTERPLAB_ROOM_PROXY=proxy_command(),
            INTERPLAB_ROOM_IP="127.0.0.1",
            INTERPLAB_ROOM_PORT=str(self.port),
            INTERPLAB_ROOM_HUB_PORT=str(free_port()),
            INTERPLAB_ROOM_PROXY_API_PORT=str(free_port()),
            INTERPLAB_ROOM_AUTH="dummy",
            INTERPLAB_ROOM_DUMMY_PASSWORD=PASSWORD,
            INTERPLAB_ROOM_GROUP=GROUP,
            INTERPLAB_ROOM_CULL_EVERY="10",  # the culler queries the hub during the test (timeout: the default)
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 120.0) -> Hub:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f",
                                      str(self.room.root / "room" / "jupyterhub_config.py")],
                                     cwd=self.room.state, env=self.env(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self._pids.add(self.proc.pid)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/hub/api", timeout=5).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"jupyterhub did not answer in {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.3)

    def log_tail(self, n: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        self._pids.update(_children(proc.pid))
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops the students' servers (cleanup_servers) and the proxy
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        for pid in self._pids - {proc.pid}:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self._log.close()

    # ---- a student ----------------------------------------------------------------------------------------------
    def login(self, name: str) -> str:
        """Log in through the hub's login form (as a browser does), then ask the REST API for a token with the
        same name and password. Returns the token."""
        s = requests.Session()
        page = s.get(f"{self.url}/hub/login", timeout=30)
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page.text)
        r = s.post(f"{self.url}/hub/login?next=", data={"username": name, "password": PASSWORD,
                                                        "_xsrf": xsrf.group(1) if xsrf else ""},
                   allow_redirects=False, timeout=30)
        assert r.status_code == 302, f"login of {name}: {r.status_code} {r.text[:500]}"
        r = requests.post(f"{self.url}/hub/api/users/{name}/tokens", timeout=30,
                          json={"auth": {"username": name, "password": PASSWORD}, "note": "room test"})
        assert r.status_code in (200, 201), f"token of {name}: {r.status_code} {r.text[:500]}"
        return r.json()["token"]

    def api(self, method: str, path: str, token: str, **kw) -> requests.Response:
        """A request to the hub or through its proxy to a user's server (path starts with /hub/ or /user/)."""
        return requests.request(method, f"{self.url}{path}", headers={"Authorization": f"token {token}"},
                                timeout=kw.pop("timeout", 60), **kw)

    def spawn(self, name: str, token: str) -> None:
        r = self.api("POST", f"/hub/api/users/{name}/server", token)
        assert r.status_code in (201, 202, 400), f"spawn {name}: {r.status_code} {r.text[:500]}"  # 400: running

    def wait_ready(self, name: str, token: str, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            server = self.api("GET", f"/hub/api/users/{name}", token).json().get("servers", {}).get("")
            if server and server.get("ready"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server of {name} is not ready after {timeout:.0f} s: {server}\n"
                                   f"{self.log_tail()}")
            time.sleep(0.5)

    # ---- a notebook in a student's kernel -------------------------------------------------------------------
    def run_notebook(self, name: str, token: str, path: str = NOTEBOOK, timeout: float = 600.0,
                     upto: int | None = None, keep: bool = False) -> dict[int, str]:
        """Start a kernel for the notebook in the student's server (a session, as JupyterLab does), run its code
        cells in order (up to cell `upto`) over the kernel's websocket through the hub's proxy, and shut the kernel
        down (unless keep). Returns {cell index: the text the cell printed}; raises on a cell error."""
        import nbformat

        r = self.api("GET", f"/user/{name}/api/contents/{path}", token)
        assert r.status_code == 200, f"{name}: {path}: {r.status_code} {r.text[:300]}"
        nb = nbformat.reads(json.dumps(r.json()["content"]), as_version=4)
        kid = self.start_session(name, token, path)
        out: dict[int, str] = {}
        try:
            ws = self.connect(name, token, kid, timeout)
            try:
                for i, cell in enumerate(nb.cells[:None if upto is None else upto + 1]):
                    if cell.cell_type == "code":
                        out[i] = execute(ws, cell.source, timeout, where=f"{name}, cell {i}")
            finally:
                ws.close()
        finally:
            if not keep:
                self.stop_kernels(name, token)
        return out

    def connect(self, name: str, token: str, kid: str, timeout: float = 600.0, tries: int = 3):
        """The kernel's websocket, once the kernel answers kernel_info. The server closes the socket of a kernel
        that does not answer in time (25 kernels importing torch at once on two cores): then connect again."""
        import websocket

        for attempt in range(tries):
            ws = websocket.create_connection(
                f"ws://127.0.0.1:{self.port}/user/{name}/api/kernels/{kid}/channels?session_id={uuid.uuid4().hex}",
                header=[f"Authorization: token {token}"], timeout=timeout)
            try:
                kernel_request(ws, "kernel_info_request", {}, timeout)
                return ws
            except websocket.WebSocketConnectionClosedException:
                ws.close()
                if attempt == tries - 1:
                    raise
                time.sleep(2)

    def start_session(self, name: str, token: str, path: str = NOTEBOOK) -> str:
        r = self.api("POST", f"/user/{name}/api/sessions", token, timeout=180,
                     json={"path": path, "type": "notebook", "name": pathlib.Path(path).name,
                           "kernel": {"name": "python3"}})
        assert r.status_code == 201, f"{name}: a kernel for {path}: {r.status_code} {r.text[:500]}"
        return r.json()["kernel"]["id"]

    def stop_kernels(self, name: str, token: str) -> None:
        for s in self.api("GET", f"/user/{name}/api/sessions", token).json():
            self.api("DELETE", f"/user/{name}/api/sessions/{s['id']}", token)
        for k in self.api("GET", f"/user/{name}/api/kernels", token).json():
            self.api("DELETE", f"/user/{name}/api/kernels/{k['id']}", token)


def _message(msg_type: str, content: dict, channel: str = "shell") -> dict:
    return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "room-test",
                       "session": uuid.uuid4().hex, "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": channel, "buffers": []}


def kernel_request(ws, msg_type: str, content: dict, timeout: float) -> dict:
    msg = _message(msg_type, content)
    ws.send(json.dumps(msg))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = ws.recv()
        if isinstance(raw, bytes):  # binary frames: widget buffers
            continue
        reply = json.loads(raw)
        if reply.get("parent_header", {}).get("msg_id") == msg["header"]["msg_id"] and reply["channel"] == "shell":
            return reply
    raise TimeoutError(f"no reply to {msg_type} in {timeout:.0f} s")


def execute(ws, code: str, timeout: float, where: str = "") -> str:
    """Run code in the kernel; the text it printed (stdout/stderr streams, in order). Raises on an error."""
    msg = _message("execute_request", {"code": code, "silent": False, "store_history": True,
                                       "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    ws.send(json.dumps(msg))
    mid = msg["header"]["msg_id"]
    text, error, idle, replied = [], None, False, False
    deadline = time.monotonic() + timeout
    while not (idle and replied):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{where}: no reply in {timeout:.0f} s")
        raw = ws.recv()
        if isinstance(raw, bytes):
            continue
        m = json.loads(raw)
        if m.get("parent_header", {}).get("msg_id") != mid:
            continue
        t = m["header"]["msg_type"]
        if t == "stream":
            text.append(m["content"]["text"])
        elif t == "error":
            error = f"{m['content']['ename']}: {m['content']['evalue']}"
        elif t == "status" and m["content"]["execution_state"] == "idle":
            idle = True
        elif t == "execute_reply":
            replied = True
    if error:
        raise RuntimeError(f"{where}: {error}\n{''.join(text)[-2000:]}")
    return "".join(text)


def run_concurrently(fns: dict) -> dict:
    """{key: fn()} with each fn in a thread of its own, started together; re-raises the first failure."""
    results, errors = {}, {}

    def call(key, fn):
        try:
            results[key] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[key] = e

    threads = [threading.Thread(target=call, args=(k, f)) for k, f in fns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        key, err = next(iter(errors.items()))
        raise AssertionError(f"{len(errors)} of {len(fns)} failed; {key}: {err}") from err
    return results


def reference_outputs(room: Room, path: pathlib.Path, work: pathlib.Path) -> dict[int, str]:
    """The single-user run: the notebook in a kernel of this process's own (nbclient), with the room's GPT-2 cache
    and the room's one thread per kernel (another thread count sums in another order: -0.0 for 0.0);
    {cell index: the text it printed}."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    room_env = {"HF_HUB_CACHE": str(room.hf_cache()), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1"}
    env_before = {k: os.environ.get(k) for k in room_env}
    os.environ.update(room_env)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {i: "".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, with reaped children) of processes so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def memory_of(pids: list[int]) -> dict:
    """PSS (shared pages split between the processes that map them) and RSS of processes, in MiB."""
    pss = rss = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
            pss += int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1))
            rss += int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1))
    return {"pss_mib": pss / 1024, "rss_mib": rss / 1024}


def open_notebook_as(browser, hub, name: str):
    """Notebook 01 of `name`, open in JupyterLab in a browser context of its own, logged in through the hub's login
    form (not into JupyterLab: LabNotebook opens it). A tests/e2e/harness LabNotebook."""
    import types

    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from harness import LabNotebook

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    login = context.new_page()
    login.goto(f"{hub.url}/hub/login?next=%2Fhub%2Fhome")
    login.fill("input[name=username]", name)
    login.fill("input[name=password]", PASSWORD)
    login.click("input[type=submit], button[type=submit]")
    login.wait_for_url("**/hub/home", timeout=60000)
    login.close()
    server = types.SimpleNamespace(url=f"{hub.url}/user/{name}", origin=hub.url, log_tail=hub.log_tail)
    return LabNotebook.open(browser, server, NOTEBOOK, context=context)

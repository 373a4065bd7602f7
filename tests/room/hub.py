"""A real JupyterHub for the workshop room, on this machine, set up by docs/teaching/ROOM.md's own steps: shared by
tests/room/test_room.py and benchmarks/bench_room.py.

    room = Room.create("ilab-s", 5)            # ROOM.md's night-before block, run by bash: the room folder, the
                                               # venv, students.sh's accounts (real system users, PAM passwords)
    hub = room.start_hub()                     # ROOM.md's step 6: jupyterhub_config.py, TLS, the teacher as admin
    token = hub.login("ilab-s1")               # the login form with the slip's password, then a REST API token
    hub.spawn("ilab-s1", token)                # the student's server, as the student
    outputs = hub.run_notebook("ilab-s1", token, "interplab-notebooks/01_ioi_patching.ipynb")
    hub.stop(); room.remove_students()         # ROOM.md's after-the-workshop block

ROOM.md's blocks run as written except for the changes in Room.steps (each one checked to match the page's text):
temporary folders for /srv/interplab, /srv/jupyterhub and /root; apt-get only for a missing package; the proxy
installed into build/; the pip installs replaced by a link to this environment; a GPT-2 stand-in; test account names;
the name ilab-room.test for room.example.org, with the hub's and each account's name (NAME.ilab-room.test) in
/etc/hosts on loopback, as a room's DNS would give them (removed at the end); free ports on loopback. Everything
the hub starts is stopped by pid: the hub, the proxy, the students' servers and kernels.
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
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROOM_MD = ROOT / "docs" / "teaching" / "ROOM.md"
NOTEBOOK = "interplab-notebooks/01_ioi_patching.ipynb"
GROUP = "ilab-room-test"  # the accounts' group of the test, not a real room's
TEACHERS = "ilab-room-teachers"  # the teachers' group of the test
TEACHER = "ilab-teacher"  # ROOM.md's `teacher`
HOST = "ilab-room.test"  # ROOM.md's room.example.org: the hub at HOST, each student's server at NAME.HOST
HOSTS_MARK = "# interplab room test"  # the test's lines in /etc/hosts: each name the room serves, on loopback
CHP_DIR = ROOT / "build" / "chp-5.2"  # configurable-http-proxy from npm (`npm install -g --prefix`), once
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness import _alive, _children, free_port, wait_until_serving  # noqa: E402


def missing_prerequisite() -> str | None:
    """A reason the room cannot run here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: it creates system users (useradd) and the hub starts servers as them"
    for tool in ("useradd", "userdel", "groupadd", "chpasswd", "runuser", "npm", "node"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (Debian: the passwd / util-linux / nodejs packages; ROOM.md step 1)"
    try:
        import jupyterhub  # noqa: F401
        import jupyterhub_idle_culler  # noqa: F401
        import pamela  # noqa: F401
    except ImportError:
        return 'jupyterhub is not installed: pip install -e ".[room]" (the dev extra includes it)'
    return None


def room_md_block(heading: str, n: int = 0) -> str:
    """The n-th ```bash block after the heading `## <heading>` of ROOM.md."""
    text = ROOM_MD.read_text()
    at = text.index(f"\n## {heading}")
    blocks = re.findall(r"```bash\n(.*?)```", text[at:], re.S)
    return blocks[n]


def substitute(block: str, changes: list[tuple[str, str]]) -> str:
    """The block with each (as written, as run here) change made; each as-written text must be in the block (the
    page changed: change the test with it)."""
    for old, new in changes:
        assert old in block, f"ROOM.md no longer says {old!r}: the room test's changes must follow the page"
        block = block.replace(old, new)
    return block


def link_packages(venv: pathlib.Path) -> None:
    """In place of ROOM.md's two `pip install` lines (torch and interplab: minutes of downloads): make the venv read
    this environment's packages (a .pth), its share/ (JupyterLab's extensions) and etc/ (server extensions), and write
    the console scripts the page calls (jupyterhub, interplab) from their entry points, as pip would."""
    from importlib.metadata import entry_points

    python = venv / "bin" / "python"
    purelib = "import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_paths()['purelib'])"
    version, target = subprocess.run([str(python), "-c", purelib], capture_output=True, text=True,
                                     check=True).stdout.strip().split(") ")
    if version + ")" != str(sys.version_info[:2]):  # compiled packages are built for one Python version
        sys.exit(f"the room's venv is Python {version}), this environment's is {sys.version_info[:2]}: make this "
                 f"environment with the system's Python (/usr/bin/python3) to run the room test")
    target = pathlib.Path(target)
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    (target / "interplab-room.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    for d in ("share", "etc"):
        if (pathlib.Path(sys.prefix) / d).is_dir() and not (venv / d).exists():
            (venv / d).symlink_to(pathlib.Path(sys.prefix) / d)
    for name in ("jupyterhub", "interplab"):
        (ep,) = entry_points(group="console_scripts", name=name)
        module, attr = ep.value.split(":")
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n")
        script.chmod(0o755)


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
    """ROOM.md's room folder (/srv/interplab) in a temporary directory, made by the page's own steps."""

    def __init__(self, base: pathlib.Path, prefix: str, n: int, gpt2: bool | str):
        self.base = base  # a stock server's /srv (755, root's), with /root (700) beside it
        self.root = base / "interplab"  # /srv/interplab: made by the page's steps
        self.state = base / "jupyterhub"  # /srv/jupyterhub: made by the page's steps, root only
        self.home = base / "root"  # /root: the passwords
        self.python = str(self.root / "venv" / "bin" / "python")
        self.prefix, self.n, self.gpt2 = prefix, n, gpt2
        self.students: list[str] = []
        self.passwords: dict[str, str] = {}
        self.teacher = TEACHER
        self.setup_log = ""

    @classmethod
    def create(cls, prefix: str, n: int, gpt2: bool | str = True) -> Room:
        """ROOM.md's night-before block (without step 6, the hub: start_hub) for n students named prefix1..prefixN.
        gpt2: True, a 2-layer GPT-2 stand-in in the shared cache; "small", a GPT-2-small-shaped one; False, none."""
        # under /tmp, not pytest's tmp dirs (they are root-only, and students must read the room folder)
        base = pathlib.Path(tempfile.mkdtemp(prefix="ilab-room-"))
        base.chmod(0o755)
        room = cls(base, prefix, n, gpt2)
        room.home.mkdir(mode=0o700)
        room.remove_students()  # leftovers of an interrupted run
        room.write_hosts(room.names())
        setup, _ = room.steps()
        run = subprocess.run(["bash", "-euo", "pipefail", "-xc", setup], cwd=ROOT, env=room.env(), text=True,
                             capture_output=True, timeout=900)
        room.setup_log = run.stdout + run.stderr
        if run.returncode != 0:
            room.remove_students()
            room.cleanup()
            raise RuntimeError(f"ROOM.md's steps failed here (exit {run.returncode}):\n{room.setup_log[-6000:]}")
        for csv in ("passwords.csv", "teacher.csv"):
            for line in (room.home / csv).read_text().splitlines()[1:]:
                name, password = line.split(",")
                room.passwords[name] = password
        room.students = [u for u in room.passwords if u != TEACHER]
        assert room.students == [f"{prefix}{i}" for i in range(1, n + 1)], room.passwords.keys()
        assert TEACHER in room.passwords
        return room

    def env(self) -> dict:
        """The environment the page's commands run in: root's, with the test accounts' groups, the hub's state
        folder (students.sh finds the hub there) and the proxy's folder on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "INTERPLAB_ROOM"))}
        env["PATH"] = f"{CHP_DIR / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["INTERPLAB_ROOM_GROUP"] = GROUP
        env["INTERPLAB_ROOM_TEACHERS"] = TEACHERS
        env["INTERPLAB_ROOM_STATE"] = str(self.state)
        return env

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.n + 1)] + [TEACHER]

    @staticmethod
    def write_hosts(names: list[str]) -> None:
        """/etc/hosts with the test's lines for HOST and NAME.HOST of each name (none when names is empty)."""
        hosts = pathlib.Path("/etc/hosts")
        kept = [ln for ln in hosts.read_text().splitlines() if not ln.endswith(HOSTS_MARK)]
        ours = [f"127.0.0.1 {n} {HOSTS_MARK}" for n in [HOST, *(f"{n}.{HOST}" for n in names)]] if names else []
        hosts.write_text("\n".join(kept + ours) + "\n")

    def steps(self) -> tuple[str, str]:
        """ROOM.md's night-before block with the test's changes: (the setup, step 6's hub command)."""
        here = pathlib.Path(__file__).resolve()
        me = f"{sys.executable} {here}"
        gpt2 = (f"{me} gpt2-standin {self.root}/hf-home/hub" + (" small" if self.gpt2 == "small" else "")
                if self.gpt2 else f"mkdir -p {self.root}/hf-home")  # (step 3 skipped: its chmod still runs)
        block = substitute(room_md_block("The night before: one machine"), [
            # apt-get only when a package is missing (no package index to fetch on every run)
            ("apt-get update && apt-get install -y python3-venv curl openssl iptables",
             "dpkg -s python3-venv curl openssl iptables >/dev/null || { apt-get update && apt-get install -y "
             "python3-venv curl openssl iptables; }"),
            # the proxy into the checkout's build/ (on PATH here), not into this machine's global npm folder
            ("npm install -g --engine-strict configurable-http-proxy@5.2",
             f"[ -x {CHP_DIR}/bin/configurable-http-proxy ] || npm install -g --prefix {CHP_DIR} --engine-strict "
             "--no-audit --no-fund --loglevel=error configurable-http-proxy@5.2"),
            # torch and interplab: this environment's, linked (no download)
            ("/srv/interplab/venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
             "true"),
            ('/srv/interplab/venv/bin/pip install ".[lab,room]"', f"{me} link-venv /srv/interplab/venv"),
            # GPT-2: a stand-in with GPT-2's tokenizer (no Hugging Face download)
            ("HF_HOME=/srv/interplab/hf-home /srv/interplab/venv/bin/python -c \\\n  \"from transformers import "
             "AutoModelForCausalLM, AutoTokenizer; AutoModelForCausalLM.from_pretrained('gpt2'); "
             "AutoTokenizer.from_pretrained('gpt2')\"", gpt2),
            ("students.sh add student 25 >", f"students.sh add {self.prefix} {self.n} >"),
            ("students.sh add-teacher teacher >", f"students.sh add-teacher {TEACHER} >"),
            ("room.example.org", HOST),
            ("INTERPLAB_ROOM_ADMINS=teacher", f"INTERPLAB_ROOM_ADMINS={TEACHER}"),
            ("/root/", f"{self.home}/"),
            ("/srv/interplab", str(self.root)),
            ("/srv/jupyterhub", str(self.state)),
        ])
        setup, hub = block.split("# 6. ")
        hub = hub.split("\n", 1)[1]
        assert "/srv/" not in block and "example.org" not in block and "jupyterhub -f" in hub, block
        return setup, hub

    def morning_check(self, student: str) -> subprocess.CompletedProcess:
        """ROOM.md's morning check, as written (the student's name and the folder changed)."""
        cmd = substitute(room_md_block("The morning of: check the room"),
                         [("student1", student), ("/srv/interplab", str(self.root))])
        return subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=300,
                              cwd="/", env=self.env())

    # ---- the students -------------------------------------------------------------------------------------------
    def remove_students(self) -> None:
        """ROOM.md's after-the-workshop block (whatever a student still runs is killed by pid first)."""
        if self.students:
            for pid in self.student_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        cmd = substitute(room_md_block("After the workshop"), [
            ("remove student 25", f"remove {self.prefix} {self.n}"), ("remove teacher", f"remove {TEACHER}"),
            ("/srv/interplab", str(self.root))])
        if not (self.root / "room" / "students.sh").exists():  # before the setup: the checkout's copy
            cmd = cmd.replace(str(self.root / "room"), str(ROOT / "docs" / "teaching" / "room"))
        subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], check=True, capture_output=True, timeout=120,
                       env=self.env())

    def student_pids(self, name: str | None = None) -> list[int]:
        uids = set()
        for n in [name] if name else self.students:
            with contextlib.suppress(KeyError):
                uids.add(pwd.getpwnam(n).pw_uid)
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

    # ---- the hub ------------------------------------------------------------------------------------------------
    def start_hub(self, **env) -> Hub:
        return Hub(self, env).start()

    def hf_cache(self) -> pathlib.Path:
        return self.root / "hf-home" / "hub"

    def reset_hub_state(self) -> subprocess.CompletedProcess:
        """ROOM.md's reset between courses (the hub stopped): its database, cookie secret and service token."""
        cmd = substitute(room_md_block("After the workshop", 1), [("/srv/jupyterhub", str(self.state))])
        return subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60,
                              env=self.env(), check=True)

    def cleanup(self) -> None:
        self.write_hosts([])
        shutil.rmtree(self.base, ignore_errors=True)


class Hub:
    """ROOM.md's step 6, `jupyterhub -f <room>/room/jupyterhub_config.py` with TLS, on https://HOST:<free port> (a
    free port on loopback), each student's server on https://NAME.HOST:<port>. Requests check the certificate
    against the self-signed one of the page's openssl step (a wildcard for NAME.HOST)."""

    def __init__(self, room: Room, extra_env: dict):
        self.room = room
        self.port = free_port()
        self.url = f"https://{HOST}:{self.port}"
        self.cert = str(room.state / "tls.crt")
        self.log_path = room.state / "jupyterhub.log"
        self.extra_env = extra_env
        self.proc: subprocess.Popen | None = None
        self._pids: set[int] = set()

    def env(self) -> dict:
        env = self.room.env()
        env.update(  # the temporary folders; the machine's other work: free ports, loopback only
            INTERPLAB_ROOM_DIR=str(self.room.root),
            INTERPLAB_ROOM_STATE=str(self.room.state),
            INTERPLAB_ROOM_IP="127.0.0.1",
            INTERPLAB_ROOM_PORT=str(self.port),
            INTERPLAB_ROOM_HUB_PORT=str(free_port()),
            INTERPLAB_ROOM_PROXY_API_PORT=str(free_port()),
            INTERPLAB_ROOM_CULL_EVERY="10",  # the culler queries the hub during the test (timeout: the default)
            # the browser tests drive JupyterLab through its app object (a student's ~/.jupyter cannot set it)
            INTERPLAB_ROOM_SERVER_ARGS="--LabApp.expose_app_in_browser=True",
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 120.0) -> Hub:
        _, command = self.room.steps()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # `bash -c` runs the page's command line (its variables, then the hub, exec'd by bash in its place)
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=self.room.state, env=self.env(), stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._pids.add(self.proc.pid)
        wait_until_serving(self.proc, lambda: self.request("GET", "/hub/api", timeout=5).status_code == 200,
                           name="jupyterhub", timeout=timeout, log_tail=self.log_tail, stop=self.stop)
        return self

    def user_url(self, name: str) -> str:
        """Where the student's server is: its own origin, NAME.HOST."""
        return f"https://{name}.{HOST}:{self.port}/user/{name}"

    def full_url(self, path: str) -> str:
        """A /hub/... path on the hub's origin; a /user/NAME/... path on the student's."""
        m = re.match(r"/user/([^/]+)", path)
        return f"https://{m.group(1)}.{HOST}:{self.port}{path}" if m else f"{self.url}{path}"

    def request(self, method: str, path: str, session=None, **kw) -> requests.Response:
        return (session or requests).request(method, self.full_url(path), verify=self.cert,
                                             timeout=kw.pop("timeout", 60), **kw)

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
    def login_form(self, name: str, password: str) -> requests.Response:
        """The hub's login form, posted as a browser does (PAM checks the password); 302 when it is right."""
        s = requests.Session()
        page = self.request("GET", "/hub/login", session=s, timeout=30)
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page.text)
        return self.request("POST", "/hub/login?next=", session=s, allow_redirects=False, timeout=30,
                            data={"username": name, "password": password, "_xsrf": xsrf.group(1) if xsrf else ""})

    def login(self, name: str) -> str:
        """Log in through the hub's login form with the password students.sh printed, then ask the REST API for a
        token with the same name and password. Returns the token."""
        password = self.room.passwords[name]
        r = self.login_form(name, password)
        assert r.status_code == 302, f"login of {name}: {r.status_code} {r.text[:500]}"
        r = self.request("POST", f"/hub/api/users/{name}/tokens", timeout=30,
                         json={"auth": {"username": name, "password": password}, "note": "room test"})
        assert r.status_code in (200, 201), f"token of {name}: {r.status_code} {r.text[:500]}"
        return r.json()["token"]

    def api(self, method: str, path: str, token: str, **kw) -> requests.Response:
        """A request to the hub or through its proxy to a user's server (path starts with /hub/ or /user/)."""
        return self.request(method, path, headers={"Authorization": f"token {token}"}, **kw)

    def websocket(self, path: str, token: str, timeout: float = 60.0):
        """A websocket through the hub's proxy (wss), with the student's token."""
        import websocket

        return websocket.create_connection(self.full_url(path).replace("https://", "wss://", 1),
                                           header=[f"Authorization: token {token}"], timeout=timeout,
                                           sslopt={"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": self.cert})

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
            ws = self.websocket(f"/user/{name}/api/kernels/{kid}/channels?session_id={uuid.uuid4().hex}", token,
                                timeout)
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

    context = browser.new_context(viewport={"width": 1400, "height": 1000}, ignore_https_errors=True)
    login = context.new_page()
    login.goto(f"{hub.url}/hub/login?next=%2Fhub%2Fhome")
    login.fill("input[name=username]", name)
    login.fill("input[name=password]", hub.room.passwords[name])
    login.click("input[type=submit], button[type=submit]")
    login.wait_for_url("**/hub/home", timeout=60000)
    login.close()
    url = hub.user_url(name)
    # the page may load from the student's origin and the hub's (its login and OAuth pages), nothing else
    server = types.SimpleNamespace(url=url, origin=(url.split("/user/")[0], hub.url), log_tail=hub.log_tail)
    return LabNotebook.open(browser, server, NOTEBOOK, context=context)


if __name__ == "__main__":  # the commands Room.steps puts in place of ROOM.md's download steps
    if sys.argv[1] == "link-venv":
        link_packages(pathlib.Path(sys.argv[2]))
    elif sys.argv[1] == "gpt2-standin":
        write_gpt2_standin(pathlib.Path(sys.argv[2]), small=sys.argv[3:] == ["small"])
    else:
        sys.exit(f"usage: {sys.argv[0]} link-venv VENV | gpt2-standin HUB_CACHE [small]")

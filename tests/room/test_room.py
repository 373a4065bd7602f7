"""The workshop room (docs/teaching/ROOM.md) on this machine: a real JupyterHub running the documented
docs/teaching/room/jupyterhub_config.py (with the dummy authenticator and its own ports and folders), five real
system accounts made by the documented students.sh, their servers started by the local process spawner as them.

Checked: the notebooks reach each home on first login and a student's edit survives a restart; notebook 01 run in
the five kernels at once prints what the single-user run prints; a heatmap cell clicked in Chromium in two students'
JupyterLab draws the single-user sweep and repaints the logits with the patched run's numbers; a student's token
cannot reach another student's server, files or kernel, and the operating system keeps their homes apart; a second
kernel is refused; the limits and the shared model cache reach the kernel; the idle culler queries the hub.
Needs root (the accounts are removed at the end, pass or fail). About 3-4 minutes on two cores.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

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
    """(room, hub, {name: token}): the hub up, the five students logged in and their servers ready."""
    reason = roomhub.missing_prerequisite()
    if reason:
        pytest.skip(reason)
    try:
        roomhub.proxy_command()
    except (FileNotFoundError, subprocess.CalledProcessError) as e:
        pytest.skip(f"configurable-http-proxy: {e}")
    r = roomhub.Room.create()
    hub = None
    try:
        r.add_students("ilab-s", N)
        for name in NAMES[:2]:  # the browser's students: every cell in the DOM, no news (as tests/e2e)
            write_lab_settings(name)
        hub = r.start_hub()
        tokens = {name: hub.login(name) for name in NAMES}
        roomhub.run_concurrently({n: (lambda n=n: hub.spawn(n, tokens[n])) for n in NAMES})
        for name in NAMES:
            hub.wait_ready(name, tokens[name])
        yield r, hub, tokens
    finally:
        left = []
        if hub is not None:
            hub.stop()
            time.sleep(1)
            left = r.student_pids() if r.students else []
        r.remove_students()
        r.cleanup()
        assert not left, f"student processes still running after the hub stopped: {left}"


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
    for config in ("jupyter_server_config.json", "jupyter_lab_config.json"):
        (base / config).write_text(json.dumps({"LabApp": {"expose_app_in_browser": True}}))
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


def test_notebooks_reach_each_home_and_an_edit_survives_a_restart(room):
    r, hub, tokens = room
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


def test_five_students_run_notebook_01_at_once_and_print_the_single_user_numbers(room, reference):
    r, hub, tokens = room
    t0 = time.monotonic()
    outputs = roomhub.run_concurrently({n: (lambda n=n: hub.run_notebook(n, tokens[n])) for n in NAMES})
    took = time.monotonic() - t0
    assert "Lab('gpt2'" in reference[max(reference)], "the reference did not load GPT-2 from the room's cache"
    for name in NAMES:
        assert outputs[name].keys() == reference.keys(), name
        differ = [i for i in reference if outputs[name][i] != reference[i]]
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
            websocket.create_connection(f"ws://127.0.0.1:{hub.port}/user/{b}/api/kernels/{kid}/channels",
                                        header=[f"Authorization: token {tokens[a]}"], timeout=30)
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
print(json.dumps({"env": env, "threads": torch.get_num_threads(), "wrote": wrote}))
""")
    got = json.loads(said.strip().splitlines()[-1])
    assert got == {"env": {"MEM_LIMIT": str(3 * 2**30), "CPU_LIMIT": "1.0", "OMP_NUM_THREADS": "1",
                           "HF_HUB_CACHE": str(r.hf_cache()), "HF_HUB_OFFLINE": "1"},
                   "threads": 1, "wrote": False}, got


def test_interplab_check_says_ready_as_a_student(room):
    """ROOM.md's morning check: `interplab check` run as a student, with the room's Python."""
    r, hub, tokens = room
    check = r.runs_as(NAMES[4], r.python, "import sys; from interplab.__main__ import main; sys.exit(main(['check']))")
    last = check.stdout.rstrip().splitlines()[-1:]
    assert check.returncode == 0 and last[0].startswith("ready"), check.stdout[-2000:] + check.stderr


def test_the_idle_culler_queries_the_hub(room):
    r, hub, tokens = room
    deadline = time.monotonic() + 30
    while "GET /hub/api/users" not in hub.log_tail(10**7) or "idle-culler@" not in hub.log_tail(10**7):
        assert time.monotonic() < deadline, f"no request of the idle culler in the hub's log:\n{hub.log_tail()}"
        time.sleep(1)
    lines = [ln for ln in hub.log_tail(10**7).splitlines() if "idle-culler@" in ln]
    assert all(" 200 " in ln for ln in lines), lines


def test_the_helm_values_parse_and_hold_what_room_md_names():
    """docs/teaching/room/values.yaml is not deployed here (no Kubernetes): it must at least parse and hold the room's
    settings under the chart's keys ROOM.md names, with the same limits and cull timeout as the tested config."""
    import yaml

    values = yaml.safe_load((ROOT / "docs" / "teaching" / "room" / "values.yaml").read_text())
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
    config = (ROOT / "docs" / "teaching" / "room" / "jupyterhub_config.py").read_text()
    assert '"INTERPLAB_ROOM_MEM_LIMIT", "3G"' in config and '"INTERPLAB_ROOM_IDLE_TIMEOUT", "3600"' in config

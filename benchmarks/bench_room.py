"""The workshop room on one machine (docs/teaching/ROOM.md): memory and time per student on a real JupyterHub.

    sudo .venv/bin/python benchmarks/bench_room.py             # as root: it creates 25 system users, removes them
    sudo .venv/bin/python benchmarks/bench_room.py --students 10 --no-write

The room is set up by ROOM.md's own steps and the hub is the documented docs/teaching/room/jupyterhub_config.py
(PAM logins, TLS, its own ports and folders), with the machinery of tests/room/hub.py: real system accounts, servers
started as them, real kernels.

  5 students     their servers spawned at once (POST -> all ready); then each in its own Chromium page, logged in,
                 notebook 01 open, "run all above" the heatmap cell pressed in the five pages at the same moment ->
                 every heatmap drawn. Memory per student (PSS: shared pages split between the processes that map
                 them; RSS beside it) of the server + kernel, idle and with ioi-tiny's notebook run to the heatmap;
                 CPU-seconds per student from spawn to the drawn heatmap.
  click-to-paint a real mouse press on a heatmap cell in one page -> the logit panel's next paint, on a quiet room and
                 while 5 other students' kernels run exact head sweeps (site z, layer x head x pos) in a loop.
  limits         (the default spawner enforces none) one student's kernel fills 4 GiB, over the room's 3 GiB limit,
                 and multiplies matrices on 2 torch threads, over its 1 CPU, while another student clicks: the hog's
                 peak memory and the cores it took, and the clicker's click-to-paint.
  GPT-2 small    5 kernels load a GPT-2-small-shaped model (GPT2Config's defaults, random weights) from the room's
                 shared cache, as the notebooks' optional cell does, and run it once: memory per student.
  25 students    (no browsers: the pages draw on the students' laptops) every server stopped, then 25 spawned at once
                 and notebook 01 run up to the heatmap's sweep in the 25 kernels at once, through the REST API.

Writes the "## Workshop room (JupyterHub)" section of benchmarks/RESULTS.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "room"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import hub as roomhub  # noqa: E402
from harness import DEFINES_EXPLORER, chromium_missing, launch_browser  # noqa: E402
from results_file import write_section  # noqa: E402

PREFIX = "ilab-b"
SWEEP_LOOP = """
import time, interplab as _il
_lab = _il.Lab.load("ioi-tiny")
_c = "When Mary and John went to the store, John gave a drink to"
_x = "When Mary and John went to the store, Mary gave a drink to"
_t, _n = time.time(), 0
while time.time() - _t < {seconds}:
    _lab.patch_sweep(_c, _x, site="z", by=("layer", "head", "pos"), metric=_il.logit_diff(" Mary", " John"),
                     progress=False)
    _n += 1
print(_n)
"""
HOG = """
import time, torch
torch.set_num_threads(2)
_x = torch.ones({gib} * 2**28)  # {gib} GiB of float32, every page written
_a = torch.randn(512, 512)
_t = time.time()
while time.time() - _t < {seconds}:
    _a @ _a
print(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024)
del _x
"""
GPT2 = """
import interplab as _il
_g = _il.Lab.load("gpt2")
_g.run("When Mary and John went to the store, John gave a drink to")
print(_g)
"""


def per_student(room, names) -> dict:
    mem = [roomhub.memory_of(room.student_pids(n)) for n in names]
    return {"pss_mib": statistics.mean(m["pss_mib"] for m in mem),
            "rss_mib": statistics.mean(m["rss_mib"] for m in mem), "pss_max_mib": max(m["pss_mib"] for m in mem)}


def spawn_all(hub, tokens, names) -> float:
    t0 = time.monotonic()
    roomhub.run_concurrently({n: (lambda n=n: hub.spawn(n, tokens[n])) for n in names})
    for n in names:
        hub.wait_ready(n, tokens[n], timeout=600)
    return time.monotonic() - t0


def stop_all(hub, tokens, names) -> None:
    for n in names:
        hub.api("DELETE", f"/hub/api/users/{n}/server", tokens[n])
    deadline = time.monotonic() + 120
    while any(hub.api("GET", f"/hub/api/users/{n}", tokens[n]).json()["servers"] for n in names):
        if time.monotonic() > deadline:
            raise TimeoutError("servers still running 120 s after they were stopped")
        time.sleep(0.5)


def in_kernel(hub, name, token, code, timeout=600.0) -> str:
    """Run code in the student's running kernel (the one their page opened), or a new one."""
    kernels = hub.api("GET", f"/user/{name}/api/kernels", token).json()
    kid = kernels[0]["id"] if kernels else hub.start_session(name, token)
    ws = hub.connect(name, token, kid, timeout)
    try:
        return roomhub.execute(ws, code, timeout, where=name)
    finally:
        ws.close()


def login_page(browser, hub, name):
    return roomhub.open_notebook_as(browser, hub, name)


def clicks(nb, index, n) -> list[float]:
    rows, cols = nb.heatmap_shape(index)
    cells = [(r, c) for c in (cols - 1, cols - 5, cols - 3) for r in range(rows)][:n]
    out = []
    for row, col in cells:
        t = nb.click_heatmap_cell(index, row, col)
        out.append(nb.wait_paint("logits", t, timeout=120)["t"] - t)
        nb.page.wait_for_timeout(300)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=25, help="the simulated room (default 25)")
    ap.add_argument("--clicks", type=int, default=8, help="clicks per condition (default 8)")
    ap.add_argument("--sweep-seconds", type=int, default=45, help="how long the 5 kernels sweep (default 45)")
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/RESULTS.md")
    args = ap.parse_args()
    for reason in (roomhub.missing_prerequisite(), chromium_missing()):
        if reason:
            print(f"bench_room: {reason}", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n_all = max(args.students, 6)
    room = roomhub.Room.create(PREFIX, n_all, gpt2="small")
    hub = None
    fig: dict = {}
    try:
        names = room.students
        five, sweepers = names[:5], names[1:6]
        for name in five:
            sys.path.insert(0, str(ROOT / "tests" / "room"))
            from test_room import write_lab_settings

            write_lab_settings(name)
        hub = room.start_hub()
        tokens = {n: hub.login(n) for n in names}

        # ---- 5 students, in browsers ----------------------------------------------------------------------------
        fig["spawn5_s"] = spawn_all(hub, tokens, five)
        fig["idle"] = per_student(room, five)
        with launch_browser() as browser:
            pages = {n: login_page(browser, hub, n) for n in five}
            index = pages[five[0]].find_cell(DEFINES_EXPLORER)
            t0 = time.monotonic()
            for nb in pages.values():  # pressed in every page before any finishes (the page runs it on its own)
                nb.page.evaluate("([c, i]) => window.__il.run(c, i)", ["notebook:run-all-above", index + 1])
            for name, nb in pages.items():
                try:
                    nb.wait_heatmap(index, timeout=600)
                except Exception as e:  # what the page's run of the cells came to
                    raise RuntimeError(f"{name}: no heatmap; the run: " + nb.page.evaluate(
                        "() => JSON.stringify([window.__il_run, window.__il.errors()])")
                        + f"; JS errors {nb.page_errors}; console {nb.console[-5:]}") from e
            fig["draw5_s"] = time.monotonic() - t0
            fig["cpu_to_heatmap_s"] = statistics.mean(roomhub.cpu_seconds(room.student_pids(n)) for n in five)
            fig["tiny"] = per_student(room, five)

            # ---- click-to-paint, quiet and with 5 kernels sweeping ------------------------------------------------
            clicker = pages[five[0]]
            clicker.wait_paint("logits", -1, timeout=120)
            fig["click_quiet_ms"] = clicks(clicker, index, args.clicks)
            hub.spawn(sweepers[-1], tokens[sweepers[-1]])
            hub.wait_ready(sweepers[-1], tokens[sweepers[-1]])
            counts: dict = {}
            threads = [threading.Thread(target=lambda n=n: counts.__setitem__(n, in_kernel(
                hub, n, tokens[n], SWEEP_LOOP.format(seconds=args.sweep_seconds)))) for n in sweepers]
            for t in threads:
                t.start()
            time.sleep(8)  # every loop running (the new kernel imports torch first)
            fig["click_busy_ms"] = clicks(clicker, index, args.clicks)
            for t in threads:
                t.join()
            fig["sweeps_done"] = {n: int(c.split()[-1]) for n, c in counts.items()}

            # ---- limits: nothing enforces them with the default spawner ------------------------------------------
            hog, got = five[1], {}
            cpu0, t0 = roomhub.cpu_seconds(room.student_pids(hog)), time.monotonic()
            thread = threading.Thread(target=lambda: got.__setitem__("mib", in_kernel(
                hub, hog, tokens[hog], HOG.format(gib=4, seconds=args.sweep_seconds // 2))))
            thread.start()
            time.sleep(8)  # the 4 GiB written, both threads multiplying
            fig["click_hog_ms"] = clicks(clicker, index, args.clicks)
            thread.join()
            fig["hog_cores"] = (roomhub.cpu_seconds(room.student_pids(hog)) - cpu0) / (time.monotonic() - t0)
            fig["hog_peak_mib"] = int(got["mib"].split()[-1])
            for nb in pages.values():
                nb.close()

        # ---- GPT-2 small, 5 kernels ---------------------------------------------------------------------------
        roomhub.run_concurrently({n: (lambda n=n: in_kernel(hub, n, tokens[n], GPT2)) for n in sweepers})
        fig["gpt2"] = per_student(room, sweepers)

        # ---- the whole room, headless -------------------------------------------------------------------------
        stop_all(hub, tokens, names)
        fig["spawn_all_s"] = spawn_all(hub, tokens, names)
        fig["idle_all"] = per_student(room, names)
        upto = index
        t0 = time.monotonic()
        roomhub.run_concurrently({n: (lambda n=n: hub.run_notebook(n, tokens[n], upto=upto, keep=True))
                                  for n in names})
        fig["sweep_all_s"] = time.monotonic() - t0
        fig["tiny_all"] = per_student(room, names)
        fig["cpu_all_s"] = statistics.mean(roomhub.cpu_seconds(room.student_pids(n)) for n in names)
        fig["n_all"] = len(names)
        fig["mem_available_gib"] = int(open("/proc/meminfo").read().split("MemAvailable:")[1].split()[0]) / 2**20
    finally:
        if hub is not None:
            hub.stop()
        room.remove_students()
        room.cleanup()
    report(fig, args)
    return 0


def report(fig: dict, args) -> list[str]:
    def med(xs):
        return statistics.median(xs)

    cores, mem_gib = os.cpu_count(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    tiny, gpt2, n = fig["tiny_all"]["pss_mib"], fig["gpt2"]["pss_mib"], fig["n_all"]
    cpu = fig["cpu_all_s"]
    lines = [
        f"`sudo .venv/bin/python benchmarks/bench_room.py` (as root: it makes {n} system users and removes them), "
        f"{platform.machine()}, {cores} cores, {mem_gib:.0f} GiB, shared with other work while it ran. The hub is "
        "`docs/teaching/room/jupyterhub_config.py` (PAM logins, TLS) with the local process spawner; one "
        "thread per kernel (the config's cpu_limit 1). Memory is PSS (a page shared by k processes counts 1/k to "
        "each), per student = their server + kernel.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| 5 students: servers spawned at once, POST -> all ready | {fig['spawn5_s']:.1f} s |",
        f"| 5 students in 5 Chromium pages: *run all above* the heatmap cell pressed at once -> every heatmap drawn "
        f"| {fig['draw5_s']:.1f} s |",
        f"| CPU per student, spawn -> heatmap drawn (server + kernel) | {fig['cpu_to_heatmap_s']:.1f} CPU-s |",
        f"| memory per student, server only (idle) | {fig['idle']['pss_mib']:.0f} MiB PSS "
        f"({fig['idle']['rss_mib']:.0f} MiB RSS) |",
        f"| memory per student, notebook 01 run to the heatmap (ioi-tiny), 5 students | "
        f"{fig['tiny']['pss_mib']:.0f} MiB PSS ({fig['tiny']['rss_mib']:.0f} MiB RSS, largest "
        f"{fig['tiny']['pss_max_mib']:.0f}) |",
        f"| memory per student, + a GPT-2-small-shaped model loaded and run once | {gpt2:.0f} MiB PSS "
        f"({fig['gpt2']['rss_mib']:.0f} MiB RSS, largest {fig['gpt2']['pss_max_mib']:.0f}) |",
        f"| click -> logits painted, quiet room (median of {len(fig['click_quiet_ms'])}; max) | "
        f"{med(fig['click_quiet_ms']):.0f} ms; {max(fig['click_quiet_ms']):.0f} ms |",
        f"| click -> logits painted, 5 other kernels sweeping (z, 4 x 4 x 14 cells) in a loop (median; max) | "
        f"{med(fig['click_busy_ms']):.0f} ms; {max(fig['click_busy_ms']):.0f} ms |",
        f"| limits not enforced (default spawner): one kernel fills 4 GiB on 2 threads, over its 3 GiB and 1 CPU: "
        f"its peak RSS; the cores it took; the others' click -> logits painted meanwhile (median; max) | "
        f"{fig['hog_peak_mib'] / 1024:.1f} GiB; {fig['hog_cores']:.2f} of {os.cpu_count()} cores; "
        f"{med(fig['click_hog_ms']):.0f} ms; {max(fig['click_hog_ms']):.0f} ms |",
        f"| {n} students (no browsers): servers spawned at once, POST -> all ready | {fig['spawn_all_s']:.1f} s |",
        f"| {n} students: notebook 01 run to the heatmap's sweep in {n} kernels at once | {fig['sweep_all_s']:.1f} s |",
        f"| memory per student, {n} students at the heatmap (ioi-tiny) | {tiny:.0f} MiB PSS "
        f"({fig['tiny_all']['rss_mib']:.0f} MiB RSS) |",
        f"| CPU per student, {n} students, spawn -> sweep done | {cpu:.1f} CPU-s |",
        "",
        "How many students one machine holds, from these figures (keep 2 GiB for the system, the hub and the proxy; "
        "the start of the workshop, everyone running the first cells within a minute, is the CPU peak):",
        "",
        "| machine | memory: ioi-tiny only | memory: everyone also loads GPT-2 | CPU: all at the heatmap within 60 s |",
        "|---|---|---|---|",
    ]
    for c, g in ((2, 8), (4, 16), (8, 32), (16, 64)):
        usable = (g - 2) * 1024
        lines.append(f"| {c} cores, {g} GiB | ({g} - 2) GiB / {tiny:.0f} MiB = {usable // tiny:.0f} | "
                     f"({g} - 2) GiB / {gpt2:.0f} MiB = {usable // gpt2:.0f} | 60 s x {c} cores / {cpu:.1f} CPU-s = "
                     f"{60 * c // cpu:.0f} |")
    lines += [
        "",
        "A room holds the smallest of the three columns that applies. The CPU column is the burst at the start; once "
        "students work at their own pace a click costs one patched forward pass (milliseconds on ioi-tiny), and the "
        "click row above shows that 5 kernels sweeping nonstop leave a click's paint within the time shown. The "
        f"per-student memory is measured with {n} students at once (shared library pages are split over more "
        "processes as the room grows, so a small room's per-student PSS is a little higher). GPT-2's weights are "
        "memory-mapped from the shared cache: the kernels that load it share one copy of its file pages (RSS counts "
        "the copy in each kernel, PSS splits it), so a room where everyone loads GPT-2 pays its 0.5 GB about once; "
        "the GPT-2 figure is measured with 5 kernels sharing it.",
    ]
    print("\n".join(lines))
    print(json.dumps(fig, indent=1))
    if not args.no_write:
        write_section("Workshop room (JupyterHub)", lines)
    return lines


if __name__ == "__main__":
    sys.exit(main())

"""Helpers for tests that start a command and read what it prints."""

from __future__ import annotations

import queue
import re
import threading
import time


def read_url(proc, deadline: float) -> tuple[str, str]:
    """The first http:// URL the command prints on stdout, and all it printed up to it (read in a thread: readline
    has no timeout). Fails, with what was printed, if the command exits or the deadline passes first."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        m = re.search(r"http://\S+", line)
        if m:
            return m.group(0), "".join(seen)
    raise AssertionError(f"no URL printed (exit code {proc.poll()}): {''.join(seen)}")

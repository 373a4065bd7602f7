"""One job of a view: what every request that needs the model becomes.

    job(lab.worker, panel, f"preview:{id(self)}", lambda: compute(...), lambda out: setattr(panel, "dist", out))

compute() runs on the lab's worker thread (never on the kernel's message thread; the latest job on a channel wins, so
a burst of clicks computes only the last one), then show(result) sets the widget's traits as one message and clears
its error. An exception lands in the widget's `error` as "Type: message" (or goes to error(exc)); cancel is the Event
the worker sets at interpreter exit (or the view's Cancel button sets).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any


def job(worker, widget, channel: str, compute: Callable[[], Any], show: Callable[[Any], None] | None = None, *,
        error: Callable[[BaseException], None] | None = None, cancel=None) -> bool:
    """Queue compute() on `worker` for `widget`; False when the worker is closed (the job is dropped)."""

    def done(result) -> None:
        with widget.hold_sync():  # one message to the page, one repaint
            if show is not None:
                show(result)
            widget.error = ""

    return worker.submit(channel, compute, done, error, widget=widget, cancel=cancel)


def batch_execution() -> bool:
    """True while the running cell was sent by a client with no person at it: nbclient (`jupyter nbconvert --execute`,
    papermill, `interplab export --execute`) asks with allow_stdin false, where JupyterLab, Notebook 7 and VS Code
    allow input. Such a client saves only the widget updates it hears while their cell runs, so a view's pending
    work must end inside that cell (see settle_in_batch). False outside an IPython kernel."""
    shell = sys.modules.get("IPython")
    shell = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    get_parent = getattr(getattr(shell, "kernel", None), "get_parent", None)
    if get_parent is None:
        return False
    try:
        parent = get_parent("shell") or {}
    except Exception:  # noqa: BLE001 (an older or unusual kernel: treated as interactive, as before)
        return False
    return parent.get("msg_type") == "execute_request" and (parent.get("content") or {}).get("allow_stdin") is False


def settle_in_batch(worker, timeout: float = 600.0) -> None:
    """In a batch execution (batch_execution()), wait for `worker`'s queued jobs in the user's cell, so the notebook
    it saves holds each view's final picture (a sweep's last cells, a first logit panel), not "sweeping..."."""
    # (only in the cell's own thread: a job that starts another view must not wait for itself)
    if threading.current_thread() is threading.main_thread() and batch_execution():
        worker.join(timeout)

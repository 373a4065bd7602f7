"""One job of a view: what every request that needs the model becomes.

    job(lab.worker, panel, f"preview:{id(self)}", lambda: compute(...), lambda out: setattr(panel, "dist", out))

compute() runs on the lab's worker thread (never on the kernel's message thread; the latest job on a channel wins, so
a burst of clicks computes only the last one), then show(result) sets the widget's traits as one message and clears
its error. An exception lands in the widget's `error` as "Type: message" (or goes to error(exc)); cancel is the Event
the worker sets at interpreter exit (or the view's Cancel button sets).
"""

from __future__ import annotations

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

"""The Lab's worker: one thread per lab runs what the widgets ask for; on each channel the latest request wins.

A click or a slider drag arrives on the kernel's message thread, which must return at once (messages queue behind a
busy kernel). The handler submits a job here and returns. If a newer job arrives on the same channel before the worker
reached the older one, the older one is dropped: only the latest drag position is computed.

A job runs with the torch intra-op thread count of the thread that submitted it. Each thread keeps the count it had
at its first torch call (a later torch.set_num_threads elsewhere does not reach it), and a reduction split over two
threads adds in another order than one thread's: the same forward gave other bits on the worker than in the notebook
whenever the worker thread was older than the notebook's last set_num_threads (tests/core/test_thread_bits.py).

The worker survives anything a job does: an exception in the job, or in its done or error callback, is logged and
shown on the job's widget (its ``error`` trait), and the next job runs.

A clean exit. CPython before 3.14 ends a daemon thread that takes the GIL back after finalisation began with
pthread_exit(); its forced unwind through pybind11's ``~gil_scoped_release`` (a destructor, so noexcept) calls
std::terminate: "terminate called without an active exception", exit code 134, whenever the worker is inside a torch
call as the interpreter finalises. So an atexit handler (atexit runs before the runtime is marked finalising) stops
every worker first: queued jobs are dropped, the running job's cancel event is set (sweeps stop after the batch in
hand) and the thread is joined.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("interplab.worker")

IDLE_EXIT_S = 10.0  # an idle thread ends after this; the next submit starts a new one (labs can be collected)
EXIT_WAIT_S = 120.0  # at exit: how long to wait for a job that cannot be cancelled (a forward, a generation)
EXIT_WARN_S = 2.0  # ... and when to say that we are waiting

_live: weakref.WeakSet[Worker] = weakref.WeakSet()


def join_all(timeout: float | None = 600.0) -> bool:
    """Wait until every lab's worker is idle (what a notebook saver waits for); True when all are."""
    return all([w.join(timeout) for w in list(_live)])


@dataclass
class Job:
    channel: str
    fn: Callable[[], object]
    done: Callable[[Any], None] | None = None
    error: Callable[[BaseException], None] | None = None
    widget: Any = None  # its `error` trait shows what went wrong
    cancel: threading.Event | None = None  # set to stop the job early (at exit)
    threads: int | None = None  # the submitting thread's torch intra-op thread count, which the job runs with


class Worker:
    """Runs submitted jobs one at a time on its own thread (or inline with threaded=False)."""

    def __init__(self, name: str = "interplab-worker", threaded: bool = True):
        self.name = name
        self.threaded = threaded
        self._cv = threading.Condition()
        self._pending: OrderedDict[str, Job] = OrderedDict()
        self._running: Job | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.dropped = 0  # jobs replaced by a newer one on their channel, or dropped at close
        self.completed = 0
        self.failed = 0  # jobs or callbacks that raised (logged and shown on the widget)
        _live.add(self)

    # ---- submitting ---------------------------------------------------------------------------------------------
    def submit(self, channel: str, fn: Callable[[], object], done: Callable[[Any], None] | None = None,
               error: Callable[[BaseException], None] | None = None, *, widget: Any = None,
               cancel: threading.Event | None = None) -> bool:
        """Queue fn() on `channel`, replacing any job still waiting there; then done(result), or error(exc) (without
        an error callback the widget's `error` shows it). False when the worker is closed (the job is dropped)."""
        job = Job(channel, fn, done, error, widget, cancel, _torch_threads())
        if not self.threaded:
            self._execute(job)
            return True
        with self._cv:
            if self._closed:
                log.debug("worker %s is closed: dropped %r", self.name, channel)
                self.dropped += 1
                return False
            if channel in self._pending:
                self.dropped += 1
            self._pending[channel] = job
            self._pending.move_to_end(channel)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return True

    # ---- the thread ---------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cv:
                if not self._pending and not self._closed:
                    self._cv.wait_for(lambda: self._pending or self._closed, IDLE_EXIT_S)
                if self._closed or not self._pending:
                    if self._thread is me:
                        self._thread = None
                    self._cv.notify_all()
                    return
                _, job = self._pending.popitem(last=False)
                self._running = job
            try:
                self._execute(job)
            except BaseException:  # noqa: BLE001 - _execute catches everything; this is the last guard of the thread
                log.exception("interplab worker: job %r", job.channel)
            finally:
                with self._cv:
                    self._running = None
                    self._cv.notify_all()

    def _execute(self, job: Job) -> None:
        try:
            _set_torch_threads(job.threads)
            result = job.fn()
        except BaseException as e:  # noqa: BLE001 - the kernel survives anything a frontend asks for
            self.completed += 1
            self._job_failed(job, e)
            return
        self.completed += 1
        if job.done is None or self._closed:  # closed: the process is exiting, nobody looks at the widgets
            return
        try:
            job.done(result)
        except BaseException as e:  # noqa: BLE001
            self.failed += 1
            log.exception("interplab worker: the done callback of %r failed", job.channel)
            self._show(job, f"error while showing the result: {type(e).__name__}: {e}")

    def _job_failed(self, job: Job, e: BaseException) -> None:
        from .errors import InterplabError

        self.failed += 1
        if isinstance(e, InterplabError):  # bad input or a cancelled sweep: the message says it all
            log.debug("interplab worker: job %r failed", job.channel, exc_info=True)
        else:
            log.error("interplab worker: job %r failed", job.channel, exc_info=e)
        if self._closed:
            return
        text = f"{type(e).__name__}: {e}"
        if job.error is not None:
            try:
                job.error(e)
                return
            except BaseException as e2:  # noqa: BLE001
                log.exception("interplab worker: the error callback of %r failed", job.channel)
                text += f" (and showing it failed: {type(e2).__name__}: {e2})"
        self._show(job, text)

    @staticmethod
    def _show(job: Job, text: str) -> None:
        if job.widget is None:
            return
        try:
            job.widget.error = text
        except BaseException:  # noqa: BLE001
            log.exception("interplab worker: could not show an error on %r", job.widget)

    # ---- waiting and stopping -----------------------------------------------------------------------------------
    def idle(self) -> bool:
        with self._cv:
            return not self._pending and self._running is None

    def join(self, timeout: float | None = 30.0) -> bool:
        """Wait until every queued job has run (tests, scripts, notebooks); True when idle. Not from a job."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and self._running is None, timeout)

    def _stop(self) -> threading.Thread | None:
        """Close: drop queued jobs and cancel the running one; the thread to wait for, if any."""
        with self._cv:
            self._closed = True
            self.dropped += len(self._pending)
            self._pending.clear()
            running, thread = self._running, self._thread
            self._cv.notify_all()
        if running is not None and running.cancel is not None:
            running.cancel.set()
        return thread if thread is not None and thread is not threading.current_thread() else None

    def close(self, timeout: float | None = 30.0) -> bool:
        """Stop for good: queued jobs are dropped, the running job is cancelled where it can be (sweeps) and waited
        for; later submits are dropped. True when the thread has ended."""
        thread = self._stop()
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        with self._cv:
            state = "closed" if self._closed else "running" if self._running else "idle"
            return f"Worker({self.name!r}, {state}, {len(self._pending)} queued, {self.completed} done)"


def _torch_threads() -> int:
    """This thread's torch intra-op thread count."""
    return torch.get_num_threads()


def _set_torch_threads(n: int | None) -> None:
    """This thread computes with n intra-op threads, as the thread that submitted the job does."""
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)


@atexit.register
def _close_all() -> None:
    """Before the interpreter finalises: no worker may still be inside torch (see the module docstring)."""
    threads = [(w, t) for w in list(_live) if (t := w._stop()) is not None]  # cancel them all, then wait
    for w, t in threads:
        t.join(EXIT_WARN_S)
        if t.is_alive():
            job = w._running
            log.warning("interplab: waiting for %s to finish %r before exiting", w.name, job and job.channel)
            t.join(EXIT_WAIT_S)
        if t.is_alive():
            log.error("interplab: %s is still running after %.0f s; the interpreter may abort on exit", w.name,
                      EXIT_WAIT_S)

"""The Lab's request queue: frontend requests run on one worker thread; on each channel the latest request wins.

A click or a slider drag arrives on the kernel's comm handler, which must return at once (comm messages queue
behind a busy kernel). The handler submits a job here and returns. If a newer job arrives on the same channel
before the worker reached the older one, the older one is dropped: only the latest drag position is computed.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger("interplab.requests")


class LatestQueue:
    def __init__(self, threaded: bool = True):
        self.threaded = threaded
        self._cv = threading.Condition()
        self._pending: OrderedDict[str, tuple] = OrderedDict()
        self._busy = False
        self._worker: threading.Thread | None = None
        self.dropped = 0  # stale requests replaced before they ran
        self.completed = 0

    def submit(self, channel: str, fn: Callable[[], object], done: Callable[[object], None] | None = None,
               error: Callable[[BaseException], None] | None = None) -> None:
        """Queue fn() on `channel`, replacing any request still waiting there; done(result) / error(exc) after."""
        if not self.threaded:
            self._execute(fn, done, error)
            return
        with self._cv:
            if channel in self._pending:
                self.dropped += 1
            self._pending[channel] = (fn, done, error)
            self._pending.move_to_end(channel)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._loop, name="interplab-requests", daemon=True)
                self._worker.start()
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                if not self._pending:
                    self._worker = None
                    self._cv.notify_all()
                    return
                _, job = self._pending.popitem(last=False)
                self._busy = True
            try:
                self._execute(*job)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _execute(self, fn, done, error) -> None:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 - the kernel survives anything a frontend asks for
            log.debug("request failed", exc_info=True)
            if error is not None:
                error(e)
            if not isinstance(e, Exception):
                raise
            return
        finally:
            self.completed += 1
        if done is not None:
            done(result)

    def idle(self) -> bool:
        with self._cv:
            return not self._pending and not self._busy

    def join(self, timeout: float = 30.0) -> bool:
        """Wait until every queued request has run (tests, scripts); True when idle."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._busy, timeout)

"""Stopping a long-running loop cleanly: SIGTERM or SIGINT asks it to drain (finish the work in
hand, flush, leave), a second signal or the drain deadline exits at once.

A loop that has something to do before it exits (the worker runtime hands its partitions back) keeps
its own deadline: it is given a ``now`` event, which the second signal sets instead of exiting (a
third exits), and the hard deadline comes ``grace_s`` after the drain timeout, in case it cannot. A
signal within `SAME_STOP_S` of the one before is the same request, not another: Ctrl-C reaches a
supervisor's children both from the terminal and from the supervisor, as a stop of a whole control
group does.

The handlers are installed by `GracefulShutdown.installed` around a loop's ``run()`` and the
previous ones restored when it returns; outside the main thread nothing is installed (a
loop run by a test or an embedding program is stopped through its event).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import structlog

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: With a ``now`` event: a signal this close to the last one taken is the same request.
SAME_STOP_S = 1.0

log = structlog.get_logger("partarchive.shutdown")


class GracefulShutdown:
    def __init__(
        self, stop: threading.Event, drain_timeout_s: float, *, now: threading.Event | None = None, grace_s: float = 0.0
    ) -> None:
        self.stop = stop
        self.drain_timeout_s = drain_timeout_s
        self.now = now
        self.grace_s = grace_s
        self._deadline: threading.Timer | None = None
        self._last_at = float("-inf")

    @contextmanager
    def installed(self, enabled: bool = True) -> Iterator[None]:
        previous: dict[int, Any] = {}
        if enabled and threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                previous[sig] = signal.signal(sig, self.handle)
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.now is not None and self._deadline is not None:  # its loop ended in time: a program goes on
                self._deadline.cancel()

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.now is not None:
            at = time.monotonic()
            if at - self._last_at < SAME_STOP_S:
                return  # the same request as the signal before, come by another way
            self._last_at = at
        if self.stop.is_set():
            if self.now is not None and not self.now.is_set():
                log.warning("second signal, stopping now", signal=signum)
                self.now.set()
                return
            log.warning("second signal, exiting now", signal=signum)
            os._exit(128 + signum)
        log.info("draining", signal=signum, deadline_s=self.drain_timeout_s)
        self.stop.set()
        deadline = self._deadline = threading.Timer(self.drain_timeout_s + self.grace_s, hard_exit, args=(signum,))
        deadline.daemon = True
        deadline.start()


def hard_exit(signum: int) -> None:
    log.error("drain deadline passed, exiting")
    os._exit(128 + signum)

"""Stopping a long-running loop cleanly: SIGTERM or SIGINT asks it to drain (finish the work in
hand, flush, leave), a second signal or the drain deadline exits at once.

The handlers are installed by `GracefulShutdown.installed` around a loop's ``run()`` and the
previous ones restored when it returns; outside the main thread nothing is installed (a
loop run by a test or an embedding program is stopped through its event).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import structlog

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)

log = structlog.get_logger("partarchive.shutdown")


class GracefulShutdown:
    def __init__(self, stop: threading.Event, drain_timeout_s: float) -> None:
        self.stop = stop
        self.drain_timeout_s = drain_timeout_s

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

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set():
            log.warning("second signal, exiting now", signal=signum)
            os._exit(128 + signum)
        log.info("draining", signal=signum, deadline_s=self.drain_timeout_s)
        self.stop.set()
        deadline = threading.Timer(self.drain_timeout_s, hard_exit, args=(signum,))
        deadline.daemon = True
        deadline.start()


def hard_exit(signum: int) -> None:
    log.error("drain deadline passed, exiting")
    os._exit(128 + signum)

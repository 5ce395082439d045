"""The worker runtime, blocking: `Worker` runs `process(partition, lease)` on ``window`` threads.

    import redis
    from archiver import Worker

    def process(partition, lease):
        for item_id in range(partition.min_id, partition.max_id + 1):
            if lease.lost:          # taken over by another worker: stop, it is not ours any more
                return None
            handle(item_id)
        return partition.max_id - partition.min_id + 1

    Worker(redis.Redis.from_url("redis://localhost:6379/0"), "elk", process, window=3).run()

`run` works until `stop` (or SIGTERM / SIGINT when run on the main thread: a drain, then the
unfinished partitions handed back; a second signal hands them back at once), or with
``until_empty=True`` until nothing is pending or running. What it does is `archiver.runtime.core`'s;
this module adds the threads: one per slot, and the calling thread for the process's duties (its
beat) and its stop. A `process` that runs on after its lease was lost or handed back keeps its
thread (daemon threads: they do not keep the program alive); its result is not used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from archiver.daemon.shutdown import GracefulShutdown
from archiver.runtime.base import RuntimeProcess
from archiver.runtime.core import RunReport, RuntimeCore
from archiver.runtime.lease import Lease
from codec import PartitionInfo
from layers.active.sdk import ActiveLayer

log = structlog.get_logger("partarchive.worker")

Process = Callable[[PartitionInfo, Lease], Any]


class Worker(RuntimeProcess):
    """A worker runtime process on threads (`RuntimeProcess`'s arguments; ``client`` a `redis.Redis`)."""

    _sdk_class = ActiveLayer
    _wants_coroutine = False
    sdk: ActiveLayer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake = threading.Event()  # idle slots: the worker stops, or found the namespace empty
        self._hard = threading.Event()  # slots riding out errors on a finish: what they had in hand was handed back
        self._tick = threading.Event()  # the main thread: something changed
        self._slots: list[threading.Thread] = []

    def stop(self, *, now: bool = False) -> None:
        super().stop(now=now)
        self._tick.set()

    def run(self, *, until_empty: bool = False, install_signals: bool = True) -> RunReport:
        """Work until stopped (or, ``until_empty``, until nothing is pending or running); returns what it did."""
        core = self.core = RuntimeCore(
            self.sdk, self.settings, self.worker_id, _Threads(self), until_empty=until_empty, duties=tuple(self._duties)
        )
        io = self.sdk._io
        shutdown = GracefulShutdown(self._stop, self.settings.drain_timeout_s, now=self._now, grace_s=5.0)
        with shutdown.installed(install_signals):
            io.run(core.begin())
            self._slots = [threading.Thread(target=self._slot, name=f"partarchive-slot-{i}", daemon=True)
                           for i in range(self.settings.window)]  # fmt: skip
            for thread in self._slots:
                thread.start()
            try:
                io.run(core.supervise(self._stop, self._now))
            finally:
                self._hard.set()
                report = io.run(core.end())
            return report

    def _slot(self) -> None:
        assert self.core is not None
        core = self.core
        io = self.sdk._io.lane()  # the slot's scripts on a connection of its own
        try:
            while not core.done and not core.closing:
                try:
                    io.run(core.slot())
                except Exception:  # a defect: logged with its traceback, the slot starts again
                    log.exception("a worker slot failed; starting it again")
                    self._hard.wait(1.0)
        finally:
            io.close()
            self._tick.set()


class _Threads:
    """`archiver.runtime.core.Flavour` on threads."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def process(self, partition: PartitionInfo, lease: Lease) -> Any:
        return self.worker.process(partition, lease)

    def pause(self, seconds: float, hard: bool) -> None:
        (self.worker._hard if hard else self.worker._wake).wait(seconds)

    def lost(self, lease: Lease) -> None:
        """Nothing more on a thread: `process` sees ``lease.lost`` and ``lease.lost_event``."""

    def poke(self) -> None:
        self.worker._tick.set()

    def wake(self) -> None:
        self.worker._wake.set()

    def tick(self, seconds: float) -> None:
        self.worker._tick.wait(seconds)
        self.worker._tick.clear()

    def slots_alive(self) -> bool:
        return any(thread.is_alive() for thread in self.worker._slots)

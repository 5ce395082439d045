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

import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import structlog

from archiver.daemon.shutdown import GracefulShutdown
from archiver.runtime.core import TROUBLE, Duty, RunReport, RuntimeCore
from archiver.runtime.lease import Lease
from archiver.runtime.settings import WorkerSettings, default_worker_id
from codec import PartitionInfo, ValidationError
from layers.active.sdk import ActiveLayer
from layers.active.window import RetryPolicy
from layers.keys import KeySchema

log = structlog.get_logger("partarchive.worker")

#: The longest the main thread sleeps between looks at its stop and its slots.
TICK_S = 0.5

Process = Callable[[PartitionInfo, Lease], Any]


class Worker:
    """A worker runtime process on threads. ``process(partition, lease)`` does the user's work and
    returns the number of items it processed (None: the partition's ID count); raising fails the
    partition (retried by ``retry``). The other arguments: `WorkerSettings` and `ActiveLayer`'s."""

    def __init__(
        self,
        client: redis.Redis,
        namespace: str | KeySchema = "elk",
        process: Process | None = None,
        *,
        window: int = 3,
        worker_id: str | None = None,
        heartbeat_s: float = 10.0,
        lease_s: float = 300.0,
        drain_timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        breaker_failures: int = 3,
        breaker_cooldown_s: float = 30.0,
        cluster: bool = False,
        elk_prefix: str | None = None,
        record_format: str | None = None,
        clock: Callable[[], float] | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        if process is None or not callable(process):
            raise ValidationError("process must be a function process(partition, lease)")
        if inspect.iscoroutinefunction(process):
            raise ValidationError("process is a coroutine function: run it with AsyncWorker")
        self.process = process
        self.settings = settings or WorkerSettings(
            window=window, heartbeat_s=heartbeat_s, lease_s=lease_s, drain_timeout_s=drain_timeout_s,
            retry=retry or RetryPolicy(), breaker_failures=breaker_failures, breaker_cooldown_s=breaker_cooldown_s,
        )  # fmt: skip
        self.worker_id = worker_id or default_worker_id()
        self.sdk = ActiveLayer(client, namespace, cluster=cluster, lease_timeout=self.settings.lease_s,
                               clock=clock, elk_prefix=elk_prefix, record_format=record_format)  # fmt: skip
        self.sdk._checked_worker(self.worker_id)
        self._stop = threading.Event()  # drain
        self._now = threading.Event()  # hand back at once
        self._wake = threading.Event()  # idle slots: the worker stops, or found the namespace empty
        self._hard = threading.Event()  # slots riding out errors on a finish: what they hold was handed back
        self._tick = threading.Event()  # the main thread: something changed
        self.core: RuntimeCore | None = None

    @property
    def duties(self) -> dict[Duty, float]:
        """The running core's duties and when each is next due (to add one: ``worker.duties[duty] = 0``)."""
        assert self.core is not None, "the worker is not running"
        return self.core.schedule

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming and let the partitions in hand finish (within the drain timeout); with
        ``now``, hand them back at once. Safe from any thread."""
        self._stop.set()
        if now:
            self._now.set()
        self._tick.set()

    def run(self, *, until_empty: bool = False, install_signals: bool = True) -> RunReport:
        """Work until stopped (or, ``until_empty``, until nothing is pending or running); returns what it did."""
        core = self.core = RuntimeCore(self.sdk, self.settings, self.worker_id, _Threads(self), until_empty=until_empty)
        shutdown = GracefulShutdown(self._stop, self.settings.drain_timeout_s, now=self._now, grace_s=5.0)
        with shutdown.installed(install_signals):
            log.info("worker started", worker=self.worker_id, namespace=core.namespace, window=self.settings.window,
                     lease_s=self.settings.lease_s, beat_s=self.settings.beat_s)  # fmt: skip
            core.schedule[core.beat] = time.monotonic() + self.sdk._io.run(core.beat.turn())  # the clock synced
            with contextlib.suppress(*TROUBLE):  # Redis not there yet: the slots ride it out
                self.sdk._io.run(self.sdk._ready(self.worker_id))
            slots = [threading.Thread(target=self._slot, name=f"partarchive-slot-{i}", daemon=True)
                     for i in range(self.settings.window)]  # fmt: skip
            for thread in slots:
                thread.start()
            self._supervise(core, slots)
            self._hard.set()
            self.sdk._io.run(core.hand_back())
            for thread in slots:
                thread.join(0.5 if not thread.is_alive() else 0.0)
        report = core.report()
        log.info("worker stopped", worker=self.worker_id, processed=report.processed, failed=report.failed,
                 lost=report.leases_lost, handed_back=report.handed_back, ended=report.ended)  # fmt: skip
        return report

    def _supervise(self, core: RuntimeCore, slots: list[threading.Thread]) -> None:
        """The main thread's loop: the duties when due, the drain when stopped, until the slots end or
        the drain deadline (or a second stop) passes."""
        deadline: float | None = None
        while True:
            now = time.monotonic()
            for duty, at in list(core.schedule.items()):
                if now >= at:
                    core.schedule[duty] = time.monotonic() + self.sdk._io.run(duty.turn())
            if not any(thread.is_alive() for thread in slots):
                return
            if self._stop.is_set() and deadline is None:
                deadline = now + self.settings.drain_timeout_s
                core.stop()
                self._wake.set()
                log.info("draining", worker=self.worker_id, in_hand=core.in_hand,
                         deadline_s=self.settings.drain_timeout_s)  # fmt: skip
            if self._now.is_set() or (deadline is not None and now >= deadline):
                return
            if core.drained:
                self._wake.set()
            until = min([*core.schedule.values(), deadline or float("inf"), now + TICK_S])
            self._tick.wait(max(0.0, until - time.monotonic()))
            self._tick.clear()

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

"""The worker runtime on asyncio: `AsyncWorker` runs ``async def process(partition, lease)`` in
``window`` tasks of one event loop.

    import redis.asyncio
    from archiver import AsyncWorker

    async def process(partition, lease):
        await fetch_and_store(partition.min_id, partition.max_id)   # cancelled if the lease is lost

    async def main():
        pool = redis.asyncio.BlockingConnectionPool.from_url("redis://localhost:6379/0", max_connections=70)
        await AsyncWorker(redis.asyncio.Redis(connection_pool=pool), "elk", process, window=64).run()

Same settings, steps and stop as `archiver.runtime.worker.Worker` (`archiver.runtime.core`); here a
lease found lost cancels the task running `process` on it. Each slot holds a connection only while
a call is under way; give the client a pool that waits for a free connection (a
`BlockingConnectionPool`) when the window is large.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from archiver.daemon.shutdown import GracefulShutdown
from archiver.runtime.core import TROUBLE, Duty, RunReport, RuntimeCore
from archiver.runtime.lease import Lease, LeaseLost
from archiver.runtime.settings import WorkerSettings, default_worker_id
from codec import PartitionInfo, ValidationError
from layers.active.core import Clock
from layers.active.sdk_async import AsyncActiveLayer
from layers.active.window import RetryPolicy
from layers.keys import KeySchema
from layers.plumbing.steps import AsyncClient, AsyncIO

log = structlog.get_logger("partarchive.worker")

#: The longest the main task sleeps between looks at its stop (a signal or another thread's `stop`).
TICK_S = 0.1

AsyncProcess = Callable[[PartitionInfo, Lease], Awaitable[Any]]


class AsyncWorker:
    """`archiver.runtime.worker.Worker` on asyncio: ``await AsyncWorker(client, "elk", process).run()``."""

    def __init__(
        self,
        client: AsyncClient,
        namespace: str | KeySchema = "elk",
        process: AsyncProcess | None = None,
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
        clock: Clock | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        if process is None or not inspect.iscoroutinefunction(process):
            raise ValidationError("process must be a coroutine function: async def process(partition, lease)")
        self.process = process
        self.settings = settings or WorkerSettings(
            window=window, heartbeat_s=heartbeat_s, lease_s=lease_s, drain_timeout_s=drain_timeout_s,
            retry=retry or RetryPolicy(), breaker_failures=breaker_failures, breaker_cooldown_s=breaker_cooldown_s,
        )  # fmt: skip
        self.worker_id = worker_id or default_worker_id()
        self.sdk = AsyncActiveLayer(client, namespace, cluster=cluster, lease_timeout=self.settings.lease_s,
                                    clock=clock, elk_prefix=elk_prefix, record_format=record_format)  # fmt: skip
        self.sdk._checked_worker(self.worker_id)
        self._stop = threading.Event()  # set by a signal or any thread: read by the main task
        self._now = threading.Event()
        self._wake: asyncio.Event | None = None  # made in `run`, on its loop
        self._hard: asyncio.Event | None = None
        self._tick: asyncio.Event | None = None
        self.core: RuntimeCore | None = None

    @property
    def duties(self) -> dict[Duty, float]:
        """The running core's duties and when each is next due (to add one: ``worker.duties[duty] = 0``)."""
        assert self.core is not None, "the worker is not running"
        return self.core.schedule

    def stop(self, *, now: bool = False) -> None:
        """As `Worker.stop`; safe from any thread (the worker looks within `TICK_S`)."""
        self._stop.set()
        if now:
            self._now.set()

    async def run(self, *, until_empty: bool = False, install_signals: bool = True) -> RunReport:
        """As `Worker.run`, awaited."""
        self._wake, self._hard, self._tick = asyncio.Event(), asyncio.Event(), asyncio.Event()
        core = self.core = RuntimeCore(self.sdk, self.settings, self.worker_id, _Tasks(self), until_empty=until_empty)
        shutdown = GracefulShutdown(self._stop, self.settings.drain_timeout_s, now=self._now, grace_s=5.0)
        with shutdown.installed(install_signals):
            log.info("worker started", worker=self.worker_id, namespace=core.namespace, window=self.settings.window,
                     lease_s=self.settings.lease_s, beat_s=self.settings.beat_s, flavour="asyncio")  # fmt: skip
            core.schedule[core.beat] = time.monotonic() + await self.sdk._io.run(core.beat.turn())  # the clock synced
            with contextlib.suppress(*TROUBLE):  # Redis not there yet: the slots ride it out
                await self.sdk._io.run(self.sdk._ready(self.worker_id))
            lane = await self.sdk._io.lane()  # the slots' scripts go together, on a connection they share
            slots = [asyncio.create_task(self._slot(core, lane)) for _ in range(self.settings.window)]
            try:
                await self._supervise(core, slots)
            finally:
                self._hard.set()
                await self.sdk._io.run(core.hand_back())
                for task in slots:
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(slots, timeout=1.0)
                await lane.close()
        report = core.report()
        log.info("worker stopped", worker=self.worker_id, processed=report.processed, failed=report.failed,
                 lost=report.leases_lost, handed_back=report.handed_back, ended=report.ended)  # fmt: skip
        return report

    async def _supervise(self, core: RuntimeCore, slots: list[asyncio.Task[None]]) -> None:
        assert self._tick is not None and self._wake is not None
        deadline: float | None = None
        while True:
            now = time.monotonic()
            for duty, at in list(core.schedule.items()):
                if now >= at:
                    core.schedule[duty] = time.monotonic() + await self.sdk._io.run(duty.turn())
            if all(task.done() for task in slots):
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick.wait(), max(0.0, until - time.monotonic()))
            self._tick.clear()

    async def _slot(self, core: RuntimeCore, io: AsyncIO) -> None:
        assert self._hard is not None and self._tick is not None
        try:
            while not core.done and not core.closing:
                try:
                    await io.run(core.slot())
                except Exception:  # a defect: logged with its traceback, the slot starts again
                    log.exception("a worker slot failed; starting it again")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hard.wait(), 1.0)
        finally:
            self._tick.set()


class _Tasks:
    """`archiver.runtime.core.Flavour` on asyncio."""

    def __init__(self, worker: AsyncWorker) -> None:
        self.worker = worker

    async def process(self, partition: PartitionInfo, lease: Lease) -> Any:
        """`process` awaited in its slot's task, which a lost lease cancels (`lost`): `LeaseLost` then.
        (A task of its own a partition would cost as much as the rest of the partition's work here.)"""
        task = lease.task = asyncio.current_task()
        try:
            return await self.worker.process(partition, lease)
        except asyncio.CancelledError:
            if not lease.lost:  # the slot itself is cancelled
                raise
            raise LeaseLost(lease.reason or "lost") from None
        finally:
            lease.task = None
            if lease.lost and task is not None and task.cancelling():
                task.uncancel()  # the cancel was the lease's, not the slot's

    async def pause(self, seconds: float, hard: bool) -> None:
        event = self.worker._hard if hard else self.worker._wake
        assert event is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)

    def lost(self, lease: Lease) -> None:
        if lease.task is not None:  # `process` is under way on it
            lease.task.cancel()

    def poke(self) -> None:
        if self.worker._tick is not None:
            self.worker._tick.set()

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
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from archiver.daemon.shutdown import GracefulShutdown
from archiver.runtime.base import RuntimeProcess
from archiver.runtime.core import RunReport, RuntimeCore
from archiver.runtime.lease import Lease, LeaseLost
from codec import PartitionInfo
from layers.active.sdk_async import AsyncActiveLayer
from layers.plumbing.runners import AsyncIO

log = structlog.get_logger("partarchive.worker")

AsyncProcess = Callable[[PartitionInfo, Lease], Awaitable[Any]]


class AsyncWorker(RuntimeProcess):
    """`archiver.runtime.worker.Worker` on asyncio (``client`` a `redis.asyncio` client):
    ``await AsyncWorker(client, "elk", process).run()``."""

    _sdk_class = AsyncActiveLayer
    _wants_coroutine = True
    sdk: AsyncActiveLayer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake: asyncio.Event | None = None  # made in `run`, on its loop
        self._hard: asyncio.Event | None = None
        self._tick: asyncio.Event | None = None
        self._slots: list[asyncio.Task[None]] = []

    async def run(self, *, until_empty: bool = False, install_signals: bool = True) -> RunReport:
        """As `Worker.run`, awaited."""
        self._wake, self._hard, self._tick = asyncio.Event(), asyncio.Event(), asyncio.Event()
        core = self.core = RuntimeCore(
            self.sdk, self.settings, self.worker_id, _Tasks(self), until_empty=until_empty, duties=tuple(self._duties)
        )
        io = self.sdk._io
        shutdown = GracefulShutdown(self._stop, self.settings.drain_timeout_s, now=self._now, grace_s=5.0)
        with shutdown.installed(install_signals):
            await io.run(core.begin())
            lane = await io.lane()  # the slots' scripts go together, on a connection they share
            self._slots = [asyncio.create_task(self._slot(core, lane)) for _ in range(self.settings.window)]
            try:
                await io.run(core.supervise(self._stop, self._now))
            finally:
                self._hard.set()
                report = await io.run(core.end())
                for task in self._slots:
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(self._slots, timeout=1.0)
                await lane.close()
            return report

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

    def wake(self) -> None:
        assert self.worker._wake is not None
        self.worker._wake.set()

    async def tick(self, seconds: float) -> None:
        assert self.worker._tick is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.worker._tick.wait(), seconds)
        self.worker._tick.clear()

    def slots_alive(self) -> bool:
        return not all(task.done() for task in self.worker._slots)

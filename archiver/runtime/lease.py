"""A partition in the runtime's hand, as `process(partition, lease)` is given it."""

from __future__ import annotations

import threading
from typing import Any

from codec import PartitionInfo

#: Guards the making and setting of the leases' events (rare: a lease asked for its event, a lease lost).
_EVENTS = threading.Lock()


class LeaseLost(Exception):
    """The lease of the partition `process` works on was lost (on asyncio its task is cancelled,
    and the runtime sees this instead): this worker does not complete the partition."""


class Lease:
    """The lease of one worker on one partition while `process` works on it.

    ``lost`` turns true, and ``lost_event`` is set, when the runtime finds the lease gone: another
    worker took the partition over (this worker's heartbeats did not reach Redis for a lease's time),
    the partition is no longer this worker's or no longer active, or the worker stopped and handed it
    back. ``reason`` says which. A `process` on a thread may look at ``lost`` (or wait on
    ``lost_event``) to stop early; on asyncio its task is cancelled. Either way, whatever `process`
    returns afterwards, this worker never completes that partition: its new owner does.
    """

    __slots__ = ("_event", "_finishing", "_lost", "partition", "reason", "task", "worker_id")

    def __init__(self, partition: PartitionInfo, worker_id: str) -> None:
        self.partition = partition
        self.worker_id = worker_id
        self.reason: str | None = None
        self.task: Any = None  # asyncio: the task running `process`
        self._lost = False
        self._event: threading.Event | None = None  # made when first asked for (most leases never are)
        self._finishing = False  # its finish is under way: beats and hand-backs leave it alone

    @property
    def partition_id(self) -> int:
        return self.partition.partition_id

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def lost_event(self) -> threading.Event:
        """Set once the lease is lost."""
        with _EVENTS:
            if self._event is None:
                self._event = threading.Event()
                if self._lost:
                    self._event.set()
            return self._event

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Wait until the lease is lost (True) or ``timeout`` passes (False)."""
        return self.lost_event.wait(timeout)

    def _lose(self, reason: str) -> None:
        with _EVENTS:
            self.reason = self.reason or reason
            self._lost = True
            if self._event is not None:
                self._event.set()

    def __repr__(self) -> str:
        state = f"lost: {self.reason}" if self.lost else "held"
        return f"Lease(partition {self.partition_id}, {self.worker_id}, {state})"

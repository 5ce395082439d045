"""What `archiver.runtime.worker.Worker` and `archiver.runtime.worker_async.AsyncWorker` share: their
arguments, checked once, the SDK they drive, and how they are stopped."""

from __future__ import annotations

import threading
from typing import Any

from archiver.runtime.core import Duty, RuntimeCore
from archiver.runtime.elk_registry import ElkRegistration
from archiver.runtime.leader import LeaderDuty, LeaderSettings
from archiver.runtime.settings import WorkerSettings, default_worker_id
from codec import ValidationError
from layers.active.window import RetryPolicy
from layers.keys import KeySchema


class RuntimeProcess:
    """A worker runtime process of either flavour. ``process(partition, lease)`` does the user's work and
    returns the number of items it processed (None: the partition's ID count); raising fails the
    partition (retried by ``retry``). With a ``planner`` the process may lead the namespace and create
    its partitions as the data grows (`archiver.runtime.leader`, ``leader`` its settings). The other
    arguments are `WorkerSettings`' (or ``settings`` whole) and the SDK's (`layers.active.sdk.ActiveLayer`).
    In a namespace bound to an elk_coordinator deployment the process registers where Go's leader counts
    workers (`archiver.runtime.elk_registry`)."""

    _sdk_class: Any  # the flavour's SDK
    _wants_coroutine: bool  # the flavour's `process`: a coroutine function, or any other

    def __init__(
        self,
        client: Any,
        namespace: str | KeySchema = "elk",
        process: Any = None,
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
        clock: Any = None,
        settings: WorkerSettings | None = None,
        planner: Any = None,
        leader: LeaderSettings | None = None,
    ) -> None:
        import inspect

        if process is None or not callable(process):
            raise ValidationError("process must be a function process(partition, lease)")
        if inspect.iscoroutinefunction(process) != self._wants_coroutine:
            raise ValidationError(
                "process must be a coroutine function: async def process(partition, lease)"
                if self._wants_coroutine
                else "process is a coroutine function: run it with AsyncWorker"
            )
        self.process = process
        self.settings = settings or WorkerSettings(
            window=window, heartbeat_s=heartbeat_s, lease_s=lease_s, drain_timeout_s=drain_timeout_s,
            retry=retry or RetryPolicy(), breaker_failures=breaker_failures, breaker_cooldown_s=breaker_cooldown_s,
        )  # fmt: skip
        self.worker_id = worker_id or default_worker_id()
        self.sdk = self._sdk_class(client, namespace, cluster=cluster, lease_timeout=self.settings.lease_s,
                                   clock=clock, elk_prefix=elk_prefix, record_format=record_format)  # fmt: skip
        self.sdk._checked_worker(self.worker_id)
        self._stop = threading.Event()  # drain: set by `stop`, a signal, any thread
        self._now = threading.Event()  # hand back at once
        self._duties: list[Duty] = []
        self.core: RuntimeCore | None = None
        self.leader: LeaderDuty | None = None
        if planner is not None:
            self.leader = LeaderDuty(self.sdk, self.worker_id, planner, leader or LeaderSettings(),
                                     on_asyncio=self._wants_coroutine)  # fmt: skip
            self._duties.append(self.leader)
        if self.sdk.keys.elk is not None:
            self._duties.append(ElkRegistration(self.sdk.keys, self.worker_id))

    def add_duty(self, duty: Duty) -> None:
        """Work for the process to do by the clock beside its slots, from its next `run` on (a leader's,
        say): `Duty.turn` is run when due, on the loop that runs the beat, first as the run begins."""
        self._duties.append(duty)

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming and let the partitions in hand finish (within the drain timeout); with
        ``now``, hand them back at once. Safe from any thread and from a signal handler."""
        self._stop.set()
        if now:
            self._now.set()

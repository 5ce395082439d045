"""The leader of a namespace, as a duty of the worker runtime (`archiver.runtime.core.Duty`): any runtime
process given a planner may lead, one at a time, as elk_coordinator's ``LeaderManager`` does.

Every few seconds (a third of the lease) each such process asks for the lease or renews the one it has
(`layers.active.planning`); the one that has it, every ``interval_s``:

1. keeps ``multiple`` times the live workers' windows pending ahead, no more (the windows from the
   workers' presence entries; in a namespace bound to a Go deployment Go's live workers count too, each
   with Go's task window, 3), and never more than ``max_pending``: it asks the planner for the IDs to
   come from the plan's next start (``next_max_id(start_id, size)``) and creates the partitions for
   them, from where the last run ended, in one fenced step;
2. checks the partitions against the plan (a hole: a planned partition neither active nor completed;
   an overlap: IDs held by two partitions) and writes what it found, and the partitions failed for good
   (after their retry policy's last attempt; the runtime's beats send the others back to pending).

A change of leader is one log line; a leader that finds its lease gone (it paused past it) says so and
stands down: its writes were refused meanwhile. A planner that raises is logged once and asked again
at the next interval; one that has nothing new creates nothing.

**A planner** is any object with ``partition_size()`` (IDs a partition holds; below 1, or raising: Go's
default, 3000) and ``next_max_id(start_id, size)``: the highest ID of the next range to create, asked
for about ``size`` IDs from ``start_id`` on (the plan's next start, included); below ``start_id`` when
there is nothing new. Either may be a coroutine function. An optional ``first_id`` (an int, or a method
giving one) is where a plan starts (default 1). elk_coordinator's ``PartitionPlaner.GetNextMaxID(startID,
rangeSize)`` is given the last ID planned: ``next_max_id(start_id, size)`` is ``GetNextMaxID(start_id - 1, size)``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass
from typing import Any

import structlog

from archiver.runtime.core import BACKOFF_FIRST_S, BACKOFF_MAX_S, TROUBLE
from archiver.runtime.metrics import LEADER_SERIES
from codec import ValidationError
from codec.validate import MAX_INT64, MIN_INT64, check_int, check_seconds
from layers.active.go_workers import GoWorkers
from layers.active.planning import Lead, Planning
from layers.errors import NotLeader, PlanChanged
from layers.plumbing.steps import Call, Steps

log = structlog.get_logger("partarchive.leader")

#: elk_coordinator's defaults: a partition's IDs, and the task window each of its workers has.
GO_PARTITION_SIZE = 3000
GO_TASK_WINDOW = 3


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    """How a runtime process leads (elk_coordinator's names and defaults in brackets)."""

    lease_s: float = 30.0  # the lease, renewed every third of it (LeaderLockExpiry, 30 s)
    interval_s: float = 30.0  # how often the leader plans and checks (AllocationInterval, 30 s)
    multiple: int = 5  # pending partitions kept ahead per partition a live worker works on (WorkerPartitionMultiple, 5)
    max_pending: int = 1000  # and never more than this many (MaxPendingPartitions, 1000)

    def __post_init__(self) -> None:
        check_seconds("lease_s", self.lease_s)
        check_seconds("interval_s", self.interval_s)
        check_int("multiple", self.multiple, 1, 1_000_000)
        check_int("max_pending", self.max_pending, 1, 1_000_000)

    @property
    def renew_s(self) -> float:
        return self.lease_s / 3


def check_planner(planner: Any) -> Any:
    """``planner`` if it has the two methods a planner has, else a `ValidationError` naming what is missing."""
    for name in ("partition_size", "next_max_id"):
        if not callable(getattr(planner, name, None)):
            raise ValidationError(f"a planner has {name}(): {type(planner).__name__} has none")
    first = getattr(planner, "first_id", None)
    if first is not None and not callable(first):
        check_int("the planner's first_id", first, MIN_INT64, MAX_INT64)
    return planner


class LeaderDuty:
    """The leader's work in one runtime process (see the module)."""

    name = "leader"

    def __init__(self, sdk: Any, worker_id: str, planner: Any, settings: LeaderSettings, *, on_asyncio: bool) -> None:
        self.sdk = sdk
        self.worker_id = worker_id
        self.planner = check_planner(planner)
        self.settings = settings
        self.on_asyncio = on_asyncio
        self.planning = Planning(sdk)
        self.go_workers = GoWorkers(sdk.keys) if sdk.keys.elk is not None else None
        if self.go_workers is not None and sdk.keys.elk_namespace is None:
            raise ValidationError(
                "a leader in a namespace bound to elk_coordinator needs Go's namespace (NewMgr's first argument, "
                "--elk-namespace), so that it stands aside while Go's leader has taken its lock"
            )
        self.namespace = sdk.keys.namespace
        self.token = 0  # of the lease this process has (0: none)
        self.leader = ""  # who leads, as last seen ('' unknown)
        self._renewed = 0.0  # monotonic: when the lease was last taken or renewed
        self._next_plan = 0.0
        self._troubles: dict[str, int] = {}
        self._used_up = False
        self._failed_final = 0  # partitions failed for good, as the last check counted them
        self._m = {name: metric.labels(namespace=self.namespace) for name, metric in LEADER_SERIES.items()}

    @property
    def leads(self) -> bool:
        return self.token != 0

    def turn(self) -> Steps[float]:
        """Take or renew the lease; leading, plan and check when due. The seconds until the next turn."""
        renew = self.settings.renew_s
        try:
            got = yield from self.planning._lead(self.worker_id, self.token, self.settings.lease_s)
        except TROUBLE as exc:
            if self.leads and time.monotonic() - self._renewed >= self.settings.lease_s:
                self._stand_down("its lease could not be renewed in time", str(exc))
            return min(renew, self._troubled("lead", exc))
        self._untroubled("lead")
        self._seen(got)
        if not got.leads:
            if got.left_ms and not got.go:  # try again as the holder's lease ends: another leads within a lease
                return min(renew, got.left_ms / 1000 + 0.05)
            return renew
        if time.monotonic() >= self._next_plan:
            self._next_plan = time.monotonic() + self.settings.interval_s
            try:
                yield from self._allocate()
                yield from self._check()
            except NotLeader as exc:
                self._stand_down("a write was refused", str(exc))
                return 0.05
            except PlanChanged as exc:  # written meanwhile by another writer (none should be while it leads)
                log.warning("leader: the plan moved on as it planned; it plans again at the next interval",
                            namespace=self.namespace, error=str(exc))  # fmt: skip
            except TROUBLE as exc:
                self._troubled("plan", exc)
            else:
                self._untroubled("plan")
        return max(0.0, min(renew, self._next_plan - time.monotonic()))

    def close(self) -> Steps[None]:
        """At the process's stop: the lease given up, so another process leads at once."""
        if not self.leads:
            return
        token, self.token = self.token, 0
        self._m["leader"].set(0)
        if (yield from self.planning._resign(self.worker_id, token)):
            log.info("leader: gave up the lead at its stop", namespace=self.namespace, token=token)

    # the lease

    def _seen(self, got: Lead) -> None:
        if got.leads:
            self._renewed = time.monotonic()
            if got.token != self.token:
                if self.token:
                    log.warning("leader: its lease had ended; leads again with a new token",
                                namespace=self.namespace, token=got.token)  # fmt: skip
                else:
                    log.info("leader: this process leads", namespace=self.namespace, worker=self.worker_id,
                             token=got.token)  # fmt: skip
                self.token = got.token
                self._next_plan = 0.0
                self._m["leader"].set(1)
                self._m["terms"].inc()
            self.leader = self.worker_id
            return
        if self.leads:
            self._stand_down("another leads", f"{got.holder} (token {got.token})" if not got.go else got.holder)
        elif got.go and self.leader != got.holder:
            log.info("leader: stands aside while elk_coordinator's leader has taken its lock", namespace=self.namespace,
                     go_leader=got.holder)  # fmt: skip
        self.leader = got.holder

    def _stand_down(self, why: str, detail: str) -> None:
        log.warning(f"leader: no longer leads: {why}", namespace=self.namespace, token=self.token, detail=detail)
        self.token = 0
        self.leader = ""
        self._m["leader"].set(0)

    # planning

    def _allocate(self) -> Steps[None]:
        """Keep ``multiple`` x the live windows pending ahead: the planner asked, the next run created."""
        sdk, s = self.sdk, self.settings
        counts = yield from sdk._counts()
        presence = yield from sdk._presence()
        windows = sum(w.window for w in presence)
        if self.go_workers is not None:
            mine = {w.worker_id for w in presence}
            windows += GO_TASK_WINDOW * len([w for w in (yield from self.go_workers.live()) if w not in mine])
        want = min(s.multiple * windows, s.max_pending) - counts["pending"] - counts["claimed"]
        if want <= 0:
            return
        size = yield from self._ask_int("partition_size", lo=1)
        size = GO_PARTITION_SIZE if size is None else size  # as Go's leader takes it
        first_id = getattr(self.planner, "first_id", None)
        if callable(first_id):
            first_id = yield from self._ask_int("first_id", lo=MIN_INT64)
            if first_id is None:
                return
        first_id = 1 if first_id is None else first_id
        state = yield from self.planning._state()
        start, _ = state.start(first_id)
        if start > MAX_INT64:
            if not self._used_up:
                log.warning("leader: every ID up to 2^63 - 1 is planned; nothing more can be", namespace=self.namespace)
                self._used_up = True
            return
        max_id = yield from self._ask_int("next_max_id", start, want * size, lo=MIN_INT64)
        if max_id is None or max_id < start:  # failed (logged), or nothing new
            return
        self._untroubled("planner")
        made = yield from self.planning._extend(self.token, min(max_id, start + want * size - 1), size,
                                                first_id=first_id)  # fmt: skip
        if made is None:
            return
        self._m["planned"].inc(len(made.pids))
        log.info("leader: partitions planned", namespace=self.namespace, worker=self.worker_id,
                 partitions=len(made.pids), pids=f"{made.pids.start}..{made.pids.stop - 1}",
                 ids=f"{made.min_id}..{made.max_id}", pending_before=counts["pending"], token=self.token)  # fmt: skip

    def _check(self) -> Steps[None]:
        report = yield from self.planning._check(self.token)
        if report is None:
            return
        if report.failed_final > self._failed_final:
            log.warning("leader: partitions failed for good (after their last attempt)", namespace=self.namespace,
                        failed=report.failed_final)  # fmt: skip
        self._failed_final = report.failed_final
        for finding in report.holes + report.overlaps:
            log.warning(f"leader: the plan has {'a hole' if finding.kind == 'hole' else 'an overlap'}",
                        namespace=self.namespace, ids=f"{finding.min_id}..{finding.max_id}",
                        partition=finding.partition_id, detail=finding.detail)  # fmt: skip

    def _ask_int(self, method: str, *args: Any, lo: int) -> Steps[int | None]:
        """The planner's ``method`` called (`_call`) for an int from ``lo`` to 2^63 - 1; None when it
        raised or gave something else (logged once a streak, counted), or, for ``partition_size``,
        gave less than 1 (Go's leader then takes its default)."""
        try:
            got = yield Call(self._call, (method, *args))
            if method == "partition_size" and isinstance(got, int) and not isinstance(got, bool) and got < 1:
                return None
            return check_int(f"the planner's {method}()", got, lo, MAX_INT64)
        except Exception as exc:  # the planner's own failure, whatever it is: asked again at the next interval
            self._troubled("planner", exc)
            self._m["planner_errors"].inc()
            return None

    def _call(self, method: str, *args: Any) -> Any:
        """The planner's ``method``: awaited on asyncio (a blocking one in a thread of its own, so the loop
        goes on), run to its end on threads (a coroutine one with `asyncio.run`)."""
        function = getattr(self.planner, method)
        if self.on_asyncio:
            if inspect.iscoroutinefunction(function):
                return function(*args)
            return asyncio.to_thread(function, *args)
        got = function(*args)
        return asyncio.run(got) if inspect.iscoroutine(got) else got

    # errors that pass

    def _troubled(self, what: str, exc: BaseException) -> float:
        count = self._troubles[what] = self._troubles.get(what, 0) + 1
        if count == 1:
            log.warning(f"leader: {what} failed; trying again", namespace=self.namespace, error=str(exc),
                        kind=type(exc).__name__)  # fmt: skip
        return float(min(BACKOFF_FIRST_S * 2 ** (count - 1), BACKOFF_MAX_S))

    def _untroubled(self, what: str) -> None:
        if self._troubles.pop(what, 0) > 1:
            log.info(f"leader: {what} works again", namespace=self.namespace)

"""The worker runtime's logic, written once for its two flavours (`archiver.runtime.worker.Worker` on
threads, `archiver.runtime.worker_async.AsyncWorker` on asyncio tasks) as generators of steps
(`layers.plumbing.steps`), which the flavour drives blocking or awaited, as the SDK's are.

A runtime process has up to ``window`` partitions in hand, one per *window slot*. A slot claims and starts a
partition (one call), runs the user's `process(partition, lease)` on it (a `Call` step: the function
itself on a thread, a task awaited on asyncio), and finishes it: completed, or failed with its error's
first line and the retry policy, in the same call that claims and starts its next partition
(`ActiveLayer.complete_and_claim`): one round trip a partition. Beside the slots, the process's
*duties* run by the clock: today its beat (every lease in hand renewed in one call, its presence
entry refreshed, failed partitions whose back-off is over sent back to pending); a leader task can be
one more duty (`Duty`).

Stopping: `stop` ends claims; slots finish what they have in hand (completing it, claiming nothing); after
the drain timeout, or at once on `stop(now=True)`, `hand_back` gives what is still in hand back to
pending in one call and marks those leases lost, so whatever `process` does with them afterwards,
this worker completes none of them.

The runtime adds no Redis logic of its own: its Redis work is the SDK's steps (`layers.active.core`'s task window).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import redis
import structlog

from archiver.runtime.breaker import CircuitBreaker
from archiver.runtime.lease import Lease, LeaseLost
from archiver.runtime.metrics import SERIES, start_series
from archiver.runtime.settings import IDLE_FIRST_S, WorkerSettings
from codec import DecodeError, PartArchiveError, PartitionInfo, ValidationError
from layers.active.core import ActiveCore
from layers.active.presence import WorkerPresence
from layers.active.window import Finished
from layers.errors import CorruptMetadata, InvalidTransition, NotOwner, PartitionNotFound
from layers.plumbing.steps import Call, Steps, one

log = structlog.get_logger("partarchive.worker")

#: Errors a slot or duty rides out: logged once while they last, the step tried again after a back-off.
TROUBLE = (redis.RedisError, PartArchiveError, OSError)
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
#: An error's first line, as a failed partition keeps it, is cut to this many characters.
ERROR_LINE_CHARS = 500
#: How often at most a process asks whether the namespace is empty (``until_empty``), whatever its window.
EMPTY_CHECK_S = 0.25
#: The longest the main loop waits between looks at its stop (a signal, or another thread's `stop`).
TICK_S = 0.1


class Outcome(NamedTuple):
    """What `process` did with a partition."""

    items: int = 0
    error: str | None = None  # its failure's first line
    lost: bool = False  # its lease was lost while it ran (asyncio: its task cancelled)


class Flavour(Protocol):
    """What a flavour gives the core: how `process` is called, how a slot waits, and what losing a lease
    and a change of state do there."""

    def process(self, partition: PartitionInfo, lease: Lease) -> Any:
        """The user's `process` on this partition (a `Call` step's function: awaited on asyncio)."""

    def pause(self, seconds: float, hard: bool) -> Any:
        """Wait ``seconds``, less when the worker stops (``hard``: only when it hands back)."""

    def lost(self, lease: Lease) -> None:
        """A lease was lost (asyncio: `process`'s task cancelled)."""

    def poke(self) -> None:
        """Something the main loop waits for happened (a slot ended, a duty is due sooner)."""

    def wake(self) -> None:
        """Wake the slots that wait (for work, for the breaker): the worker stops, or found nothing left."""

    def tick(self, seconds: float) -> Any:
        """The main loop's wait: ``seconds``, or until `poke` (a `Call` step's function)."""

    def slots_alive(self) -> bool:
        """Whether any slot still runs."""


class Duty(Protocol):
    """Work a runtime process does by the clock beside its slots, one turn at a time: its beat, the
    leader (`archiver.runtime.leader`), the registration with elk_coordinator in a bound namespace. A
    duty with a ``close()`` (steps) has it run as the process stops, after the hand-back."""

    name: str

    def turn(self) -> Steps[float]:
        """One turn; returns the seconds until the next. Rides out Redis errors itself."""


@dataclass(frozen=True, slots=True)
class RunReport:
    """What `Worker.run` did, when it returns."""

    worker_id: str
    processed: int  # partitions completed
    items: int
    failed: int  # partitions whose process() raised (each attempt)
    retried: int  # failures sent back to pending after a back-off
    leases_lost: int
    handed_back: int  # unfinished at the stop, handed back to pending
    ended: str  # 'empty' (until_empty), 'stopped'


class RuntimeCore:
    """The state and the steps of one runtime process (no I/O and no concurrency of its own)."""

    def __init__(
        self,
        sdk: ActiveCore,
        settings: WorkerSettings,
        worker_id: str,
        flavour: Flavour,
        *,
        until_empty: bool,
        duties: tuple[Duty, ...] = (),
    ) -> None:
        self.sdk = sdk
        self.settings = settings
        self.worker_id = worker_id
        self.flavour = flavour
        self.until_empty = until_empty
        self.namespace = sdk.keys.namespace
        self.breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_cooldown_s)
        self._lock = threading.Lock()
        self._hand: dict[int, Lease] = {}
        self.processed = self.items = self.failed = self.retried = self.leases_lost = self.handed_back = 0
        self.stopping = False  # no more claims; what is in hand finishes
        self.closing = False  # what was in hand is handed back
        self.drained = False  # until_empty: nothing pending or running was found
        self.started_at: float | None = None  # the server's clock at the first beat
        self._troubles: dict[str, int] = {}  # errors in a row, by what met them
        self.beats = 0  # beats tried, whether Redis answered or not (a probe's sign of life)
        self._next_empty_check = 0.0
        self.beat = BeatDuty(self)
        #: Each duty and when it is next due (monotonic): the beat, and those added (a leader's, say).
        self.schedule: dict[Duty, float] = {self.beat: 0.0, **dict.fromkeys(duties, 0.0)}
        start_series(self.namespace)
        m = {name: metric.labels(namespace=self.namespace) for name, metric in SERIES.items()}
        self._m = m

    # state

    @property
    def done(self) -> bool:
        """No more claims: the worker stops, or (``until_empty``) the namespace was found empty."""
        return self.stopping or self.drained

    @property
    def in_hand(self) -> int:
        return len(self._hand)

    def report(self) -> RunReport:
        return RunReport(self.worker_id, self.processed, self.items, self.failed, self.retried, self.leases_lost,
                         self.handed_back, "empty" if self.drained and not self.stopping else "stopped")  # fmt: skip

    def due_sooner(self, duty: Duty, delay_s: float) -> None:
        """Run ``duty`` within ``delay_s`` (a failure's back-off ends then: the beat sends it back)."""
        at = time.monotonic() + max(0.0, delay_s)
        if at < self.schedule.get(duty, float("inf")):
            self.schedule[duty] = at
            self.flavour.poke()

    # a slot

    def slot(self) -> Steps[None]:
        """One slot of the window, until the worker stops (or finds the namespace empty)."""
        part: PartitionInfo | None = None
        idle = IDLE_FIRST_S
        while True:
            if part is None:
                if self.done:
                    return
                cooling = self.breaker.wait_s()
                if cooling > 0:
                    yield Call(self.flavour.pause, (cooling, False))
                    continue
                try:
                    part = yield from self.sdk._claim_and_start(self.worker_id)
                except TROUBLE as exc:
                    yield Call(self.flavour.pause, (self._troubled("claim", exc), False))
                    continue
                self._untroubled("claim")
                if part is None:
                    if self.until_empty and (yield from self._empty()):
                        self.drained = True
                        log.info("nothing pending or running: stopping", worker=self.worker_id)
                        self.flavour.poke()
                        return
                    yield Call(self.flavour.pause, (idle, False))
                    idle = min(idle * 2, self.settings.idle_s)
                    continue
                idle = IDLE_FIRST_S
            lease = self._hold(part)
            if lease is None:  # claimed as the worker stops: handed back at once, not started on
                yield from self._give_back([part.partition_id])
                part = None
                continue
            outcome = yield from self._work(lease)
            part = yield from self._finish(lease, outcome)

    def _hold(self, part: PartitionInfo) -> Lease | None:
        with self._lock:
            if self.stopping or self.closing:
                return None
            lease = self._hand[part.partition_id] = Lease(part, self.worker_id)
        return lease

    def _work(self, lease: Lease) -> Steps[Outcome]:
        started = time.perf_counter()
        try:
            result = yield Call(self.flavour.process, (lease.partition, lease))
            outcome = Outcome(items=_items(result, lease.partition))
        except LeaseLost:
            outcome = Outcome(lost=True)
        except Exception as exc:  # the user's failure: the partition fails with its first line
            outcome = Outcome(error=error_line(exc))
        self._m["process_seconds"].observe(time.perf_counter() - started)
        return outcome

    def _finish(self, lease: Lease, outcome: Outcome) -> Steps[PartitionInfo | None]:
        """Complete or fail the partition of ``lease``; the next one, claimed and started in the same
        call, or None (the worker stops, the breaker is open, nothing is pending, or the lease was lost)."""
        with self._lock:
            lease._finishing = True
            lost = lease.lost
        if lost or outcome.lost:
            self._let_go(lease)
            return None
        pid, first = lease.partition_id, True
        opens = outcome.error is not None and self.breaker.opens_on_failure()
        while True:
            claim = first and not self.done and not opens and not self.breaker.wait_s()
            try:
                if outcome.error is None:  # the SDK's `complete_and_claim`, less the check of a pid it gave us
                    done = yield from self.sdk._finish("complete", pid, self.worker_id, claim=claim)
                else:
                    done = yield from self.sdk._fail_and_claim(
                        pid, self.worker_id, outcome.error, retry=self.settings.retry, claim=claim
                    )
                break
            except (NotOwner, PartitionNotFound, InvalidTransition) as exc:  # taken over, or gone, meanwhile
                self._let_go(lease, lost=_why(exc))
                return None
            except CorruptMetadata as exc:
                trouble: Exception = exc
            except DecodeError as exc:
                log.error("cannot finish a partition: its record is corrupt", partition=pid, error=str(exc))
                self._let_go(lease)
                return None
            except TROUBLE as exc:
                trouble = exc
            if self.closing:  # handed back while Redis refused: its lease expires by itself
                self._let_go(lease)
                return None
            first = False  # the reply may be lost after it claimed: later tries claim nothing
            yield Call(self.flavour.pause, (self._troubled("finish", trouble), True))
        self._untroubled("finish")
        self._let_go(lease)
        self._count(done, outcome)
        if done.claim_error is not None:
            self._troubled("claim", done.claim_error)
        return done.next

    def _count(self, done: Finished, outcome: Outcome) -> None:
        m = self._m
        if done.outcome != "failed":
            with self._lock:
                self.processed += 1
                self.items += outcome.items
            m["processed"].inc()
            m["items"].inc(outcome.items)
            self.breaker.record(True)
            return
        retry_in = None if done.retry_at is None else round(max(0.0, done.retry_at - time.time()), 3)
        with self._lock:
            self.failed += 1
            self.retried += retry_in is not None
        m["failures"].inc()
        if retry_in is not None:
            m["retries"].inc()
            self.due_sooner(self.beat, retry_in)
        log.warning("partition failed", partition=done.partition_id, attempts=done.attempts,
                    retry_in_s=retry_in, error=outcome.error)  # fmt: skip
        if self.breaker.record(False):
            m["breaker_trips"].inc()
            log.warning(
                f"circuit breaker open: {self.breaker.in_a_row} failures in a row, no claims for "
                f"{self.settings.breaker_cooldown_s:g} s",
                worker=self.worker_id,
            )

    def _let_go(self, lease: Lease, *, lost: str | None = None) -> None:
        with self._lock:
            if self._hand.pop(lease.partition_id, None) is None:
                return
        if lost is not None:
            self._count_lost(lease, lost)

    def lose(self, lease: Lease, reason: str) -> None:
        """A lease found lost while `process` works on it: told to `process`, never completed here."""
        with self._lock:
            if lease.lost or lease._finishing or self._hand.get(lease.partition_id) is not lease:
                return
            lease._lose(reason)
        self._count_lost(lease, reason)
        self.flavour.lost(lease)

    def _count_lost(self, lease: Lease, reason: str) -> None:
        lease._lose(reason)
        with self._lock:
            self.leases_lost += 1
        self._m["leases_lost"].inc()
        log.warning("lease lost: the partition is not completed here", partition=lease.partition_id, reason=reason)

    def _empty(self) -> Steps[bool]:
        """Nothing pending, claimed, running or waiting for a retry in the namespace (asked at most
        every `EMPTY_CHECK_S` by a process)."""
        now = time.monotonic()
        if now < self._next_empty_check:
            return False
        self._next_empty_check = now + EMPTY_CHECK_S
        try:
            counts = yield from self.sdk._counts()
            retrying = yield one().zcard(self.sdk.keys.retries)
        except TROUBLE:
            return False
        return not (counts["pending"] or counts["claimed"] or counts["running"] or retrying)

    # the process's duties and its stop

    def beat_turn(self) -> Steps[float]:
        """Renew every lease in hand, refresh the presence entry, send back failures whose back-off is
        over; the seconds until the next beat."""
        self.beats += 1
        with self._lock:
            pids = [pid for pid, lease in self._hand.items() if not lease._finishing and not lease.lost]
        self._m["in_hand"].set(self.in_hand)
        try:
            now = yield from self.sdk._now()
            if self.started_at is None:
                self.started_at = now
            ttl = self.settings.presence_ttl_s
            entry = WorkerPresence(self.worker_id, socket.gethostname(), os.getpid(), self.settings.window,
                                   self.in_hand, self.processed, self.failed, self.started_at, now,
                                   now + ttl).entry()  # fmt: skip
            got = yield from self.sdk._beat(self.worker_id, pids, presence=entry, presence_ttl_s=ttl)
        except TROUBLE as exc:
            return min(self.settings.beat_s, self._troubled("beat", exc))
        self._untroubled("beat")
        for pid, why in got.lost.items():
            lease = self._hand.get(pid)
            if lease is not None:
                self.lose(lease, why)
        if got.retried:
            log.info("failed partitions back to pending, their back-off over", count=got.retried)
        delay = self.settings.beat_s
        if got.next_retry_at is not None:
            delay = min(delay, max(0.01, got.next_retry_at - now))
        return delay

    def hand_back(self) -> Steps[None]:
        """Give what is still in hand back to pending and leave the live workers (one call); those
        leases are lost from now on, whatever `process` does with them."""
        with self._lock:
            self.closing = True
            leases = [lease for lease in self._hand.values() if not lease._finishing]
            for lease in leases:
                lease._lose("handed back")
        self.flavour.poke()
        pids = [lease.partition_id for lease in leases]
        handed = yield from self._give_back(pids, leave=True)
        for lease in leases:
            self.flavour.lost(lease)
            self._let_go(lease)
        self._m["in_hand"].set(0)
        if handed:
            log.info("unfinished partitions handed back to pending", count=len(handed), partitions=handed[:20])

    def _give_back(self, pids: list[int], *, leave: bool = False) -> Steps[list[int]]:
        try:
            handed = yield from self.sdk._release(self.worker_id, pids, leave=leave)
        except TROUBLE as exc:
            log.warning("could not hand partitions back; their leases expire by themselves", error=str(exc))
            return []
        self.handed_back += len(handed)
        self._m["handed_back"].inc(len(handed))
        return handed

    # the process's life

    def begin(self) -> Steps[None]:
        """Before the slots start: the first beat (the presence entry, the server's clock), and the
        scripts loaded, so the window's slots do not all load them at once."""
        log.info("worker started", worker=self.worker_id, namespace=self.namespace, window=self.settings.window,
                 lease_s=self.settings.lease_s, beat_s=self.settings.beat_s)  # fmt: skip
        self.schedule[self.beat] = time.monotonic() + (yield from self.beat.turn())
        with contextlib.suppress(*TROUBLE):  # Redis not there yet: the slots ride it out
            yield from self.sdk._ready(self.worker_id)

    def supervise(self, stop: threading.Event, now: threading.Event) -> Steps[None]:
        """The main loop, beside the slots: the duties when due, the drain once ``stop`` is set, until
        the slots end, or the drain timeout (or ``now``: a second stop) passes."""
        deadline: float | None = None
        while True:
            at = time.monotonic()
            for duty, due in list(self.schedule.items()):
                if at >= due:
                    self.schedule[duty] = time.monotonic() + (yield from duty.turn())
            if not self.flavour.slots_alive():
                return
            if stop.is_set() and deadline is None:
                deadline = at + self.settings.drain_timeout_s
                self.stopping = True
                self.flavour.wake()
                log.info("draining", worker=self.worker_id, in_hand=self.in_hand,
                         deadline_s=self.settings.drain_timeout_s)  # fmt: skip
            if now.is_set() or (deadline is not None and at >= deadline):
                return
            if self.drained:
                self.flavour.wake()
            until = min([*self.schedule.values(), deadline or float("inf"), at + TICK_S])
            yield Call(self.flavour.tick, (max(0.0, until - time.monotonic()),))

    def end(self) -> Steps[RunReport]:
        """After the main loop: what is in hand handed back, the presence entry gone; what it did."""
        yield from self.hand_back()
        for duty in self.schedule:
            close = getattr(duty, "close", None)
            if close is not None:
                try:
                    yield from close()
                except TROUBLE as exc:
                    log.warning(f"{duty.name}: could not end it cleanly", error=str(exc))
        report = self.report()
        log.info("worker stopped", worker=self.worker_id, processed=report.processed, failed=report.failed,
                 lost=report.leases_lost, handed_back=report.handed_back, ended=report.ended)  # fmt: skip
        return report

    # errors that pass

    def _troubled(self, what: str, exc: BaseException) -> float:
        """An error ridden out: logged when a streak begins; the back-off before the next try."""
        count = self._troubles[what] = self._troubles.get(what, 0) + 1
        if count == 1:
            log.warning(f"{what} failed; trying again", error=str(exc), kind=type(exc).__name__)
        return float(min(BACKOFF_FIRST_S * 2 ** (count - 1), BACKOFF_MAX_S))

    def _untroubled(self, what: str) -> None:
        if self._troubles.pop(what, 0) > 1:
            log.info(f"{what} works again")


class BeatDuty:
    """The process's beat, as a duty."""

    name = "beat"

    def __init__(self, core: RuntimeCore) -> None:
        self.core = core

    def turn(self) -> Steps[float]:
        return (yield from self.core.beat_turn())


def error_line(exc: BaseException) -> str:
    """``Type: first line of the message``, control characters as spaces, at most `ERROR_LINE_CHARS`."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    line = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in line)
    return line if len(line) <= ERROR_LINE_CHARS else line[: ERROR_LINE_CHARS - 3] + "..."


def _items(result: Any, part: PartitionInfo) -> int:
    """The items `process` says it processed: its int, or the partition's ID count for None."""
    if result is None:
        return part.max_id - part.min_id + 1
    if isinstance(result, bool) or not isinstance(result, int) or result < 0:
        raise ValidationError(f"process returned {result!r}: a number of items (an int >= 0) or None")
    return result


def _why(exc: Exception) -> str:
    if isinstance(exc, NotOwner):
        return "not_owner"
    if isinstance(exc, PartitionNotFound):
        return "not_found"
    return "bad_state"

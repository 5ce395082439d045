"""The archiver daemon: reads the archive queue and writes the archive layer.

One loop, one consumer of the ``archivers`` group. At start it re-reads what its own
consumer name left unacknowledged; every round it first takes over entries that another
(dead) replica left unacknowledged and idle past ``claim_idle_ms``, then reads new entries. Each entry's
detail is written before or with its commit, never after (`archiver.daemon.pages`): in a batch
tier staged or sealed first; in the simple tier written at once, or carried inside the commit
when its page makes one due. The entry is acknowledged and deleted by its commit, in
the same script that sets its index bit and counts it. Keep ``claim_idle_ms`` well above the flush interval, or replicas
take over each other's buffered entries (harmless, but wasted work).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import redis
import structlog
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from archiver.config import Config
from archiver.daemon.backlog import BacklogModes
from archiver.daemon.pacing import MaintenancePacer
from archiver.daemon.pages import PageIntake
from archiver.daemon.probes import LoopProbe
from archiver.daemon.shutdown import GracefulShutdown
from archiver.engine import EngineUnreachable
from archiver.metrics import CONSUMERS_REMOVED, GROUP_RECREATED
from archiver.namespace import Namespace
from layers import (
    migrate_step,
)
from layers.control.liveness import STALE_AFTER_S, ArchiverHealth
from layers.errors import CorruptMetadata, SlotMoving, WrongKeyType
from layers.plumbing.key_types import find_wrong_type, typed_errors
from layers.plumbing.resharding import MOVING_ERRORS
from stats.index_check import IndexCheck

T = TypeVar("T")
log = structlog.get_logger("partarchive.archiver")
# Refusals that pass by themselves: Redis not up yet, restarting or loading (`BusyLoadingError` is
# a ConnectionError), at maxmemory, a replica not yet promoted, a slot on the move.
WAIT_AT_START = (
    EngineUnreachable,
    redis.ConnectionError,
    redis.TimeoutError,
    OutOfMemoryError,
    ReadOnlyError,
    SlotMoving,
    *MOVING_ERRORS,
)

BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
#: Longest wait between looks for entries left idle by another archiver (XAUTOCLAIM) while none are found.
TAKE_OVER_EVERY_S = 1.0


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ArchiverDaemon:
    def __init__(
        self,
        redis_client: redis.Redis,
        config: Config,
        consumer: str | None = None,
        *,
        stop: threading.Event | None = None,
        probe: LoopProbe | None = None,
    ) -> None:
        """``stop`` is shared when one loop runs several daemons (`archiver.daemon.multi`); ``probe``
        is one already served (``run --metrics-port`` serves it before Redis answers), whose event
        then stops the daemon."""
        self.namespace = ns = Namespace(redis_client, config)
        self.config = config = ns.config
        self.keys = ns.keys
        self.queue = ns.queue
        self.archive = ns.archive
        self.consumer = consumer or default_consumer_name()
        self._stop = stop or (probe.stop if probe is not None else threading.Event())
        self.probe = probe or LoopProbe(self._stop)  # what --metrics-port answers on /healthz and /readyz
        self._next_maintenance = 0.0
        self._next_take_over = 0.0  # XAUTOCLAIM: every round while it finds entries, else at most every second
        self._next_adopt = 0.0
        self._next_resync = 0.0
        self._adopter: Any = None
        if config.adopt_elk and config.elk_prefix is not None:
            from archiver.elk.migrate import ElkMigration

            self._adopter = ElkMigration(redis_client, config, config.elk_prefix)
        self.compactor = ns.compactor()
        self.lock = ns.maintenance_lock(self.consumer)
        self.has_lock = False
        self.liveness = ns.liveness
        self.backlog = BacklogModes(ns)
        self.pages = PageIntake(ns, self.consumer, self.backlog, after_read=lambda: self.fault_point("after_read"))
        self.commit_buffer = self.pages.pipeline.commit_buffer
        self.started = time.time()
        self._next_beat = 0.0
        self._beat_archived = 0
        self._beat_at = time.monotonic()
        self._failures = 0  # rounds failed in a row (backoff)
        self._refused_since: float | None = None  # when Redis began refusing writes (`_writes_refused`)
        self._rounds_refused = 0
        self.index_check = IndexCheck(redis_client, self.keys, config.policy)  # after the group was lost
        self.pacer = MaintenancePacer(
            config.maintenance_slice_s,
            config.policy.migrate_chunk // config.policy.batch_size,
            after_step=lambda: self.fault_point("after_step"),
            recheck_s=config.maintenance_interval_s,
        )

    def stop(self) -> None:
        """Ask the loop to finish the batch in hand and return."""
        self._stop.set()

    def fault_point(self, where: str) -> None:
        """A seam for the crash tests, called after a page is read (``after_read``) and after each
        maintenance step (``after_step``); `tests.faults` makes it pause there. Does nothing here."""

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, install_signals: bool = True) -> None:
        """Run until `stop()` or SIGTERM/SIGINT; a second signal or the drain deadline exits hard.

        Stored data that contradicts the configuration or is not partarchive's (a batch size or
        range width other than the stored one, `CorruptMetadata`, `WrongKeyType`) is refused at
        start, with that error. Met later, it fails rounds like any error (logged, naming the
        key); entries that keep failing are dead-lettered after ``max_deliveries``.
        """
        with GracefulShutdown(self._stop, self.config.drain_timeout_s).installed(install_signals):
            if not self.when_reachable(self.check_settings) or not self.when_reachable(self.start):
                return  # stopped while Redis could not be reached
            self.probe.started = True
            try:
                while not self._stop.is_set():
                    self.round_with_retry()
                    self.probe.turned()
            finally:
                self.finish()

    def when_reachable(self, step: Callable[[], object]) -> bool:
        """Run ``step`` `until_ready`; False if stopped first."""

        def ran() -> bool:
            self.probe.turned()
            step()
            return True

        return until_ready(ran, self._stop) is not None

    def start(self) -> None:
        """Join the group and handle what this consumer name left unacknowledged (settings checked)."""
        log.info("archiver started", consumer=self.consumer, namespace=self.config.namespace)
        if self.config.claim_idle_ms < self.config.stats_flush_interval_s * 1000:
            log.warning(
                "claim_idle_ms is below the statistics flush interval: replicas will take over "
                "each other's buffered entries",
                claim_idle_ms=self.config.claim_idle_ms,
            )
        self.queue.ensure_group()
        self.archive.set_retention(self.config.retention_s, only_if_unset=True)
        self.pages.archive_entries(self.queue.read_own_unacknowledged(self.consumer, self.config.read_count))

    def finish(self) -> None:
        """Flush what is buffered, hand the maintenance lock back and leave the live set."""
        try:
            self.flush()
        finally:
            self.pages.close()
            self.release_lock()
            self.leave()
            log.info("archiver stopped", consumer=self.consumer, archived=self.archived)

    def check_settings(self) -> None:
        """Refuse to start when the configuration contradicts what the namespace stores (batch
        size, statistics range width, tampered metadata): a `PartArchiveError`, one line in the CLI."""
        wrong = find_wrong_type(self.archive.redis, self.keys)
        if wrong is not None:
            raise wrong
        self.namespace.remember_binding()
        self.archive.check_meta()
        self.archive.check_cold()
        self.archive.check_batch_size()
        self.commit_buffer.committer.check_statistics()

    def flush(self) -> None:
        """Commit what is buffered (also done on stop).

        If Redis is gone the entries stay unacknowledged and are redelivered to another archiver.
        """
        try:
            self.pages.flush()
        except (redis.RedisError, CorruptMetadata, WrongKeyType) as exc:
            log.warning("final flush failed; entries stay unacknowledged for another archiver", error=str(exc))

    @property
    def archived(self) -> int:
        return self.pages.archived

    @property
    def dead_lettered(self) -> int:
        return self.pages.dead_lettered

    def release_lock(self) -> None:
        if self.has_lock:
            try:
                self.lock.release()
            except redis.RedisError as exc:
                log.warning("could not release the maintenance lock; it expires by itself", error=str(exc))
            self.has_lock = False

    def leave(self) -> None:
        try:
            self.liveness.leave(self.consumer)
        except redis.RedisError as exc:
            log.warning("could not remove the health entry; it goes stale by itself", error=str(exc))

    def beat(self) -> None:
        """Refresh this archiver's health entry and delete consumers of archivers that died,
        every ``health_interval_s``."""
        now = time.monotonic()
        if now < self._next_beat:
            return
        self._next_beat = now + self.config.health_interval_s
        rate = (self.archived - self._beat_archived) / max(now - self._beat_at, 1e-3)
        self._beat_archived, self._beat_at = self.archived, now
        self.liveness.beat(
            ArchiverHealth(
                self.consumer,
                os.getpid(),
                socket.gethostname(),
                self.started,
                0.0,
                round(rate, 1),
                self.pages.uncommitted,
                self.archived,
                stale_after_s=max(STALE_AFTER_S, 3 * self.config.health_interval_s),
            )
        )
        removed = self.liveness.remove_dead_consumers(self.config.claim_idle_ms)
        if removed:
            CONSUMERS_REMOVED.labels(namespace=self.keys.namespace).inc(len(removed))
            log.info("removed consumers of dead archivers", consumers=removed)
        self.liveness.forget_dead()

    def round_with_retry(self, block_ms: int | None = None) -> int:
        """One round (see `run_once`); an error is logged and the round retried after a pause,
        never fatal. Returns what the round handled (0 after an error).

        Entries of a failed round stay unacknowledged and are read again (its own at restart,
        or XAUTOCLAIM after ``claim_idle_ms``), so nothing is lost by carrying on; entries whose
        commit failed (a slot move outlasting `layers.plumbing.resharding.BUDGET_S`, Redis unreachable) stay
        buffered and are committed by a later round; claimed back meanwhile, they are neither
        archived twice nor dead-lettered (`PageIntake.archive_entries`).
        """
        try:
            handled = self.run_once(block_ms)
        except (redis.ConnectionError, redis.TimeoutError, SlotMoving) as exc:
            self._failures += 1
            delay = backoff_s(self._failures)
            what = "a slot move outlasted the retry budget" if isinstance(exc, SlotMoving) else "redis unreachable"
            log.warning(f"{what}, retrying", error=str(exc), attempt=self._failures, retry_in_s=delay)
            self._stop.wait(delay)
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc):
                self.recover_group()
            elif is_write_refusal(exc):
                self._writes_refused(exc)
            else:
                self._round_failed()
        except Exception:
            self._round_failed()
        else:
            self._failures = 0
            if self._refused_since is not None:
                refused_s = round(time.monotonic() - self._refused_since, 1)
                log.info("redis accepts writes again", refused_for_s=refused_s, rounds_refused=self._rounds_refused)
                self._refused_since = None
            return handled
        return 0

    def _round_failed(self) -> None:
        self._failures += 1
        log.exception("archiver round failed, retrying", attempt=self._failures)
        self._stop.wait(backoff_s(self._failures))

    def _writes_refused(self, exc: redis.ResponseError) -> None:
        """Redis refuses writes for a while (too few replicas in step, maxmemory, a replica not yet
        promoted): one warning with the reason when it starts, one line when it ends, no trace per
        round; nothing is lost meanwhile (the entries stay unacknowledged)."""
        self._failures += 1
        delay = backoff_s(self._failures)
        if self._refused_since is None:
            self._refused_since, self._rounds_refused = time.monotonic(), 0
            reason = str(exc).splitlines()[0].split(" script:")[0]
            log.warning("redis refuses writes; archiving waits until it accepts them", reason=reason)
        self._rounds_refused += 1
        self._stop.wait(delay)

    def recover_group(self) -> None:
        """The consumer group is gone (Redis restarted without its data, or the queue key was
        deleted): create it again, count it, and check the archive against the index once the
        maintenance lock is taken (entries of the old group that were not acknowledged are lost
        with the stream; what they completed is still marked in the `done` bitmap). The check is a
        paced maintenance step (`stats.index_check`), logged when it is done."""
        self.queue.ensure_group()
        GROUP_RECREATED.labels(namespace=self.keys.namespace).inc()
        self.index_check.request()
        log.warning("the archive queue's consumer group was gone; created it again", queue=self.keys.queue)

    def run_once(self, block_ms: int | None = None) -> int:
        """Take over idle entries, then read new ones (waiting up to ``block_ms``, by default
        the configured wait); archive them; then due maintenance.

        Returns the queue entries handled plus the maintenance items done (0 = nothing to do).
        """
        with typed_errors(self.archive.redis, self.keys):
            return self._round(self.config.block_ms if block_ms is None else block_ms)

    def _round(self, block_ms: int) -> int:
        cfg = self.config
        self.beat()
        handled = 0
        started = time.monotonic()
        if started >= self._next_take_over:
            entries = self.queue.take_over(self.consumer, cfg.claim_idle_ms, cfg.read_count)
            if entries:
                log.info("took over idle entries", count=len(entries))
                handled = self.pages.archive_entries(entries)
                self.pages.flush_if_due()
            elif self.queue.claim_scan_done:  # none idle long enough: an entry needs claim_idle_ms to become so
                self._next_take_over = started + min(TAKE_OVER_EVERY_S, cfg.claim_idle_ms / 10_000)
        if not handled:
            handled = self.pages.read(block_ms)
            started += self.pages.read_wait_s  # a wait for new entries is idle time, not work
        busy_s = time.monotonic() - started if handled else 0.0
        return handled + self.maintain(busy_s=busy_s)

    def maintain(self, *, force: bool = False, busy_s: float = 0.0) -> int:
        """Seal idle batches and follow the backlog's mode (every ``maintenance_interval_s``); and,
        with the maintenance lock taken, advance tier moves, expiry sweeps and adoption (commits are
        the read path's: `PageIntake.read`).

        Maintenance yields to the live queue (see `MaintenancePacer`).
        """
        now = time.monotonic()
        done = 0
        if force or now >= self._next_maintenance:
            self._next_maintenance = now + self.config.maintenance_interval_s
            done += self.archive.sealing.seal_idle()
            taken = self.lock.acquire()
            if taken != self.has_lock:
                log.info("maintenance lock " + ("taken" if taken else "lost"), holder=self.lock.holder_now())
            self.has_lock = taken
            done += self.backlog.tick(taken)
        if not self.has_lock:
            return done
        steps = self.pacer.run(busy_s, self._maintenance_step)
        if steps:
            log.debug("maintenance", items=steps, tier=self.archive.tier().value)
        return done + steps + self._adopt(now) + self._resync(now)

    def _maintenance_step(self, batches: int) -> int:
        """Tier moves and expiry (their seals deferred while compression is skipped), else statistics
        compaction, else the index check: ``batches``' worth."""
        ranges = batches * self.config.batch_size // self.config.stats_range_width
        defer_seals = self.backlog.skipping
        return (
            migrate_step(self.archive, max_batches=batches, defer_seals=defer_seals)
            or self.compactor.step()
            or self.index_check.step(ranges)
        )

    def _adopt(self, now: float) -> int:
        """Import what elk_coordinator's Go workers completed (``adopt_elk``), every ``adopt_interval_s``."""
        if self._adopter is None or now < self._next_adopt or self.backlog.paused:
            return 0
        self._next_adopt = now + self.config.adopt_interval_s
        adopted = int(self._adopter.adopt_step())
        if adopted:
            log.info("adopted elk_coordinator completions", count=adopted)
        return adopted


    def _resync(self, now: float) -> int:
        """In a namespace bound to a Go deployment, rebuild the active indexes from Go's hash every
        ``adopt_interval_s`` (Go's workers change it without them), so what `status` and ``/metrics``
        count from the indexes, in one round trip, follows Go's writes too."""
        if self.keys.elk_prefix is None or now < self._next_resync:
            return 0
        self._next_resync = now + self.config.adopt_interval_s
        self.namespace.active.sync()
        return 0


def until_ready(step: Callable[[], T], stop: threading.Event) -> T | None:
    """``step()``, waiting with backoff while Redis cannot be reached or refuses for a while (a
    restart, a failover, a slot move, ``maxmemory`` with noeviction): a daemon started then waits,
    as one already running does. None if ``stop`` is set first; other errors are raised."""
    failures = 0
    while not stop.is_set():
        try:
            return step()
        except WAIT_AT_START as exc:
            failures += 1
            delay = backoff_s(failures)
            log.warning("redis not ready at start, retrying", error=str(exc), retry_in_s=delay)
            stop.wait(delay)
    return None


def is_write_refusal(exc: redis.ResponseError) -> bool:
    """Whether Redis refused a write for a reason that passes by itself: fewer replicas in step than
    ``min-replicas-to-write`` (NOREPLICAS), maxmemory, or a replica not yet promoted."""
    return isinstance(exc, (OutOfMemoryError, ReadOnlyError)) or str(exc).startswith("NOREPLICAS")


def backoff_s(failures: int) -> float:
    """Exponential backoff with jitter: 0.5 s, 1 s, 2 s ... up to 30 s, each scaled by 0.5..1."""
    delay: float = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, failures - 1)) * random.uniform(0.5, 1.0)
    return round(delay, 3)


def run_until(daemon: ArchiverDaemon, done: Callable[[], bool], poll_s: float = 0.05) -> None:
    """Run the daemon's rounds in this thread until ``done()`` (used by the demo)."""
    daemon.queue.ensure_group()
    while not done() and not daemon.stopping:
        if daemon.run_once() == 0:
            time.sleep(poll_s)
    daemon.flush()
    daemon.release_lock()


def drain(daemon: ArchiverDaemon) -> int:
    """Handle everything in the queue now, then flush: for tests, benchmarks and the demo."""
    daemon.queue.ensure_group()
    handled = 0
    while n := daemon.run_once():
        handled += n
    daemon.flush()
    daemon.release_lock()
    return handled

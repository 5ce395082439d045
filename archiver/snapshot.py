"""One namespace's state, read once: the single place that reads it for every face.

`partarchive status`, the HTTP ``/stats``, ``/metrics`` (`archiver.metrics.LayerStateCollector`)
and the dashboard (`archiver.web.overview`) each read one `NamespaceSnapshot` per request or
scrape, in one pipelined round trip (two in a namespace bound to elk_coordinator's keys, whose
active counts are recounted first), and show its values under the same names.

Two tiers are shown, each under its own name: ``stored_tier``, the tier the archive meta holds
(where the records are stored now), and ``target_tier``, the tier rule's for the archived total,
never below the stored one (`TierPolicy.tier_after`: where the daemon moves them). They differ
only while a move is due, e.g. after the thresholds were lowered.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from codec import PartArchiveError
from codec.redact import redact_text
from layers import KeySchema, Tier, TierPolicy
from layers.active.planning import LEADER_READS, LeaderView, leader_reads, leader_view_from
from layers.active.presence import WorkerPresence, presence_from
from layers.active.reads import COUNTED, add_counts
from layers.archive.cold import COLD_FIELDS
from layers.archive.queue import QueueState, queue_state_from
from layers.archive.tiers import stored_tier
from layers.archive.transitions import MOVE_FIELDS, TransitionState, transition_from
from layers.control.liveness import ArchiverHealth, archivers_from, server_time
from layers.control.pressure import PressureState, pressure_state
from layers.control.switch import ArchivalState, parse_state
from layers.keys import ARCHIVER_GROUP
from layers.plumbing.key_types import is_wrong_type, wrong_type_error
from layers.plumbing.replies import as_text
from layers.plumbing.roundtrip import RoundTrip
from layers.plumbing.settings import stored_int
from stats.progress import JobProgress, job_progress, parse_samples
from stats.reader import degraded_view, rollup_reads, rollup_view

#: What the archive meta hash is read for (`HMGET`: the hash may hold more).
META_FIELDS = ("tier", "sealed_json_bytes", "sealed_blob_bytes", *MOVE_FIELDS, *COLD_FIELDS)


@dataclass(frozen=True, slots=True)
class ArchiveState:
    archived_total: int
    stored_tier: str  # as the archive meta holds it: where the records are stored now
    target_tier: str  # the tier rule's for the total, never below the stored one: where the daemon moves them
    simple_tier: int  # records in the simple hash
    open_batches: int
    compression_ratio: float  # JSON bytes of every record sealed so far over their blobs' bytes (0: none yet)
    sealed_blob_bytes: int
    sealed_json_bytes: int
    cold: ColdState

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ColdState:
    """The cold tier (`layers.archive.cold`): where its store is (without a password), its files,
    their bytes and the partitions they hold, when one was last written, and what last failed."""

    store: str | None
    files: int
    bytes: int
    partitions: int
    written_at: int
    error: str | None


@dataclass(frozen=True, slots=True)
class NamespaceSnapshot:
    namespace: str
    read_at: float  # unix time of the read (this host's clock, as the progress samples')
    by_status: dict[str, int]
    active_size: int
    unreadable: int  # records set aside out of the claim indexes (`KeySchema.unreadable`)
    queue: QueueState
    archive: ArchiveState
    transition: TransitionState
    pressure: PressureState
    archival: ArchivalState
    progress: JobProgress
    archivers: list[ArchiverHealth]  # those alive
    workers: list[WorkerPresence]  # worker runtime processes alive (`layers.active.presence`)
    retries_waiting: int  # failed partitions a retry policy sends back to pending after their back-off
    leader: LeaderView  # who leads, the plan and what the leader's check found (`layers.active.planning`)
    stats_check_ok: int  # 1 ok, 0 failed, -1 never run
    stats_check_at: int
    complete_latency: dict[str, Any]  # `KeySchema.complete_latency` as read
    rollups: dict[str, Any] | None  # `stats.reader.rollup_view` (or its degraded form), if asked for

    def queue_dict(self) -> dict[str, Any]:
        q = self.queue
        return {
            "backlog": q.length,
            "pending": q.pending,
            "oldest_pending_age_s": round(q.oldest_pending_age_s, 3),
            "lag": q.lag,
            "consumers": q.consumers,
            "dead_letters": q.dead_letters,
        }

    def status_dict(self) -> dict[str, Any]:
        """The namespace's part of ``partarchive status --json`` and of the dashboard's data."""
        return {
            "namespace": self.namespace,
            "active": {"size": self.active_size, "by_status": self.by_status, "unreadable": self.unreadable},
            "progress": self.progress.to_dict(),
            "archive": self.archive.to_dict(),
            "transition": self.transition.to_dict(),
            "queue": self.queue_dict(),
            "pressure": self.pressure.to_dict(),
            "archival": self.archival.to_dict(),
            "archivers_alive": len(self.archivers),
            "workers": self.workers_dict(),
            "leader": self.leader.to_dict(),
        }

    def workers_dict(self) -> dict[str, Any]:
        """The worker runtime's side: processes alive, the partitions they hold, retries waiting."""
        return {
            "alive": len(self.workers),
            "in_hand": sum(w.in_hand for w in self.workers),
            "retries_waiting": self.retries_waiting,
        }

    def stats_dict(self) -> dict[str, Any]:
        """The body of ``/stats`` (read with ``rollups``): the statistics view, with the snapshot's
        archive and progress."""
        if self.rollups is None:
            raise ValueError("the snapshot was read without the rollups")
        return self.rollups | {
            "archive": self.archive.to_dict(),
            "progress": self.progress.to_dict(),
            "workers": self.workers_dict(),
        }


class SnapshotReader:
    """Reads `NamespaceSnapshot`s of one namespace, in one round trip whatever its size: the active
    partitions are counted by their indexes (in a namespace bound to a Go deployment, as the last
    rebuild from Go's hash left them: every claim's at most once a second, the daemon's maintenance
    every `Config.adopt_interval_s`)."""

    def __init__(self, client: redis.Redis, keys: KeySchema, policy: TierPolicy) -> None:
        self.redis = client
        self.keys = keys
        self.policy = policy

    def read(self, *, rollups: bool = False) -> NamespaceSnapshot:
        """The snapshot; ``rollups`` adds the completed statistics (``/stats``) to the same round trip.
        Raises `PartArchiveError` subclasses for data partarchive did not write."""
        k = self.keys
        clustered = isinstance(self.redis, redis.RedisCluster)  # whose pipelines refuse TIME: asked apart
        trip = RoundTrip.on(self.redis)
        counts, pipe = add_counts(trip, k), trip.commands
        pipe.hlen(k.active)
        pipe.zcard(k.unreadable)
        pipe.xlen(k.queue)
        xpending = len(pipe)
        pipe.xpending(k.queue, ARCHIVER_GROUP)
        pipe.xlen(k.dead_letter)
        pipe.hmget(k.archive_meta, list(META_FIELDS))
        pipe.hlen(k.completed)
        pipe.zcard(k.open_batches)
        pipe.zrange(k.expiry, 0, 0, withscores=True)
        pipe.hmget(k.stats_meta, ["last_check_ok", "last_check_at"])
        pipe.hgetall(k.complete_latency)
        pipe.hgetall(k.pressure)
        pipe.zcard(k.unsealed)
        pipe.get(k.archival_paused)
        pipe.zcard(k.archival_held)
        pipe.get(k.archival_released)
        pipe.hgetall(k.progress)
        pipe.hgetall(k.archivers)
        pipe.hgetall(k.presence)
        pipe.zcard(k.retries)
        pipe.hlen(k.cold_files)
        leader_reads(pipe, k)
        if not clustered:
            pipe.time()
        mine = len(pipe)
        if rollups:
            rollup_reads(pipe, k)
        replies = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies[:mine]):
            if is_wrong_type(reply):
                raise wrong_type_error(self.redis, k)
            if isinstance(reply, Exception) and i != xpending:  # an error there: no group yet
                raise reply
        trip.hand(replies)
        by_status = counts.value
        server_now = server_time(self.redis) if clustered else _unix(replies[mine - 1])
        return self._parse(by_status, server_now, replies[len(COUNTED) : mine], replies[mine:] if rollups else None)

    def _parse(
        self, by_status: dict[str, int], server_now: float, replies: list[Any], rolled: list[Any] | None
    ) -> NamespaceSnapshot:
        k = self.keys
        size, unreadable, length, pending, dead, raw_meta, simple, open_batches, oldest, check, latency, *rest = replies
        pressure, unsealed, paused, held, released, samples, health, presence, retrying, cold_files = rest[:10]
        leader = leader_view_from(k, rest[10 : 10 + LEADER_READS])
        now = time.time()
        meta = dict(zip(META_FIELDS, raw_meta, strict=True))
        total = stored_int(k.archive_meta, "total", meta["total"], default=0)
        stored = stored_tier(k.archive_meta, meta["tier"])
        target = self.policy.tier_after(stored, total)
        archive = _archive_state(k, meta, total, stored, target, int(simple), int(open_batches), int(cold_files))
        queue = queue_state_from(int(length), pending, int(dead))
        archival = parse_state(paused, held, released)
        view = None
        if rolled is not None:
            try:
                view = rollup_view(by_status, *rolled)
            except (redis.RedisError, PartArchiveError) as exc:
                view = degraded_view(by_status, exc)
        return NamespaceSnapshot(
            namespace=k.namespace,
            read_at=now,
            by_status=by_status,
            active_size=int(size),
            unreadable=int(unreadable),
            queue=queue,
            archive=archive,
            transition=transition_from(k, self.policy, meta, target, int(simple), oldest, total, now),
            pressure=pressure_state(pressure, simple, unsealed, target),
            archival=archival,
            progress=job_progress(by_status, total, queue.length, archival.held, parse_samples(samples), now),
            archivers=archivers_from(health, server_now),
            workers=presence_from(presence, server_now),
            retries_waiting=int(retrying),
            leader=leader,
            stats_check_ok=stored_int(k.stats_meta, "last_check_ok", check[0], default=-1, minimum=-1),
            stats_check_at=stored_int(k.stats_meta, "last_check_at", check[1], default=0),
            complete_latency={as_text(a): b for a, b in latency.items()},
            rollups=view,
        )


def _unix(reply: Any) -> float:
    seconds, micros = reply
    return int(seconds) + int(micros) / 1e6


def _archive_state(
    k: KeySchema,
    meta: dict[str, Any],
    total: int,
    stored: Tier,
    target: Tier,
    simple: int,
    open_batches: int,
    cold_files: int,
) -> ArchiveState:
    json_bytes = stored_int(k.archive_meta, "sealed_json_bytes", meta["sealed_json_bytes"], default=0)
    blob_bytes = stored_int(k.archive_meta, "sealed_blob_bytes", meta["sealed_blob_bytes"], default=0)
    return ArchiveState(
        archived_total=total,
        stored_tier=stored.value,
        target_tier=target.value,
        simple_tier=simple,
        open_batches=open_batches,
        compression_ratio=round(json_bytes / blob_bytes, 2) if blob_bytes else 0.0,
        sealed_blob_bytes=blob_bytes,
        sealed_json_bytes=json_bytes,
        cold=ColdState(
            store=None if meta["cold_store"] is None else as_text(meta["cold_store"]),
            files=cold_files,
            bytes=stored_int(k.archive_meta, "cold_bytes", meta["cold_bytes"], default=0),
            partitions=stored_int(k.archive_meta, "cold_partitions", meta["cold_partitions"], default=0),
            written_at=stored_int(k.archive_meta, "cold_written_at", meta["cold_written_at"], default=0),
            error=None if meta["cold_error"] is None else redact_text(as_text(meta["cold_error"])),
        ),
    )

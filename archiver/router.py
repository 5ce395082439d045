"""The query router: answers for any partition from whichever layer holds it.

Chain: active hash -> index bitmap -> simple hash -> staging -> sealed batch -> statistics
-> not found. Everything but the statistics fallback is read in one round trip (one script,
`lookup.lua`, that also cuts the batch's slot out of its shelf; a pipeline on Redis Cluster); a batch is
found by ``pid // batch_size``, never by a scan. A blob that fails to decode is counted and
the router falls back; it never raises out of `get`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis

from archiver.metrics import DECODES, ROUTER_ANSWERS, ROUTER_SECONDS
from codec import ArchivedPartition, DecodeError, PartitionInfo
from codec.elk import ElkRecord, decode_active, parse_archived
from codec.shelf import SHELF_SLOTS, unshelved
from layers import ArchiveLayer, KeySchema, TierPolicy
from layers.active import check_partition_id
from layers.meta import typed_errors
from layers.replies import as_text
from layers.scripts import Scripts
from layers.shelves import StoredBatch
from stats import StatsReader


class Source(enum.StrEnum):
    ACTIVE = "active"
    QUEUE = "queue"
    SIMPLE = "archive:simple"
    STAGING = "archive:staging"
    BATCH = "archive:batch"
    STATISTICS = "statistics"
    EXPIRED = "expired"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Answer:
    partition_id: int
    source: Source
    partition: PartitionInfo | ArchivedPartition | ElkRecord | None = None
    degraded: bool = False
    detail: str = ""
    summary: dict[str, Any] | None = None

    @property
    def found(self) -> bool:
        return self.source is not Source.NONE

    @property
    def status(self) -> str:
        if isinstance(self.partition, PartitionInfo):
            return self.partition.status.value
        if isinstance(self.partition, ElkRecord):
            return self.partition.status
        return "completed" if self.found else "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition_id": self.partition_id,
            "found": self.found,
            "status": self.status,
            "source": self.source.value,
            "degraded": self.degraded,
            "detail": self.detail,
            "partition": None if self.partition is None else self.partition.to_dict(),
            "summary": self.summary,
        }


class _Reads(NamedTuple):
    """What `lookup.lua` (or the cluster pipeline) read for one partition."""

    active: bytes | None
    indexed: int
    simple: bytes | None
    staged: bytes | None
    done: int
    newest: Any
    retention: bytes | None
    generation: bytes | None
    stored: StoredBatch
    batch_size: int


#: Looks up the statistics layer's summary for a partition (its ID range), or None.
SummaryLookup = Callable[[int], dict[str, Any] | None]


class QueryRouter:
    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        policy: TierPolicy | None = None,
        summary_lookup: SummaryLookup | None = None,
        archive: ArchiveLayer | None = None,
    ) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(namespace, cluster, client=redis_client)
        ns = self.keys.namespace
        self._answers = {source: ROUTER_ANSWERS.labels(namespace=ns, source=source.value) for source in Source}
        self._seconds = ROUTER_SECONDS.labels(namespace=ns)
        self._decoded = DECODES.labels(namespace=ns, result="success")
        self._undecodable = DECODES.labels(namespace=ns, result="failure")
        self.archive = archive or ArchiveLayer(redis_client, self.keys, policy)
        if summary_lookup is None:
            summary_lookup = StatsReader(redis_client, self.keys).range_summary
        self.summary_lookup = summary_lookup
        self.decode_failures = 0
        self.decode_successes = 0
        self._scripted = not isinstance(redis_client, redis.RedisCluster)
        self._scripts = Scripts.of(redis_client)

    def get(self, partition_id: int) -> Answer:
        """Where partition ``partition_id`` is; raises ValidationError (bad id), WrongKeyType (a key
        of the namespace holds another type) or a Redis error."""
        pid = check_partition_id(partition_id)
        with self._seconds.time(), typed_errors(self.redis, self.keys):
            answer = self._get(pid)
        self._answers[answer.source].inc()
        return answer

    def _get(self, pid: int) -> Answer:
        size = self.archive.known_batch_size  # as the batches were written, whatever is configured
        reads = self._read(pid, size)
        if reads.batch_size != size:  # first sight of the stored size, or none stored yet
            reads = self._read(pid, reads.batch_size)
        active, indexed, simple, staged, done, newest, retention, generation, stored, _ = reads
        newest = None if newest is None else float(newest)
        if stored.blob is not None and not self.archive.workers.is_current(generation):
            self.archive.workers.reload()  # the registry was lost and built again since it was read
        if active is not None:
            return self._record(pid, Source.ACTIVE, active, decode_active)
        for source, raw in ((Source.SIMPLE, simple), (Source.STAGING, staged)):
            if raw is not None:
                return self._record(pid, source, raw, parse_archived)
        problem, corrupt = "archived, but its detail has expired", bool(stored.damaged)
        if stored.damaged:
            problem = stored.damaged
        blobs = stored.blobs
        if blobs and newest is not None and self._expired(newest, retention):
            blobs = []  # past its retention: the sweep has not deleted it yet, reads already do not see it
        for blob in blobs:
            try:
                part = self.archive.find_in_batch(blob, pid)
                self.decode_successes += 1
                self._decoded.inc()
            except DecodeError as exc:
                self.decode_failures += 1
                self._undecodable.inc()
                problem, corrupt = f"archived batch {stored.batch_no} cannot be decoded: {exc}", True
                continue
            if part is not None:
                return Answer(pid, Source.BATCH, part)
        if indexed or corrupt:
            return self._fallback(pid, problem)
        if done:
            return Answer(pid, Source.QUEUE, None, True, "completed, waiting in the archive queue")
        return Answer(pid, Source.NONE, detail="no such partition")

    def _read(self, pid: int, batch_size: int) -> _Reads:
        """Everything about ``pid`` in one round trip, its batch found by ``batch_size``; with the
        batch size stored in the namespace (the one to use if it differs)."""
        k = self.keys
        batch_no = pid // batch_size
        shelf_no, slot_no = divmod(batch_no, SHELF_SLOTS)
        if self._scripted:
            keys = [k.active, k.index, k.completed, k.staging(batch_no), k.done, k.expiry, k.archive_meta]
            keys += [k.workers, k.shelf(shelf_no), k.batch(batch_no)]
            replies = self._scripts("lookup", keys, [pid, batch_no, slot_no])
            slot, legacy, damaged, stored_size = replies[8:]
            why = f"shelf {shelf_no} is corrupt: {as_text(damaged)}" if damaged else ""
            stored = StoredBatch(batch_no, unshelved(slot), legacy, why)
        else:  # Redis Cluster: the keys span slots, so no script; the same reads in one pipeline
            pipe = self.redis.pipeline(transaction=False)
            pipe.hget(k.active, str(pid))
            pipe.getbit(k.index, pid)
            pipe.hget(k.completed, str(pid))
            pipe.hget(k.staging(batch_no), str(pid))
            pipe.getbit(k.done, pid)
            pipe.zscore(k.expiry, str(batch_no))
            pipe.hget(k.archive_meta, "retention_s")
            pipe.hget(k.workers, "")
            pipe.hget(k.archive_meta, "batch_size")
            parse = self.archive.shelves.add_reads(pipe, [batch_no], repair=False)
            replies = pipe.execute()
            stored_size = replies[8]
            stored = parse(replies[9:])[batch_no]
        active, indexed, simple, staged, done, newest, retention, generation = replies[:8]
        size = self.archive.batch_size_read(stored_size)
        return _Reads(active, indexed, simple, staged, done, newest, retention, generation, stored, size)

    def _expired(self, newest: float, retention: bytes | None) -> bool:
        try:
            keep = self.archive.policy.retention_s if retention is None else int(retention)
        except ValueError:
            return False  # a tampered policy never hides data; `status` reports it
        return newest + keep <= time.time()

    def _record(self, pid: int, source: Source, raw: bytes, parse: Callable[[bytes], Any]) -> Answer:
        try:
            return Answer(pid, source, parse(raw))
        except DecodeError as exc:
            self.decode_failures += 1
            self._undecodable.inc()
            return self._fallback(pid, f"{source.value} record is corrupt: {exc}")

    def _fallback(self, pid: int, problem: str) -> Answer:
        summary = None
        if self.summary_lookup is not None:
            try:
                summary = self.summary_lookup(pid)
            except (redis.RedisError, DecodeError) as exc:
                problem += f"; statistics unavailable: {exc}"
        if summary is not None:
            return Answer(pid, Source.STATISTICS, None, True, problem, summary)
        return Answer(pid, Source.EXPIRED, None, True, problem)

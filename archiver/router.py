"""The query router: answers for any partition from whichever layer holds it.

Order: active hash -> simple hash -> staging -> sealed batch (its shelf slot, then a batch key of
an older version; none once past its retention, unless the namespace keeps a cold store, where the
batch stays readable until it has gone there) -> the cold store, when the batch's cold map entry
names a file (`layers.archive.cold`; one row group read) -> if the index bit is set, or the detail
is damaged or its cold file cannot be read: statistics (else "expired") -> if the done bit is set:
the archive queue -> not found.
Everything but the statistics fallback is read in one round trip (one script,
`lookup.lua`, that also cuts the batch's slot out of its shelf; a pipeline on Redis Cluster); a batch is
found by ``pid // batch_size``, never by a scan. A blob that fails to decode is counted and
the router falls back; it never raises out of `get`.

The lookup is written once, as steps (`layers.plumbing.steps`, `RouterCore`): `QueryRouter` runs it on a
blocking client, `AsyncQueryRouter` awaits it on a `redis.asyncio` one (a ``redis.asyncio.Redis``, a
Sentinel's ``master_for``, or ``redis.asyncio.RedisCluster``), with the same answers, chain,
metrics and errors, and the statistics fallback read on the same client.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis

from archiver.metrics import DECODES, ROUTER_ANSWERS, ROUTER_SECONDS
from codec import ArchivedPartition, DecodeError, PartitionInfo
from codec.elk import ElkRecord
from codec.framing import unshelved
from codec.stored import decode_active, parse_archived
from codec.validate import check_partition_id
from layers import ArchiveLayer, KeySchema, TierPolicy
from layers.archive.cold_store import ColdReads
from layers.archive.places import batch_of, shelf_of, slot_of
from layers.archive.shelves import StoredBatch, add_shelf_reads
from layers.archive.workers import RegistryReader
from layers.errors import ColdFileDamaged, ColdStoreUnavailable
from layers.keys import is_cluster_client
from layers.plumbing.key_types import typed_steps
from layers.plumbing.replies import as_text
from layers.plumbing.roundtrip import RoundTrip
from layers.plumbing.runners import AsyncClient, AsyncIO, Awaited, Blocking, SyncIO, operation
from layers.plumbing.settings import StoredBatchSize
from layers.plumbing.steps import Batch, Call, Script, Steps
from stats.reader import RangeSummaries


class Source(enum.StrEnum):
    ACTIVE = "active"
    QUEUE = "queue"
    SIMPLE = "archive:simple"
    STAGING = "archive:staging"
    BATCH = "archive:batch"
    COLD = "cold"
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

    @classmethod
    def not_found(cls, partition_id: int) -> Answer:
        """No layer holds the partition."""
        return cls(partition_id, Source.NONE, detail="no such partition")

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
    cold_file: int  # the batch's cold map entry (0: none)
    cold_store: bytes | None  # where the namespace's cold store is (the archive meta's ``cold_store``)


#: Looks up the statistics layer's summary for a partition (its ID range), or None; for
#: `AsyncQueryRouter` it may be a coroutine function.
SummaryLookup = Callable[[int], dict[str, Any] | None] | Callable[[int], Awaitable[dict[str, Any] | None]]
#: Reads one partition from a cold file: (the stored cold store location, file number, pid) -> its
#: record or None; raises `ColdStoreUnavailable` or `ColdFileDamaged` (`ColdReads.find`). For
#: `AsyncQueryRouter` it may be a coroutine function.
ColdLookup = (
    Callable[[str | None, int, int], ArchivedPartition | None]
    | Callable[[str | None, int, int], Awaitable[ArchivedPartition | None]]
)


class RouterCore:
    """The lookup as steps (`layers.plumbing.steps`): `QueryRouter` runs it blocking, `AsyncQueryRouter`
    awaits it on a `redis.asyncio` client."""

    def __init__(
        self,
        keys: KeySchema,
        policy: TierPolicy,
        batch_sizes: StoredBatchSize,
        workers: RegistryReader,
        summary_lookup: SummaryLookup | None,
        *,
        scripted: bool,
        cold_lookup: ColdLookup | None = None,
    ) -> None:
        self.keys = keys
        self.cold_lookup = cold_lookup  # None: expired batches are answered from the statistics
        self.policy = policy
        self.batch_sizes = batch_sizes
        self.workers = workers
        self.summary_lookup = summary_lookup  # None: the namespace's own statistics (`RangeSummaries`)
        self._summaries = RangeSummaries(keys)
        ns = keys.namespace
        self._answers = {source: ROUTER_ANSWERS.labels(namespace=ns, source=source.value) for source in Source}
        self._seconds = ROUTER_SECONDS.labels(namespace=ns)
        self._decoded = DECODES.labels(namespace=ns, result="success")
        self._undecodable = DECODES.labels(namespace=ns, result="failure")
        self.decode_failures = 0
        self.decode_successes = 0
        self._scripted = scripted

    def _get(self, partition_id: int) -> Steps[Answer]:
        """Where partition ``partition_id`` is; raises ValidationError (bad id), WrongKeyType (a key
        of the namespace holds another type) or a Redis error."""
        pid = check_partition_id(partition_id)
        with self._seconds.time():
            answer = yield from typed_steps(self.keys, self._lookup(pid))
        self._answers[answer.source].inc()
        return answer

    get = operation(_get)

    def _lookup(self, pid: int) -> Steps[Answer]:
        size = self.batch_sizes.known  # as the batches were written, whatever is configured
        reads = yield from self._read(pid, size)
        if reads.batch_size != size:  # first sight of the stored size, or none stored yet
            reads = yield from self._read(pid, reads.batch_size)
        active, indexed, simple, staged, done, newest, retention, generation, stored, _, cold_file, cold_store = reads
        newest = None if newest is None else float(newest)
        if stored.blob is not None and not self.workers.is_current(generation):
            yield from self.workers.refresh_steps(forget=True)  # the registry was lost and built again since
        if active is not None:
            return (yield from self._record(pid, Source.ACTIVE, active, decode_active))
        for source, raw in ((Source.SIMPLE, simple), (Source.STAGING, staged)):
            if raw is not None:
                return (yield from self._record(pid, source, raw, parse_archived))
        problem, corrupt = "archived, but its detail has expired", bool(stored.damaged)
        if stored.damaged:
            problem = stored.damaged
        blobs = stored.blobs
        if blobs and newest is not None and cold_store is None and self._expired(newest, retention):
            blobs = []  # past its retention: the sweep has not deleted it yet, reads already do not see it
        for blob in blobs:
            try:
                part = yield from self.workers.find_steps(blob, pid)
                self.decode_successes += 1
                self._decoded.inc()
            except DecodeError as exc:
                self.decode_failures += 1
                self._undecodable.inc()
                problem, corrupt = f"archived batch {stored.batch_no} cannot be decoded: {exc}", True
                continue
            if part is not None:
                return Answer(pid, Source.BATCH, part)
        if cold_file:
            cold, why, damaged = yield from self._cold(pid, cold_store, cold_file)
            if cold is not None:
                return cold
            problem, corrupt = why, corrupt or damaged
        if indexed or corrupt:
            return (yield from self._fallback(pid, problem))
        if done:
            return Answer(pid, Source.QUEUE, None, True, "completed, waiting in the archive queue")
        return Answer.not_found(pid)

    def _read(self, pid: int, batch_size: int) -> Steps[_Reads]:
        """Everything about ``pid`` in one round trip, its batch found by ``batch_size``; with the
        batch size stored in the namespace (the one to use if it differs)."""
        k = self.keys
        batch_no = batch_of(pid, batch_size)
        shelf_no, slot_no = shelf_of(batch_no), slot_of(batch_no)
        if self._scripted:
            keys = [k.active, k.index, k.completed, k.staging(batch_no), k.done, k.expiry, k.archive_meta]
            keys += [k.workers, k.shelf(shelf_no), k.batch(batch_no), k.cold_map]
            replies = yield Script("lookup", keys, [pid, batch_no, slot_no])
            slot, legacy, damaged, stored_size, cold_entry, cold_store = replies[8:]
            why = f"shelf {shelf_no} is corrupt: {as_text(damaged)}" if damaged else ""
            stored = StoredBatch(batch_no, unshelved(slot), legacy, why)
        else:  # Redis Cluster: the keys span slots, so no script; the same reads in one pipeline
            batch = Batch()
            batch.hget(k.active, str(pid))
            batch.getbit(k.index, pid)
            batch.hget(k.completed, str(pid))
            batch.hget(k.staging(batch_no), str(pid))
            batch.getbit(k.done, pid)
            batch.zscore(k.expiry, str(batch_no))
            batch.hget(k.archive_meta, "retention_s")
            batch.hget(k.workers, "")
            batch.hget(k.archive_meta, "batch_size")
            batch.getrange(k.cold_map, 4 * batch_no, 4 * batch_no + 3)
            batch.hget(k.archive_meta, "cold_store")
            trip = RoundTrip(batch)
            shelf = add_shelf_reads(trip, k, [batch_no])
            replies = yield batch
            trip.hand(replies)
            stored_size, cold_entry, cold_store = replies[8:11]
            stored = shelf.value[batch_no]
        active, indexed, simple, staged, done, newest, retention, generation = replies[:8]
        size = self.batch_sizes.read(stored_size)
        cold_file = int.from_bytes(cold_entry, "big") if cold_entry and len(cold_entry) == 4 else 0
        return _Reads(
            active, indexed, simple, staged, done, newest, retention, generation, stored, size, cold_file, cold_store
        )

    def _expired(self, newest: float, retention: bytes | None) -> bool:
        try:
            keep = self.policy.retention_s if retention is None else int(retention)
        except ValueError:
            return False  # a tampered policy never hides data; `status` reports it
        return newest + keep <= time.time()

    def _record(self, pid: int, source: Source, raw: bytes, parse: Callable[[bytes], Any]) -> Steps[Answer]:
        try:
            return Answer(pid, source, parse(raw))
        except DecodeError as exc:
            self.decode_failures += 1
            self._undecodable.inc()
            return (yield from self._fallback(pid, f"{source.value} record is corrupt: {exc}"))

    def _cold(self, pid: int, cold_store: bytes | None, cold_file: int) -> Steps[tuple[Answer | None, str, bool]]:
        """The partition's answer from its batch's cold file; else why not, and whether the file
        (or the store) could not be read."""
        if self.cold_lookup is None:
            return None, f"archived in cold file {cold_file}, and this reader reads no cold store", True
        location = None if cold_store is None else as_text(cold_store)
        try:
            part = yield Call(self.cold_lookup, (location, cold_file, pid))
        except (ColdStoreUnavailable, ColdFileDamaged) as exc:
            self.decode_failures += 1
            self._undecodable.inc()
            return None, str(exc), True
        if part is None:
            return None, f"archived, but not in its batch's cold file {cold_file}", False
        return Answer(pid, Source.COLD, part), "", False

    def _fallback(self, pid: int, problem: str) -> Steps[Answer]:
        summary = None
        try:
            if self.summary_lookup is None:
                summary = yield from self._summaries.range_summary_steps(pid)
            else:
                summary = yield Call(self.summary_lookup, (pid,))
        except (redis.RedisError, DecodeError) as exc:
            problem += f"; statistics unavailable: {exc}"
        if summary is not None:
            return Answer(pid, Source.STATISTICS, None, True, problem, summary)
        return Answer(pid, Source.EXPIRED, None, True, problem)


class QueryRouter(RouterCore, Blocking):
    """Answers for any partition from whichever layer holds it, on a `redis.Redis` (or
    `redis.RedisCluster`) client: ``router.get(pid)``. `AsyncQueryRouter` is the asyncio one."""

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        policy: TierPolicy | None = None,
        summary_lookup: SummaryLookup | None = None,
        archive: ArchiveLayer | None = None,
        cold: ColdReads | None = None,
    ) -> None:
        self.redis = redis_client
        self._io = SyncIO(redis_client)
        keys = KeySchema.of(namespace, cluster, client=redis_client)
        self.archive = archive or ArchiveLayer(redis_client, keys, policy)
        a = self.archive
        scripted = not is_cluster_client(redis_client)
        cold = cold or ColdReads(None, keys.namespace)
        super().__init__(
            keys, a.policy, a.batch_sizes, a.workers, summary_lookup, scripted=scripted, cold_lookup=cold.find
        )


class AsyncQueryRouter(RouterCore, Awaited):
    """``answer = await router.get(pid)``. With ``archive`` (a synchronous `ArchiveLayer` of the same
    namespace) the router shares its policy, stored batch size and worker numbering, and does no
    I/O through it; ``summary_lookup`` may be a plain or a coroutine function. A cold file is read
    in a thread (`ColdReads.find_async`), off the event loop."""

    def __init__(
        self,
        redis_client: AsyncClient,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        policy: TierPolicy | None = None,
        summary_lookup: SummaryLookup | None = None,
        archive: ArchiveLayer | None = None,
        cold: ColdReads | None = None,
    ) -> None:
        self.redis = redis_client
        self._io = AsyncIO(redis_client)
        keys = KeySchema.of(namespace, cluster, client=redis_client)
        workers: RegistryReader
        if archive is not None:
            policy, batch_sizes, workers = archive.policy, archive.batch_sizes, archive.workers
        else:
            policy = policy or TierPolicy()
            batch_sizes, workers = StoredBatchSize(keys.archive_meta, policy.batch_size), RegistryReader(keys)
        scripted = not is_cluster_client(redis_client)
        cold = cold or ColdReads(None, keys.namespace)
        super().__init__(
            keys, policy, batch_sizes, workers, summary_lookup, scripted=scripted, cold_lookup=cold.find_async
        )

"""The archive layer: where completed partitions live, in the tier that fits the volume.

simple      one JSON per partition in the hash ``elk_completed``
compressed  records wait in a per-batch staging hash, then are sealed into one framed,
            encoded blob per batch; 64 batches share one string, their shelf
            (``elk_completed:shelf:{batch // 64}``, batch = pid // batch_size; `layers.archive.shelves`)
summary     as compressed, and each batch expires ``retention`` after its newest completion: the
            batch goes into the expiry index when sealed, reads treat it as expired from then
            on, and the maintenance sweep deletes it (the retention is a stored, changeable policy)

Writing a partition is two idempotent steps: its detail (simple hash or staging), then the
commit (index bit, total, tier, acknowledgement). A partition that came from elk_coordinator
(or was completed in a namespace writing Go's format) keeps its whole Go record as its detail
in the simple hash and staging, so it can be given back byte for byte; sealed batches keep the
archived fields only. A crash between them redelivers the entry
and the detail is written again with the same value.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from codec import ArchivedPartition, ValidationError
from codec.elk import ElkRecord
from codec.page import Columns
from codec.stored import as_archived
from layers.archive.places import batch_of, bit_set, byte_of
from layers.archive.sealing import BatchSealing, SealReads
from layers.archive.shelves import ShelfStore
from layers.archive.tiers import Tier, TierPolicy, read_tier, stored_tier
from layers.archive.workers import WorkerRegistrar
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.roundtrip import RoundTrip, raised
from layers.plumbing.scripts import Scripts
from layers.plumbing.settings import StoredBatchSize, stored_int


class ColdSweep(Protocol):
    """The cold tier as the archive layer knows it (`layers.archive.cold.ColdTier`): the expiry
    sweep's step when a cold store is configured, and the check at an archiver's start."""

    def step(self, now: float | None = None) -> int: ...

    def check(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StagedPage:
    """A page of records in a batch tier once staged and read (`ArchiveLayer.stage_page`): the
    batches to seal now, with their records in hand, and what sealing read."""

    to_seal: dict[int, list[ArchivedPartition]]
    read: SealReads


class ArchiveLayer:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema, policy: TierPolicy | None = None) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(keys, client=redis_client)
        self.policy = policy or TierPolicy()
        self.workers = WorkerRegistrar(redis_client, keys)
        self._scripts = Scripts.of(redis_client)
        self.shelves = ShelfStore(redis_client, self.keys)
        self.dead_letters = self.shelves.dead_letters
        #: sealing (`layers.archive.sealing`): seals, the encoding of a page's seals, decoding a batch
        self.sealing = BatchSealing(redis_client, self.keys, self.policy, self.workers, self.shelves)
        self._batch_size_checked = False
        self.batch_sizes = StoredBatchSize(self.keys.archive_meta, self.policy.batch_size)
        #: the cold tier (`layers.archive.cold`), when a cold store is configured: expired batches go there first
        self.cold: ColdSweep | None = None

    # state

    def tier(self) -> Tier:
        """The stored tier (it only moves up), or the policy's tier for the total if that is higher."""
        return read_tier(self.redis, self.keys, self.policy)

    def retention_s(self) -> int:
        """The summary tier's retention: the stored policy, else the configured one."""
        raw = self.redis.hget(self.keys.archive_meta, "retention_s")
        return stored_int(self.keys.archive_meta, "retention_s", raw, default=self.policy.retention_s)

    def set_retention(self, seconds: int, *, only_if_unset: bool = False) -> int:
        """Store the retention policy (every replica and the router read it); returns the one in force."""
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= 100 * 365 * 86400:
            raise ValidationError(f"retention must be 0..100 years in seconds, got {seconds!r}")
        if only_if_unset:
            self.redis.hsetnx(self.keys.archive_meta, "retention_s", seconds)
        else:
            self.redis.hset(self.keys.archive_meta, "retention_s", seconds)
        return self.retention_s()

    def check_batch_size(self) -> None:
        """Record the batch size on first use; a different one later would misplace every lookup."""
        if self._batch_size_checked:
            return
        size = self.policy.batch_size
        if self.redis.hsetnx(self.keys.archive_meta, "batch_size", size):
            self.redis.hset(self.keys.archive_meta, "shelved", 1)  # a new namespace: no batch keys to move
        stored = self.stored_batch_size()
        if stored != size:
            raise ValidationError(
                f"namespace {self.keys.namespace} keeps batches of {stored} partitions, not {size}: "
                f"set PARTARCHIVE_BATCH_SIZE={stored}"
            )
        self._batch_size_checked = True

    def check_meta(self) -> None:
        """`CorruptMetadata` naming the first field of the archive meta hash that is not what
        partarchive writes (the commit script refuses such a hash too, before writing)."""
        key = self.keys.archive_meta
        raw: Any = self.redis.hmget(key, ["tier", "total", "max_pid", "batch_size", "retention_s"])
        stored_tier(key, raw[0])
        for field, value in zip(("total", "max_pid", "batch_size", "retention_s"), raw[1:], strict=True):
            stored_int(key, field, value, default=1, minimum=1 if field == "batch_size" else 0)

    def check_cold(self) -> None:
        """At the archiver's start: with a cold store, that it can be written (`ColdStoreUnavailable`);
        without one, that the namespace keeps none (its expired batches would leave Redis without
        going there)."""
        if self.cold is not None:
            self.cold.check()
            return
        stored = self.redis.hget(self.keys.archive_meta, "cold_store")
        if stored is not None:
            raise ValidationError(
                f"namespace {self.keys.namespace} keeps expired detail in the cold store {as_text(stored)}: "
                "start with --cold-store (PARTARCHIVE_COLD_STORE) naming it"
            )

    def stored_batch_size(self) -> int:
        """The batch size the namespace's batches were written with (the policy's before any)."""
        if self.batch_sizes.stored is None:
            return self.batch_sizes.read(self.redis.hget(self.keys.archive_meta, "batch_size"))
        return self.batch_sizes.stored

    @property
    def known_batch_size(self) -> int:
        """The stored batch size if this process has seen it, else the policy's (no round trip)."""
        return self.batch_sizes.known

    def batch_size_read(self, raw: Any) -> int:
        """The batch size in force given the meta's ``batch_size`` field as just read."""
        return self.batch_sizes.read(raw)

    # write path

    def write_detail(
        self,
        parts: Sequence[ArchivedPartition | ElkRecord] | Columns,
        *,
        unsealed: bool = False,
        tier: Tier | None = None,
    ) -> Tier:
        """Store the records in the tier in force (``tier`` if the caller has just read it;
        idempotent); returns that tier. ``unsealed``: in a batch tier, into the simple hash
        without sealing (a critical backlog, `layers.control.pressure`)."""
        cols = parts if isinstance(parts, Columns) else Columns.of(parts)
        tier = tier or self.tier()
        if not len(cols):
            return tier
        self.check_batch_size()
        if tier is Tier.SIMPLE:
            self.redis.hset(self.keys.completed, mapping=dict(zip(cols.pids, cols.details, strict=True)))  # type: ignore[arg-type]
        elif unsealed:
            self.write_unsealed(cols)
        else:
            self._write_batches(cols.records(), tier)
        return tier

    def write_unsealed(self, cols: Columns) -> None:
        """Records into the simple hash, their batches noted in `KeySchema.unsealed` (for the seal-up,
        `layers.archive.transitions.seal_unsealed_step`), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.completed, mapping=dict(zip(cols.pids, cols.details, strict=True)))  # type: ignore[arg-type]
        now_ms = int(time.time() * 1000)
        pipe.zadd(self.keys.unsealed, dict.fromkeys(map(str, {self.policy.batch_of(p) for p in cols.pids}), now_ms))
        pipe.execute()

    def _write_batches(self, parts: Sequence[ArchivedPartition | ElkRecord], tier: Tier) -> None:
        page = self.stage_page(parts)
        if page.to_seal:
            self.sealing.seal_from_reads(page.to_seal, page.read, tier)

    def stage_page(
        self, parts: Sequence[ArchivedPartition | ElkRecord], carry: Callable[[RoundTrip], object] | None = None
    ) -> StagedPage:
        """The first half of writing a page of records in a batch tier, one round trip: the
        records of batches that are not whole in hand are staged, ``carry`` adds what the caller
        sends with it (an earlier page's seals and bookkeeping, `archiver.daemon.pipeline`), and
        every batch of the records is read as sealing reads it (its staging, after the staging
        writes, and its slot). The second half seals every batch the records fill completely, or
        that its staging now holds completely, from the records in hand (`StagedPage.to_seal`,
        `BatchSealing.seal_from_reads` or `BatchSealing.encode`). Workers claim the lowest pending
        partition, so a page of completions mostly holds whole batches. Split in two so the
        archiver can send the last page's commit in between: Redis runs it while this process
        encodes the batches."""
        self.check_batch_size()
        size, capacity = self.policy.batch_size, self.policy.capacity
        by_batch: dict[int, list[ArchivedPartition | ElkRecord]] = defaultdict(list)
        for part in parts:
            by_batch[batch_of(part.partition_id, size)].append(part)
        if all(type(p) is ArchivedPartition for p in parts):
            archived: dict[int, list[ArchivedPartition]] = by_batch  # type: ignore[assignment]
        else:
            archived = {b: [as_archived(p) for p in group] for b, group in by_batch.items()}
        whole = {
            b
            for b, got in archived.items()
            if len(got) >= capacity(b) and len({p.partition_id for p in got}) >= capacity(b)
        }
        rest = [p for b, group in by_batch.items() if b not in whole for p in group]
        trip = RoundTrip.on(self.redis)
        staged_batches = self._add_stage(trip, rest)
        if carry is not None:
            carry(trip)
        workers = {p.worker_id for got in archived.values() for p in got}
        reads = self.sealing.add_reads(trip, by_batch, workers)
        trip.run()
        read = reads.value
        full = {b for b in staged_batches if len(read.staged[b]) >= self.policy.capacity(b)}
        return StagedPage({b: archived[b] for b in sorted(whole | full)}, read)

    def stage(self, parts: Sequence[ArchivedPartition | ElkRecord]) -> dict[int, int]:
        """Put records in their batches' staging hashes; returns each batch touched with the
        records its staging holds now (read in the same round trip)."""
        trip = RoundTrip.on(self.redis)
        batches = self._add_stage(trip, parts)
        sizes = trip.part(raised)
        for batch_no in batches:
            sizes.hlen(self.keys.staging(batch_no))
        trip.run()
        return {b: int(n) for b, n in zip(batches, sizes.value, strict=True)}

    def _add_stage(self, trip: RoundTrip, parts: Sequence[ArchivedPartition | ElkRecord]) -> list[int]:
        """Add to ``trip`` the staging of records (an HSET per batch, then one ZADD noting the
        batches open; nothing for no records; an error raised once it ran); returns the batches."""
        by_batch: dict[int, dict[str, bytes]] = defaultdict(dict)
        for part in parts:
            by_batch[self.policy.batch_of(part.partition_id)][str(part.partition_id)] = part.to_json()
        if not by_batch:
            return []
        staging = trip.part(raised)
        for batch_no, fields in by_batch.items():
            staging.hset(self.keys.staging(batch_no), mapping=fields)
        staging.zadd(self.keys.open_batches, dict.fromkeys(map(str, by_batch), int(time.time() * 1000)))
        return list(by_batch)

    def write_simple(self, records: dict[int, bytes]) -> None:
        """Put records (already-encoded JSON, either format) into the simple hash as they are."""
        if records:
            self.check_batch_size()
            self.redis.hset(self.keys.completed, mapping={str(pid): raw for pid, raw in records.items()})  # type: ignore[arg-type]

    def indexed(self, pids: Sequence[int]) -> list[bool]:
        """Whether each partition's index bit is set: ids close together are read as one GETRANGE
        of the bitmap (up to 64 bytes per id), scattered ones by BITFIELD, 1,000 per call."""
        if not pids:
            return []
        lo, hi = min(pids), max(pids)
        if byte_of(hi) - byte_of(lo) < 64 * len(pids):
            first = byte_of(lo)
            raw: Any = self.redis.getrange(self.keys.index, first, byte_of(hi))
            return [bit_set(raw, pid, first) for pid in pids]
        out: list[bool] = []
        for start in range(0, len(pids), 1000):
            field = self.redis.bitfield(self.keys.index)
            for pid in pids[start : start + 1000]:
                field.get("u1", pid)
            bits: Any = field.execute()
            out += [bool(b) for b in bits]
        return out

    # reads

    def batch_blob(self, batch_no: int) -> bytes | None:
        """The sealed blob of one batch (None if not sealed, or expired)."""
        return self.shelves.read([batch_no])[batch_no].blob

    def get_simple(self, pid: int) -> bytes | None:
        return self.redis.hget(self.keys.completed, str(pid))  # type: ignore[return-value]

    def archived_total(self) -> int:
        """Partitions ever archived (the committed total; equals the index bit count)."""
        raw = self.redis.hget(self.keys.archive_meta, "total")
        return stored_int(self.keys.archive_meta, "total", raw, default=0)

    def simple_size(self) -> int:
        return int(self.redis.hlen(self.keys.completed))  # type: ignore[arg-type]

    def compression_ratio(self) -> float:
        """JSON bytes of every record sealed so far over the bytes of the blobs that hold them
        (0 before the first seal). Each seal adds its staged JSON and the growth of its blob."""
        raw: Any = self.redis.hmget(self.keys.archive_meta, ["sealed_json_bytes", "sealed_blob_bytes"])
        json_bytes, blob_bytes = int(raw[0] or 0), int(raw[1] or 0)
        return round(json_bytes / blob_bytes, 2) if blob_bytes else 0.0

    def open_batch_count(self) -> int:
        return int(self.redis.zcard(self.keys.open_batches))  # type: ignore[arg-type]

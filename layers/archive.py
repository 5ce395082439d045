"""The archive layer: where completed partitions live, in the tier that fits the volume.

simple      one JSON per partition in the hash ``elk_completed``
compressed  records wait in a per-batch staging hash, then are sealed into one framed,
            encoded blob per batch (``elk_completed:batch:{pid // batch_size}``)
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

import hashlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from codec import ArchivedPartition, DecodeError, ValidationError, decode_blob, encode_blob
from codec.elk import ElkRecord, as_archived, parse_archived
from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.queue import DEAD_LETTERS_KEPT
from layers.replies import as_text
from layers.scripts import Scripts
from layers.tiers import Tier, TierPolicy
from layers.workers import WorkerRegistry

_SEAL_RETRIES = 20
#: Bytes of member names, colons and braces in an archived record's JSON beyond its values.
_ARCHIVED_JSON_NAMES = len(b'"partition_id":"min_id":"max_id":"worker_id":"completed_at":"duration":')


@dataclass(frozen=True, slots=True)
class _SealWrite:
    """One batch's new blob and what the seal script checks before writing it."""

    batch_no: int
    digest: str  # SHA1 of the blob read ('' if none)
    staged: int  # staged records read
    blob: bytes
    json_bytes: int
    blob_growth: int
    newest: int  # newest completion in the batch (the expiry index's score)


@dataclass(frozen=True, slots=True)
class CommitResult:
    total: int
    tier: Tier
    newly_archived: int


class ArchiveLayer:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema, policy: TierPolicy | None = None) -> None:
        self.redis = redis_client
        self.keys = keys
        self.policy = policy or TierPolicy()
        self.workers = WorkerRegistry(redis_client, keys)
        self._scripts = Scripts(redis_client)
        self._batch_size_checked = False
        self.seals: Counter[int] = Counter()  # batch number -> seals by this process

    # state

    def tier(self) -> Tier:
        """The stored tier (it only moves up), or the policy's tier for the total if that is higher."""
        raw: Any = self.redis.hmget(self.keys.archive_meta, ["tier", "total"])
        stored = Tier(as_text(raw[0])) if raw[0] else Tier.SIMPLE
        wanted = self.policy.tier_for(int(raw[1] or 0))
        return wanted if wanted.rank > stored.rank else stored

    def retention_s(self) -> int:
        """The summary tier's retention: the stored policy, else the configured one."""
        raw = self.redis.hget(self.keys.archive_meta, "retention_s")
        if raw is None:
            return self.policy.retention_s
        try:
            value = int(raw)  # type: ignore[arg-type]
        except ValueError:
            raise DecodeError(f"{self.keys.archive_meta} retention_s is not a number: {as_text(raw)[:40]!r}") from None
        if value < 0:
            raise DecodeError(f"{self.keys.archive_meta} retention_s is negative")
        return value

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
        self.redis.hsetnx(self.keys.archive_meta, "batch_size", size)
        stored = int(self.redis.hget(self.keys.archive_meta, "batch_size") or size)  # type: ignore[arg-type]
        if stored != size:
            raise ValidationError(f"this namespace uses batch size {stored}, not {size}")
        self._batch_size_checked = True

    # write path

    def archive(self, entries: Sequence[tuple[str, ArchivedPartition]]) -> CommitResult:
        """Write the partitions' detail, then commit them (without statistics)."""
        self.write_detail([part for _, part in entries])
        return self.commit_deduplicated(entries, lambda parts: ([], []))

    def write_detail(self, parts: Sequence[ArchivedPartition | ElkRecord]) -> Tier:
        """Store the records in the current tier (idempotent); returns that tier."""
        if not parts:
            return self.tier()
        self.check_batch_size()
        tier = self.tier()
        if tier is Tier.SIMPLE:
            mapping = {str(p.partition_id): p.to_json() for p in parts}
            self.redis.hset(self.keys.completed, mapping=mapping)  # type: ignore[arg-type]
        else:
            self.seal_full(self.stage(parts), tier)
        return tier

    def commit(
        self,
        counted: Sequence[tuple[str, ArchivedPartition]],
        ack_only: Sequence[str] = (),
        stats_keys: Sequence[str] = (),
        ops: Sequence[tuple[int, str, str, int]] = (),
    ) -> CommitResult | list[int]:
        """One script: index bits, total, tier, statistics ``ops``, acknowledgements.

        Returns the pids already in the index instead (nothing written) when there are any.
        ``ops`` are (position in ``stats_keys``, '+'|'<'|'>', field, value).
        """
        k = self.keys
        entry_ids = [entry_id for entry_id, _ in counted if entry_id != "-"]
        args: list[object] = [
            ARCHIVER_GROUP,
            self.policy.compressed_from,
            self.policy.summary_above,
            ",".join([str(part.partition_id) for _, part in counted]),
            ",".join(entry_ids),
            ",".join([entry_id for entry_id in ack_only if entry_id != "-"]),
        ]
        for key_pos, op, field, value in ops:
            args += [key_pos + 4, op, field, value]
        reply = self._scripts("commit", [k.index, k.queue, k.archive_meta, *stats_keys], args)
        if as_text(reply[0]) == "dup":
            return [int(p) for p in reply[1:]]
        return CommitResult(int(reply[1]), Tier(as_text(reply[2])), int(reply[3]))

    def commit_deduplicated(
        self,
        entries: Sequence[tuple[str, ArchivedPartition]],
        build_ops: Callable[[list[ArchivedPartition]], tuple[list[str], list[tuple[int, str, str, int]]]],
    ) -> CommitResult:
        """Commit, counting each partition once: a pid seen twice in ``entries`` or already in
        the index is only acknowledged. ``build_ops`` gives the statistics for the counted ones."""
        already: set[int] = set()
        for _ in range(3):
            counted: list[tuple[str, ArchivedPartition]] = []
            ack_only: list[str] = []
            seen: set[int] = set()
            for entry_id, part in entries:
                if part.partition_id in seen or part.partition_id in already:
                    ack_only.append(entry_id)
                else:
                    seen.add(part.partition_id)
                    counted.append((entry_id, part))
            keys, ops = build_ops([p for _, p in counted])
            result = self.commit(counted, ack_only, keys, ops)
            if isinstance(result, CommitResult):
                return result
            already.update(result)
        raise RuntimeError("commit kept finding new duplicates; is another archiver misconfigured?")

    def stage(self, parts: Sequence[ArchivedPartition | ElkRecord]) -> set[int]:
        """Put records in their batches' staging hashes; returns the batch numbers touched."""
        by_batch: dict[int, dict[str, bytes]] = defaultdict(dict)
        for part in parts:
            by_batch[self.policy.batch_of(part.partition_id)][str(part.partition_id)] = part.to_json()
        now_ms = int(time.time() * 1000)
        pipe = self.redis.pipeline(transaction=False)
        for batch_no, fields in by_batch.items():
            pipe.hset(self.keys.staging(batch_no), mapping=fields)  # type: ignore[arg-type]
        pipe.zadd(self.keys.open_batches, {str(b): now_ms for b in by_batch})
        pipe.execute()
        return set(by_batch)

    def write_simple(self, records: dict[int, bytes]) -> None:
        """Put records (already-encoded JSON, either format) into the simple hash as they are."""
        if records:
            self.check_batch_size()
            self.redis.hset(self.keys.completed, mapping={str(pid): raw for pid, raw in records.items()})  # type: ignore[arg-type]

    def seal_all(self) -> int:
        """Seal every batch with staged records, in batch order (the end of a bulk import)."""
        sealed = 0
        tier = self.tier()
        while raw := self._open_batches(1000):
            numbers = sorted(int(b) for b in raw)
            sealed += sum(self.seal(b, tier) for b in numbers)
        return sealed

    def _open_batches(self, limit: int) -> list[bytes]:
        raw: Any = self.redis.zrange(self.keys.open_batches, 0, limit - 1)
        return list(raw)

    def indexed(self, pids: Sequence[int]) -> list[bool]:
        """Whether each partition's index bit is set: ids close together are read as one GETRANGE
        of the bitmap (up to 64 bytes per id), scattered ones by BITFIELD, 1,000 per call."""
        if not pids:
            return []
        lo, hi = min(pids), max(pids)
        if (hi >> 3) - (lo >> 3) < 64 * len(pids):
            first = lo >> 3
            raw: Any = self.redis.getrange(self.keys.index, first, hi >> 3)
            size = len(raw)
            return [(pid >> 3) - first < size and raw[(pid >> 3) - first] & (0x80 >> (pid & 7)) != 0 for pid in pids]
        out: list[bool] = []
        for start in range(0, len(pids), 1000):
            field = self.redis.bitfield(self.keys.index)
            for pid in pids[start : start + 1000]:
                field.get("u1", pid)
            bits: Any = field.execute()
            out += [bool(b) for b in bits]
        return out

    def seal_full(self, batches: set[int], tier: Tier | None = None) -> int:
        """Seal the batches whose staging holds every partition of the batch."""
        ordered = sorted(batches)
        pipe = self.redis.pipeline(transaction=False)
        for b in ordered:
            pipe.hlen(self.keys.staging(b))
        sizes = pipe.execute()
        full = [b for b, n in zip(ordered, sizes, strict=True) if n >= self.policy.capacity(b)]
        if full and tier is None:
            tier = self.tier()
        return sum(self.seal(b, tier) for b in full)

    def seal_idle(self, now: float | None = None, limit: int = 100) -> int:
        """Seal batches nobody staged into for ``seal_idle_s`` (partial batches and stragglers)."""
        cutoff = int(((now or time.time()) - self.policy.seal_idle_s) * 1000)
        raw: Any = self.redis.zrangebyscore(self.keys.open_batches, "-inf", cutoff, start=0, num=limit)
        tier = self.tier() if raw else None
        return sum(self.seal(int(b), tier) for b in raw)

    def seal(self, batch_no: int, tier: Tier | None = None, extra: Sequence[ArchivedPartition] = ()) -> bool:
        """Merge the staged records of a batch (and ``extra`` records in hand) into its blob; safe
        against concurrent sealers: the write is refused if blob or staging changed since read.

        ``tier`` is the tier the caller has just read (saves a round trip per batch); without
        it the tier is read here.
        """
        batch_key, stage_key = self.keys.batch(batch_no), self.keys.staging(batch_no)
        for _ in range(_SEAL_RETRIES):
            pipe = self.redis.pipeline(transaction=False)
            pipe.get(batch_key)
            pipe.hgetall(stage_key)
            blob, staged = pipe.execute()
            write = self._prepare_seal(batch_no, blob, staged, extra)
            if isinstance(write, bool):
                return write
            if write is not None and self._write_seals([write], tier):
                return True
        raise RuntimeError(f"batch {batch_no}: gave up sealing after {_SEAL_RETRIES} conflicts")

    def seal_many(self, batches: dict[int, list[ArchivedPartition]], tier: Tier | None = None) -> int:
        """Seal several batches with records in hand (a bulk import): their blobs and staging are
        read in one round trip, each batch is encoded once and all are written in one more; a
        batch changed meanwhile is sealed again on its own."""
        numbers = sorted(batches)
        pipe = self.redis.pipeline(transaction=False)
        for b in numbers:
            pipe.get(self.keys.batch(b))
            pipe.hgetall(self.keys.staging(b))
        replies = pipe.execute()
        tier = tier or self.tier()
        self.workers.register({p.worker_id for parts in batches.values() for p in parts})
        writes: list[_SealWrite] = []
        again = []
        for i, b in enumerate(numbers):
            write = self._prepare_seal(b, replies[2 * i], replies[2 * i + 1], batches[b])
            if isinstance(write, _SealWrite):
                writes.append(write)
            elif write is None:
                again.append(b)
        written = self._write_seals(writes, tier)
        again += [w.batch_no for w in writes if w.batch_no not in written]
        return len(written) + sum(self.seal(b, tier, batches[b]) for b in sorted(again))

    def _prepare_seal(
        self, batch_no: int, blob: bytes | None, staged: dict[bytes, bytes], extra: Sequence[ArchivedPartition]
    ) -> _SealWrite | bool | None:
        """The seal of blob + staging + extra, encoded; False if there is nothing to seal, None
        if only corrupt records were staged (dropped here: read again)."""
        if not staged and not extra:
            self.redis.zrem(self.keys.open_batches, str(batch_no))
            return False
        records = {p.partition_id: p for p in self._decode_existing(batch_no, blob)}
        json_bytes = 0
        for field, raw in staged.items():
            try:
                part = as_archived(parse_archived(raw))
            except DecodeError as exc:
                self._dead_letter(f"stage:{batch_no}:{as_text(field)}", f"corrupt staged record: {exc}", raw)
                continue
            records[part.partition_id] = part
            json_bytes += len(raw)
        for part in extra:
            records[part.partition_id] = part
        if extra:  # the archived JSON these records would have had: the list form plus the member names
            as_lists = len(orjson.dumps(list(map(tuple, extra)))) - 1 - len(extra)
            json_bytes += as_lists + _ARCHIVED_JSON_NAMES * len(extra)
        if not records:  # only corrupt records were staged: drop just those fields
            self.redis.hdel(self.keys.staging(batch_no), *staged.keys())
            return None
        merged = [records[pid] for pid in sorted(records)]
        new_blob = encode_blob(merged, self.workers.register(p.worker_id for p in merged))
        return _SealWrite(
            batch_no,
            hashlib.sha1(blob).hexdigest() if blob else "",
            len(staged),
            new_blob,
            json_bytes,
            len(new_blob) - len(blob or b""),
            max(p.completed_at for p in merged),
        )

    def _write_seals(self, writes: list[_SealWrite], tier: Tier | None) -> set[int]:
        """Send the seal scripts in one round trip, then the bookkeeping of those that were not
        refused (open-batch set, byte counters, expiry index) in another; returns the sealed."""
        if not writes:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for w in writes:
            keys = [self.keys.batch(w.batch_no), self.keys.staging(w.batch_no)]
            self._scripts.on(pipe, "seal", keys, [w.digest, w.staged, w.blob])
        done = [w for w, ok in zip(writes, pipe.execute(), strict=True) if int(ok)]
        if not done:
            return set()
        for w in done:
            self.seals[w.batch_no] += 1
        pipe = self.redis.pipeline(transaction=False)
        if (tier or self.tier()) is Tier.SUMMARY:
            pipe.zadd(self.keys.expiry, {str(w.batch_no): w.newest for w in done})
        pipe.zrem(self.keys.open_batches, *(str(w.batch_no) for w in done))
        pipe.hincrby(self.keys.archive_meta, "sealed_json_bytes", sum(w.json_bytes for w in done))
        pipe.hincrby(self.keys.archive_meta, "sealed_blob_bytes", sum(w.blob_growth for w in done))
        pipe.execute()
        return {w.batch_no for w in done}

    def _decode_existing(self, batch_no: int, blob: bytes | None) -> list[ArchivedPartition]:
        """Records already sealed in a batch. A corrupt blob is copied to the quarantine key (its
        records cannot be read; the statistics still count them) and the batch is rebuilt from
        what is staged."""
        if blob is None:
            return []
        try:
            return self.decode_batch(blob)
        except DecodeError as exc:
            self.redis.set(self.keys.quarantine(batch_no), blob)
            self._dead_letter(f"batch:{batch_no}", f"corrupt batch blob quarantined: {exc}", b"")
            return []

    def _dead_letter(self, what: str, reason: str, payload: bytes) -> None:
        self.redis.xadd(
            self.keys.dead_letter,
            {"entry": what, "reason": reason, "p": payload},
            maxlen=DEAD_LETTERS_KEPT,
            approximate=True,
        )

    def decode_batch(self, blob: bytes) -> list[ArchivedPartition]:
        try:
            return decode_blob(blob, self.workers.map)
        except DecodeError:
            self.workers.refresh()  # another archiver may have registered new workers
            return decode_blob(blob, self.workers.map)

    # reads

    def get_simple(self, pid: int) -> bytes | None:
        return self.redis.hget(self.keys.completed, str(pid))  # type: ignore[return-value]

    def archived_total(self) -> int:
        """Partitions ever archived (the committed total; equals the index bit count)."""
        raw = self.redis.hget(self.keys.archive_meta, "total")
        return int(raw) if raw else 0  # type: ignore[arg-type]

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

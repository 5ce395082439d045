"""Sealing: merging a batch's staged records (and records in hand) into its one encoded blob,
kept in its shelf slot (`layers.archive.shelves`).

Safe against concurrent sealers: a slot is written only if it still holds the blob the sealer
read (a refused seal reads again), and only the staged records that were read, still unchanged,
are then deleted from the staging hash. A bulk import seals many batches in a few round trips
(`seal_many`). `ArchiveLayer` holds one (``archive.sealing``) and offers its seals; kept apart
because it is the one subtle write of the archive.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from operator import lt
from typing import Any

import orjson
import redis
from redis.exceptions import NoScriptError

from codec import ArchivedPartition, DecodeError, decode_blob, encode_blob
from codec.stored import as_archived, parse_archived
from layers.archive.shelves import ShelfStore, SlotWrite, StoredBatch
from layers.archive.tiers import Tier, TierPolicy, read_tier
from layers.archive.workers import WorkerRegistrar
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.roundtrip import Part, RoundTrip, raised
from layers.plumbing.runners import SyncIO
from layers.plumbing.scripts import Scripts

_SEAL_RETRIES = 20
#: How long (us) a process's last counted group is remembered for a bookkeeping sent again (a week).
_COUNTED_KEPT_US = 7 * 86400 * 10**6
#: Bytes of member names, colons and braces in an archived record's JSON beyond its values.
_ARCHIVED_JSON_NAMES = len(b'"partition_id":"min_id":"max_id":"worker_id":"completed_at":"duration":')


@dataclass(frozen=True, slots=True)
class SealReads:
    """What sealing read of some batches: their staged records and their stored blobs."""

    staged: dict[int, dict[bytes, bytes]]
    stored: dict[int, StoredBatch]


@dataclass(frozen=True, slots=True)
class SealWrite:
    """One batch's new blob, what was read to make it, and the bookkeeping that follows it."""

    batch_no: int
    stored: StoredBatch  # the batch as read
    staged: dict[bytes, bytes]  # staged records read (deleted once sealed, where unchanged)
    blob: bytes
    json_bytes: int
    blob_growth: int
    newest: int  # newest completion in the batch (the expiry index's score)
    extra: Sequence[ArchivedPartition] = ()  # the records in hand it was sealed with (to seal again if refused)


#: Seals encoded together, with the tier their sealer read.
SealGroup = tuple[list[SealWrite], Tier]


class SealBookkeeping:
    """Seals written whose bookkeeping is owed: the staged records they hold deleted (where
    unchanged), the open-batch set kept, the byte counters and the expiry index (`add`). Kept in
    groups numbered in the order written, by each owner of writes: `BatchSealing` for the seals
    it writes and finishes in the same call, the archiver's page writes
    (`archiver.daemon.pipeline.PageWrites`) for those that ride on a later page's round trip.
    Until it has run it is sent again, and counts nothing twice: `seal_bookkeeping.lua` counts a
    group of an owner only if its number is above the last one counted for that owner.

    Deferred, the bookkeeping is harmless: until it runs, a sealed record is also still staged,
    as it is after a crash between the two (the next seal of its batch merges the same record)."""

    def __init__(self, client: redis.Redis, keys: KeySchema) -> None:
        self.redis = client
        self.keys = keys
        self._scripts = Scripts.of(client)
        self._owner = uuid.uuid4().hex  # names these groups in `KeySchema.sealed_counted`
        self._number = 0  # of the last group owed
        self.groups: list[tuple[list[SealWrite], Tier, int]] = []

    def __bool__(self) -> bool:
        return bool(self.groups)

    def owe(self, written: list[SealWrite], tier: Tier) -> None:
        """The bookkeeping of seals just written, sealed in ``tier`` (as their sealer read it)."""
        if written:
            self._number = max(self._number + 1, time.time_ns() // 1000)
            self.groups.append((written, tier, self._number))

    def run(self) -> None:
        """Do the bookkeeping owed, now (one round trip)."""
        if self.groups:
            trip = RoundTrip.on(self.redis)
            self.add(trip)
            trip.run()

    def add(self, trip: RoundTrip) -> None:
        """Add the bookkeeping owed to ``trip``; the groups are owed no more once it ran."""
        seals = list(self.groups)  # left there until done: a round trip that fails is sent again
        done = [w for group, _, _ in seals for w in group]
        k = self.keys
        counted: list[Any] = [self._owner, _COUNTED_KEPT_US, len(seals)]
        for group, _, number in seals:
            counted += [number, sum(w.json_bytes for w in group), sum(w.blob_growth for w in group)]
        for group, tier, _ in seals:
            counted += [x for w in group for x in (w.batch_no, w.newest, int(tier is Tier.SUMMARY))]
        calls = [
            ("hdel_if_equal", [k.staging(w.batch_no)], [x for pair in w.staged.items() for x in pair])
            for w in done
            if w.staged
        ]
        calls.append(("seal_bookkeeping", [k.archive_meta, k.expiry, k.sealed_counted], counted))
        cleaned = self._scripts.add_calls(trip, calls)

        def read(replies: list[Any]) -> None:
            script_error(cleaned.value[-1], meta_key=k.archive_meta, unchanged="no bookkeeping was counted")
            raised(replies)
            del self.groups[: len(seals)]  # only now: sent again, the counting script counts nothing twice
            left = replies[1:]
            if any(isinstance(reply, NoScriptError) for reply in cleaned.replies):
                # a cleanup ran after the HLENs (the server had lost its script): read them again
                left = [self.redis.hlen(self.keys.staging(w.batch_no)) for w in done]
            reopened = {str(w.batch_no): int(time.time() * 1000) for w, n in zip(done, left, strict=True) if n}
            if reopened:
                self.redis.zadd(self.keys.open_batches, reopened)  # type: ignore[arg-type]

        opened = trip.part(read)
        opened.zrem(k.open_batches, *(str(w.batch_no) for w in done))
        for w in done:  # staged into since read: the batch stays open (the stager's ZADD may be gone)
            opened.hlen(k.staging(w.batch_no))


class BatchSealing:
    """Seals one namespace's batches into their shelves (`ShelfStore`), naming workers through
    its registry; counts the seals this process made (``seals``, batch number -> seals). What it
    writes itself it finishes in the same call, bookkeeping included (``bookkeeping`` holds it
    only until then, or until the next call when the bookkeeping's round trip failed); seals
    encoded for a caller to write later (`encode`, `add_writes`) are the caller's to keep."""

    def __init__(
        self, client: redis.Redis, keys: KeySchema, policy: TierPolicy, workers: WorkerRegistrar, shelves: ShelfStore
    ) -> None:
        self.redis = client
        self.keys = keys
        self.policy = policy
        self.workers = workers
        self.shelves = shelves
        self.seals: Counter[int] = Counter()
        self.bookkeeping = SealBookkeeping(client, keys)

    def tier(self) -> Tier:
        return read_tier(self.redis, self.keys, self.policy)

    def seal_all(self) -> int:
        """Seal every batch with staged records, in batch order (the end of a bulk import)."""
        self.bookkeeping.run()
        sealed = 0
        tier = self.tier()
        while raw := self._open_batches(1000):
            numbers = sorted(int(b) for b in raw)
            sealed += sum(self.seal(b, tier) for b in numbers)
        return sealed

    def _open_batches(self, limit: int) -> list[bytes]:
        raw: Any = self.redis.zrange(self.keys.open_batches, 0, limit - 1)
        return list(raw)

    def seal_idle(self, now: float | None = None, limit: int = 100) -> int:
        """Seal batches nobody staged into for ``seal_idle_s`` (partial batches and stragglers)."""
        self.bookkeeping.run()
        cutoff = int(((now or time.time()) - self.policy.seal_idle_s) * 1000)
        raw: Any = self.redis.zrangebyscore(self.keys.open_batches, "-inf", cutoff, start=0, num=limit)
        tier = self.tier() if raw else None
        return sum(self.seal(int(b), tier) for b in raw)

    def seal(self, batch_no: int, tier: Tier | None = None, extra: Sequence[ArchivedPartition] = ()) -> bool:
        """Merge the staged records of a batch (and ``extra`` records in hand) into its blob; safe
        against concurrent sealers: the write is refused if the slot changed since it was read
        (then read again), and a record staged meanwhile stays staged, its batch open.

        ``tier`` is the tier the caller has just read (saves a round trip per batch); without
        it the tier is read here.
        """
        self.bookkeeping.run()
        for _ in range(_SEAL_RETRIES):
            trip = RoundTrip.on(self.redis)
            staged = trip.part(raised).hgetall(self.keys.staging(batch_no))
            stored = self.shelves.add_reads(trip, [batch_no])
            trip.run()
            write = self._prepare_seal(stored.value[batch_no], staged.value[0], extra)
            if isinstance(write, bool):
                return write
            if write is not None and self._write_seals([write], tier):
                return True
        raise RuntimeError(f"batch {batch_no}: gave up sealing after {_SEAL_RETRIES} conflicts")

    def seal_many(self, batches: dict[int, list[ArchivedPartition]], tier: Tier | None = None) -> int:
        """Seal several batches with records in hand (a bulk import): their blobs and staging are
        read in one round trip, each batch is encoded once and all are written in one more; a
        batch changed meanwhile is sealed again on its own."""
        trip = RoundTrip.on(self.redis)
        reads = self.add_reads(trip, batches, {p.worker_id for parts in batches.values() for p in parts})
        trip.run()
        return self.seal_from_reads(batches, reads.value, tier)

    def add_reads(self, trip: RoundTrip, numbers: Iterable[int], worker_ids: set[str]) -> Part[SealReads]:
        """Add to ``trip`` what sealing these batches reads (their staging and slots, and the check
        of the workers' numbers); the part's value is what was read, the workers registered."""
        numbers = sorted(numbers)
        staged = trip.part(raised)
        for b in numbers:
            staged.hgetall(self.keys.staging(b))
        stored = self.shelves.add_reads(trip, numbers)
        self.workers.add_register(trip, worker_ids)  # the workers in hand checked and registered once here
        return trip.after(lambda: SealReads(dict(zip(numbers, staged.value, strict=True)), stored.value))

    def seal_from_reads(self, batches: dict[int, list[ArchivedPartition]], reads: SealReads, tier: Tier | None) -> int:
        """`seal_many` once its reads are in: the batches encoded and written, a batch changed
        since it was read sealed again on its own; returns the batches sealed."""
        tier = tier or self.tier()
        writes, resealed = self.encode(batches, reads, tier)
        written = self._write_seals(writes, tier)
        refused = [w for w in writes if w.batch_no not in written]
        return len(written) + resealed + sum(self.seal(w.batch_no, tier, w.extra) for w in refused)

    def encode(
        self, batches: dict[int, list[ArchivedPartition]], reads: SealReads, tier: Tier
    ) -> tuple[list[SealWrite], int]:
        """The seals of these batches (with their records in hand) encoded from what was read of
        them, to be written (`add_writes`); a batch that held only corrupt staged records is
        sealed again now, on its own: returned with how many of those were sealed."""
        writes: list[SealWrite] = []
        again = []
        for b in sorted(batches):
            write = self._prepare_seal(reads.stored[b], reads.staged[b], batches[b], verify_workers=False)
            if isinstance(write, SealWrite):
                writes.append(write)
            elif write is None:
                again.append(b)
        return writes, sum(self.seal(b, tier, batches[b]) for b in again)

    def shelve(self, stored: dict[int, StoredBatch]) -> int:
        """Move batch keys written before shelves into their slots, merged with what a slot already
        holds; returns the batches moved (one changed meanwhile is left for the next call)."""
        writes = []
        for b, batch in sorted(stored.items()):
            if batch.legacy is None:
                continue
            records = self._sealed(batch)
            merged = [records[pid] for pid in sorted(records)]
            blob = encode_blob(merged, self.workers.register({p.worker_id for p in merged})) if merged else b""
            writes.append(SlotWrite(b, batch.slot, blob, batch.legacy))
        return len(self.shelves.write(writes)) if writes else 0

    def _prepare_seal(
        self,
        stored: StoredBatch,
        staged: dict[bytes, bytes],
        extra: Sequence[ArchivedPartition],
        *,
        verify_workers: bool = True,
    ) -> SealWrite | bool | None:
        """The seal of blob + staging + extra, encoded; False if there is nothing to seal, None
        if only corrupt records were staged (dropped here: read again)."""
        batch_no = stored.batch_no
        if not staged and not extra:
            self.redis.zrem(self.keys.open_batches, str(batch_no))
            return False
        if not staged and stored.blob is None and _ascending(extra):  # a batch whole in hand (the usual case)
            return self._sealed_from(stored, extra, extra, verify_workers)
        records = self._sealed(stored)
        before = archived_json_bytes(records.values())
        extra_pids = {str(p.partition_id) for p in extra}
        for field, raw in staged.items():
            name = as_text(field)
            if name in extra_pids:  # staged by the caller: the record in hand wins, undecoded
                continue
            try:
                part = as_archived(parse_archived(raw))
            except DecodeError as exc:
                self.shelves.dead_letters.note(f"stage:{batch_no}:{name}", f"corrupt staged record: {exc}", raw)
                continue
            records[part.partition_id] = part
        for part in extra:
            records[part.partition_id] = part
        if not records:  # only corrupt records were staged: drop just those fields
            self.redis.hdel(self.keys.staging(batch_no), *staged.keys())
            return None
        merged = [records[pid] for pid in sorted(records)]
        return self._sealed_from(stored, merged, extra, verify_workers, staged=staged, before=before)

    def _sealed_from(
        self,
        stored: StoredBatch,
        merged: Sequence[ArchivedPartition],
        extra: Sequence[ArchivedPartition],
        verify_workers: bool,
        *,
        staged: dict[bytes, bytes] | None = None,
        before: int = 0,
    ) -> SealWrite:
        """The seal of ``merged`` (in pid order), replacing a blob whose records' archived JSON
        took ``before`` bytes: the JSON bytes it adds are those of ``merged`` less ``before``, as
        its blob bytes are the new blob's less the old one's. So the counters hold what the stored
        blobs hold, whatever was sealed into them before (by another archiver, or by this one
        with records delivered again)."""
        names = {p.worker_id for p in merged}
        workers = self.workers.map
        if verify_workers or not all(w in workers for w in names):  # `seal_many` has registered its own
            workers = self.workers.register(names, verify=verify_workers)
        new_blob = encode_blob(merged, workers)
        return SealWrite(
            stored.batch_no,
            stored,
            staged or {},
            new_blob,
            archived_json_bytes(merged) - before,
            len(new_blob) - len(stored.blob or b""),
            max(p.completed_at for p in merged),
            extra,
        )

    def _write_seals(self, writes: list[SealWrite], tier: Tier | None) -> set[int]:
        """Write the new blobs into their shelves (a script call per shelf, one round trip), then
        for those not refused the bookkeeping (`SealBookkeeping.run`), one more. Returns the sealed."""
        if not writes:
            return set()
        already_there: set[int] = set()
        written = self.shelves.write(
            [SlotWrite(w.batch_no, w.stored.slot, w.blob, w.stored.legacy) for w in writes], already_there
        )
        self.bookkeeping.owe(self._written(_uncounted(writes, already_there), written), tier or self.tier())
        self.bookkeeping.run()
        return written

    def _written(self, writes: list[SealWrite], written: set[int]) -> list[SealWrite]:
        """Those of ``writes`` whose slots were written, counted as seals (their bookkeeping is owed)."""
        done = [w for w in writes if w.batch_no in written]
        for w in done:
            self.seals[w.batch_no] += 1
        return done

    def add_writes(self, trip: RoundTrip, groups: list[SealGroup]) -> Part[list[SealGroup]]:
        """Add to ``trip`` the slot writes of seals `encode` made, in groups with the tier their
        sealer read; the part's value is the same groups, of the seals written (whose bookkeeping
        the caller owes, `SealBookkeeping.owe`). Each batch refused (changed since it was read) is
        sealed again, now, on its own."""
        writes = [(w, tier) for group, tier in groups for w in group]
        already_there: set[int] = set()
        slots = self.shelves.add_write(
            trip, [SlotWrite(w.batch_no, w.stored.slot, w.blob, w.stored.legacy) for w, _ in writes], already_there
        )

        def written() -> list[SealGroup]:
            done = slots.value
            for w, tier in writes:
                if w.batch_no not in done:
                    self.seal(w.batch_no, tier, w.extra)
            return [(self._written(_uncounted(group, already_there), done), tier) for group, tier in groups]

        return trip.after(written)

    def _sealed(self, stored: StoredBatch) -> dict[int, ArchivedPartition]:
        """The records already sealed in a batch, by pid: its old key's, overridden by its slot's."""
        records = {p.partition_id: p for p in self._decode_existing(stored.batch_no, stored.legacy)}
        records.update((p.partition_id, p) for p in self._decode_existing(stored.batch_no, stored.slot))
        return records

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
            self.shelves.dead_letters.note(f"batch:{batch_no}", f"corrupt batch blob quarantined: {exc}")
            return []

    def find_in_batch(self, blob: bytes, pid: int) -> ArchivedPartition | None:
        """One partition's record in a blob (None if the batch does not hold it)."""
        return SyncIO(self.redis).run(self.workers.find_steps(blob, pid))

    def decode_batch(self, blob: bytes) -> list[ArchivedPartition]:
        try:
            return decode_blob(blob, self.workers.map)
        except DecodeError:
            self.workers.refresh()  # another archiver may have registered new workers
            return decode_blob(blob, self.workers.map)


def _uncounted(writes: list[SealWrite], already_there: set[int]) -> list[SealWrite]:
    """``writes`` with those found already in place on their first sending counted as adding no
    bytes: another sealer wrote the same blob, and counted it."""
    if not already_there:
        return writes
    return [replace(w, json_bytes=0, blob_growth=0) if w.batch_no in already_there else w for w in writes]


def archived_json_bytes(parts: Iterable[ArchivedPartition]) -> int:
    """Bytes of the records' archived JSON (`ArchivedPartition.to_json`), all at once: their
    list form, less its brackets and commas, plus the member names of each."""
    rows = list(map(tuple, parts))
    if not rows:
        return 0
    return len(orjson.dumps(rows)) - 1 - len(rows) + _ARCHIVED_JSON_NAMES * len(rows)


def _ascending(parts: Sequence[ArchivedPartition]) -> bool:
    """Whether the records' pids strictly ascend (each pid once, in order)."""
    pids = [p.partition_id for p in parts]
    return all(map(lt, pids, pids[1:]))

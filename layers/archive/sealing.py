"""Sealing: merging a batch's staged records (and records in hand) into its one encoded blob,
kept in its shelf slot (`layers.archive.shelves`).

Safe against concurrent sealers: a slot is written only if it still holds the blob the sealer
read (a refused seal reads again), and only the staged records that were read, still unchanged,
are then deleted from the staging hash. A bulk import seals many batches in a few round trips
(`seal_many`). `ArchiveLayer` holds one (``archive.sealing``) and offers its seals; kept apart
because it is the one subtle write of the archive.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
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
from layers.archive.workers import WorkerRegistry
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.scripts import Scripts
from layers.plumbing.steps import SyncIO

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
class _SealWrite:
    """One batch's new blob, what was read to make it, and the bookkeeping that follows it."""

    batch_no: int
    stored: StoredBatch  # the batch as read
    staged: dict[bytes, bytes]  # staged records read (deleted once sealed, where unchanged)
    blob: bytes
    json_bytes: int
    blob_growth: int
    newest: int  # newest completion in the batch (the expiry index's score)
    extra: Sequence[ArchivedPartition] = ()  # the records in hand it was sealed with (to seal again if refused)


@dataclass(slots=True)
class UnwrittenSeals:
    """Seals encoded and not written yet, to go out with a later round trip (`BatchSealing.seal_read`
    with ``defer``): groups of writes, each with the tier its sealer read and whether it was sent
    before (its replies unread). Owned by whoever defers them (the page-write pipeline,
    `archiver.daemon.pipeline`: a page's seals go out with the next page's reads) and handed to
    the calls that write them (`BatchSealing.queue_reads`, `BatchSealing.flush`)."""

    groups: list[tuple[list[_SealWrite], Tier, bool]] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.groups)

    def drop(self) -> None:
        """Forget them: they could not be written. Their owner does not commit their records,
        which stay pending in the queue and are archived again later."""
        self.groups.clear()


class BatchSealing:
    """Seals one namespace's batches into their shelves (`ShelfStore`), naming workers through
    its registry; counts the seals this process made (``seals``, batch number -> seals)."""

    def __init__(
        self, client: redis.Redis, keys: KeySchema, policy: TierPolicy, workers: WorkerRegistry, shelves: ShelfStore
    ) -> None:
        self.redis = client
        self.keys = keys
        self.policy = policy
        self.workers = workers
        self.shelves = shelves
        self.seals: Counter[int] = Counter()
        self._scripts = Scripts.of(client)
        # seals written, their bookkeeping not done yet: one queue per process, sent in the order of its group numbers
        self._bookkeeping: list[tuple[list[_SealWrite], Tier, int]] = []
        self._process = uuid.uuid4().hex  # names this object's groups of seals in `KeySchema.sealed_counted`
        self._group = 0  # the number of its last group of seals written

    def tier(self) -> Tier:
        return read_tier(self.redis, self.keys, self.policy)

    def seal_all(self) -> int:
        """Seal every batch with staged records, in batch order (the end of a bulk import)."""
        self.flush()
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
        self.flush()
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
        self.flush()
        for _ in range(_SEAL_RETRIES):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(self.keys.staging(batch_no))
            parse = self.shelves.add_reads(pipe, [batch_no])
            replies = pipe.execute()
            write = self._prepare_seal(parse(replies[1:])[batch_no], replies[0], extra)
            if isinstance(write, bool):
                return write
            if write is not None and self._write_seals([write], tier):
                return True
        raise RuntimeError(f"batch {batch_no}: gave up sealing after {_SEAL_RETRIES} conflicts")

    def seal_many(self, batches: dict[int, list[ArchivedPartition]], tier: Tier | None = None) -> int:
        """Seal several batches with records in hand (a bulk import): their blobs and staging are
        read in one round trip, each batch is encoded once and all are written in one more; a
        batch changed meanwhile is sealed again on its own."""
        pipe = self.redis.pipeline(transaction=False)
        reads = self.queue_reads(pipe, batches, {p.worker_id for parts in batches.values() for p in parts})
        return self.seal_read(batches, reads(pipe.execute(raise_on_error=False)), tier)

    def queue_reads(
        self, pipe: Any, numbers: Iterable[int], worker_ids: set[str], unwritten: UnwrittenSeals | None = None
    ) -> Callable[[Sequence[Any]], SealReads]:
        """Queue on ``pipe`` what sealing these batches reads (their staging and slots, and the
        check of the workers' numbers), after the bookkeeping owed and the writes of ``unwritten``;
        the function returned takes the replies from the first of these commands on and gives what
        was read, the workers registered."""
        numbers = sorted(numbers)
        cleaned, cleanup = self._queue_cleanup(pipe) if self._bookkeeping else (0, None)
        written, writes = self._queue_writes(pipe, unwritten) if unwritten else (0, None)
        skip = cleaned + written
        for b in numbers:
            pipe.hgetall(self.keys.staging(b))
        parse = self.shelves.add_reads(pipe, numbers)
        register = self.workers.queue_register(pipe, worker_ids)
        # the pipeline is run with raise_on_error=False (a deferred cleanup's script may be unknown)

        def finish(replies: Sequence[Any]) -> SealReads:
            if cleanup is not None:
                cleanup(replies)
            if writes is not None:
                writes(replies[cleaned:])
            replies = replies[skip:]
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            stored = parse(replies[len(numbers) :])
            register(replies[-1])  # the workers in hand checked and registered once here
            return SealReads(dict(zip(numbers, replies, strict=False)), stored)

        return finish

    def seal_read(
        self,
        batches: dict[int, list[ArchivedPartition]],
        reads: SealReads,
        tier: Tier | None,
        *,
        defer: UnwrittenSeals | None = None,
    ) -> int:
        """`seal_many` once its reads are in: the batches encoded and written, a batch changed
        since it was read sealed again on its own; returns the batches sealed. ``defer``: they are
        encoded into it, written when it is handed to `queue_reads` or `flush`, their bookkeeping
        with the round trip after, and counted as sealed."""
        tier = tier or self.tier()
        writes: list[_SealWrite] = []
        again = []
        for b in sorted(batches):
            write = self._prepare_seal(reads.stored[b], reads.staged[b], batches[b], verify_workers=False)
            if isinstance(write, _SealWrite):
                writes.append(write)
            elif write is None:
                again.append(b)
        resealed = sum(self.seal(b, tier, batches[b]) for b in again)
        if defer is not None:
            if writes:
                defer.groups.append((writes, tier, False))
            return len(writes) + resealed
        written = self._write_seals(writes, tier)
        refused = [w for w in writes if w.batch_no not in written]
        return len(written) + resealed + sum(self.seal(w.batch_no, tier, w.extra) for w in refused)

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
    ) -> _SealWrite | bool | None:
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
    ) -> _SealWrite:
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
        return _SealWrite(
            stored.batch_no,
            stored,
            staged or {},
            new_blob,
            archived_json_bytes(merged) - before,
            len(new_blob) - len(stored.blob or b""),
            max(p.completed_at for p in merged),
            extra,
        )

    def _write_seals(self, writes: list[_SealWrite], tier: Tier | None) -> set[int]:
        """Write the new blobs into their shelves (a script call per shelf, one round trip), then
        for those not refused the bookkeeping (`_queue_cleanup`), one more. Returns the sealed."""
        if not writes:
            return set()
        already_there: set[int] = set()
        written = self.shelves.write(
            [SlotWrite(w.batch_no, w.stored.slot, w.blob, w.stored.legacy) for w in writes], already_there
        )
        self._written(_uncounted(writes, already_there), written, tier or self.tier())
        self.flush()
        return written

    def _written(self, writes: list[_SealWrite], written: set[int], tier: Tier) -> None:
        """Seals whose slots were written: counted, their bookkeeping queued (`_queue_cleanup`)
        under the next number of this process's groups (`seal_bookkeeping.lua`)."""
        done = [w for w in writes if w.batch_no in written]
        for w in done:
            self.seals[w.batch_no] += 1
        if done:
            self._group = max(self._group + 1, time.time_ns() // 1000)
            self._bookkeeping.append((done, tier, self._group))

    def _queue_writes(self, pipe: Any, unwritten: UnwrittenSeals) -> tuple[int, Callable[[Sequence[Any]], None]]:
        """Queue on ``pipe`` the slot writes of the seals `seal_read` deferred into ``unwritten``;
        the function returned takes their replies, queues the bookkeeping of those written and
        seals again, now, each batch refused (changed since it was read)."""
        pending = list(unwritten.groups)  # left there until written: a pipeline that fails is sent again
        unwritten.groups[: len(pending)] = [(group, tier, True) for group, tier, _ in pending]
        writes = [(w, tier) for group, tier, _ in pending for w in group]
        already_there: set[int] = set()
        count, finish = self.shelves.queue_write(
            pipe, [SlotWrite(w.batch_no, w.stored.slot, w.blob, w.stored.legacy) for w, _ in writes], already_there
        )

        def written(replies: Sequence[Any]) -> None:
            done = finish(replies[:count])
            for w, tier in writes:
                if w.batch_no not in done:
                    self.seal(w.batch_no, tier, w.extra)
            del unwritten.groups[: len(pending)]  # every one written, or sealed again
            for group, tier, sent in pending:
                self._written(group if sent else _uncounted(group, already_there), done, tier)

        return count, written

    def flush(self, unwritten: UnwrittenSeals | None = None, *, bookkeeping: bool = True) -> None:
        """Write the seals of ``unwritten`` and do the bookkeeping of every seal written (unless
        not ``bookkeeping``), now."""
        if unwritten:
            pipe = self.redis.pipeline(transaction=False)
            _, written = self._queue_writes(pipe, unwritten)
            written(pipe.execute(raise_on_error=False))
        if self._bookkeeping and bookkeeping:
            pipe = self.redis.pipeline(transaction=False)
            _, finish = self._queue_cleanup(pipe)
            finish(pipe.execute(raise_on_error=False))

    def _queue_cleanup(self, pipe: Any) -> tuple[int, Callable[[Sequence[Any]], None]]:
        """Queue on ``pipe`` the bookkeeping of the seals written so far: delete the staged records
        they hold (where unchanged), keep the open-batch set, byte counters and expiry index. The
        function returned takes the replies from the first of these commands on (the pipeline run
        with ``raise_on_error=False``); returned with how many replies those commands take.

        Deferred, this is harmless: until it runs, a sealed record is also still staged, as it
        is after a crash between the two (the next seal of its batch merges the same record)."""
        seals = list(self._bookkeeping)  # left there until done: a pipeline that fails is sent again
        done = [w for group, _, _ in seals for w in group]
        k = self.keys
        counted: list[Any] = [self._process, _COUNTED_KEPT_US, len(seals)]
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
        cleanups, cleaned = self._scripts.queue_calls(pipe, calls)
        pipe.zrem(k.open_batches, *(str(w.batch_no) for w in done))
        for w in done:  # staged into since read: the batch stays open (the stager's ZADD may be gone)
            pipe.hlen(k.staging(w.batch_no))
        count = cleanups + 1 + len(done)

        def finish(all_replies: Sequence[Any]) -> None:
            replies = all_replies[:count]
            late = any(isinstance(reply, NoScriptError) for reply in replies[:cleanups])
            script_error(cleaned(replies)[-1], meta_key=k.archive_meta, unchanged="no bookkeeping was counted")
            for reply in replies[cleanups:]:
                if isinstance(reply, Exception):
                    raise reply
            del self._bookkeeping[: len(seals)]  # only now: sent again, the counting script counts nothing twice
            left = replies[len(replies) - len(done) :]
            if late:  # a cleanup ran after the HLENs (the server had lost its script): read them again
                left = [self.redis.hlen(self.keys.staging(w.batch_no)) for w in done]
            reopened = {str(w.batch_no): int(time.time() * 1000) for w, n in zip(done, left, strict=True) if n}
            if reopened:
                self.redis.zadd(self.keys.open_batches, reopened)  # type: ignore[arg-type]

        return count, finish

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


def _uncounted(writes: list[_SealWrite], already_there: set[int]) -> list[_SealWrite]:
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

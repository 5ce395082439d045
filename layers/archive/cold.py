"""The cold tier: a summary-tier batch's detail written to a cold store as Parquet before it leaves
Redis, and read from there once it has.

Configured with ``run --cold-store PATH|URL`` (`layers.archive.cold_store`), the expiry sweep
(`layers.archive.transitions.sweep_expired`, under the maintenance lock) becomes `ColdTier.step`:

1. The batches whose retention has passed (the expiry index) are gathered until a file's worth
   (``file_batches``) is due or the oldest has waited ``gather_s``; their blobs are read and decoded.
2. A batch some cold file already holds (`KeySchema.cold_map`) is merged with that file's rows of it
   (a straggler sealed after its batch went cold); one whose records that file already holds as they
   are (a step that died after recording) is only deleted below.
3. The rows go into one new file, numbered once per namespace (``cold_next``), written under a
   temporary name, fsynced and renamed (`ColdStore.write`). While the last file written is small
   (under half of ``file_batches``), the new file takes its batches too and retires it: the number of
   files follows the data, not the number of sweeps.
4. ``cold_record.lua`` records it: every batch's entry in the cold map points at it, all or nothing,
   and only if each entry is still the one read in 2.
5. Only then are the batches deleted from Redis, each only if its slot still holds the blob read
   (a batch sealed again meanwhile waits for the next step).

A kill -9 anywhere loses nothing (Redis keeps a batch until its file is durable and recorded) and
records nothing twice (a batch's entry names one file; a file written and not recorded is an
orphan, deleted by the next step, as are temporary files and retired files once no reader can be
on its way to them). A cold store that cannot be written keeps the batches in Redis, noted in the
archive meta (``cold_error``, shown by ``status``), and is tried again after a backoff.

Readers (the query router, ``find``, ``export``) find a batch's file with one GETRANGE of the cold
map and read the one row group that can hold a partition (`ColdStore.rows_between`). A file's rows of
a batch count only while the map points at that file.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from codec import ArchivedPartition, DecodeError
from layers.archive.cold_store import ColdStore, name_of, number_of
from layers.archive.places import batch_of
from layers.archive.shelves import StoredBatch
from layers.errors import ColdFileDamaged, ColdStoreUnavailable
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.roundtrip import RoundTrip
from layers.plumbing.scripts import Scripts

if TYPE_CHECKING:
    from layers.archive.layer import ArchiveLayer



def _log() -> Any:
    """The cold tier's logger (structlog is imported on first use: a reader that only shows the cold
    tier's state starts without it)."""
    import structlog

    return structlog.get_logger("partarchive.cold")

#: Batches whose cold map entries one GETRANGE reads (4 bytes each: 64 KiB).
MAP_SPAN = 16384
#: Retired files are deleted this long after a newer file took their batches (a lookup that read
#: the map before can still open them meanwhile).
RETIRED_GRACE_S = 60.0
#: Orphans (files not recorded, temporary files) are looked for at a step at most this often.
ORPHANS_EVERY_S = 600.0
_BACKOFF_S = (5.0, 30.0, 120.0, 600.0)
#: The archive meta's fields about the cold tier (``status`` reads them).
COLD_FIELDS = ("cold_store", "cold_bytes", "cold_partitions", "cold_written_at", "cold_error", "cold_last")


def add_map_reads(pipe: Any, keys: KeySchema, numbers: Sequence[int]) -> Any:
    """Add to ``pipe`` the reads of these batches' cold map entries (a GETRANGE per run of up to
    `MAP_SPAN` batch numbers); the function returned takes the replies, in order, and gives batch
    -> file number (0: none) for each."""
    wanted = sorted(set(numbers))
    spans: list[tuple[int, int]] = []
    for b in wanted:
        if spans and b - spans[-1][0] < MAP_SPAN:
            spans[-1] = (spans[-1][0], b)
        else:
            spans.append((b, b))
    for first, last in spans:
        pipe.getrange(keys.cold_map, 4 * first, 4 * last + 3)

    def parse(replies: Sequence[Any]) -> dict[int, int]:
        out: dict[int, int] = {}
        at = 0
        for (first, last), raw in zip(spans, replies, strict=False):
            raw = bytes(raw or b"")
            while at < len(wanted) and wanted[at] <= last:
                offset = 4 * (wanted[at] - first)
                out[wanted[at]] = int.from_bytes(raw[offset : offset + 4], "big") if offset + 4 <= len(raw) else 0
                at += 1
        return out

    parse.count = len(spans)  # type: ignore[attr-defined]
    return parse


@dataclass(slots=True)
class _Batch:
    number: int
    stored: StoredBatch
    records: dict[int, ArchivedPartition]  # what Redis holds of it, by pid
    file: int  # the cold file its map entry names (0: none)


class ColdTier:
    """One namespace's cold tier, written by the archiver that has taken the maintenance lock (`step`)."""

    def __init__(
        self,
        archive: ArchiveLayer,
        store: ColdStore,
        *,
        file_batches: int = 1024,
        gather_s: float = 300.0,
        clock: Any = time.time,
    ) -> None:
        self.archive = archive
        self.store = store
        self.keys = archive.keys
        self.file_batches = file_batches
        self.gather_s = gather_s
        self._clock = clock
        self._scripts = Scripts.of(archive.redis)
        self._failures = 0
        self._resume_at = 0.0  # after a failure of the store: monotonic time of the next try
        self._orphans_at = 0.0  # monotonic time of the next look for orphans

    def fault_point(self, where: str) -> None:
        """A seam for the crash tests (``cold_written``: the file renamed, not recorded;
        ``cold_recorded``: recorded, the batches still in Redis); `tests.faults` pauses there."""

    def check(self) -> None:
        """At the archiver's start: the store can be written (`ColdStoreUnavailable` if not), and
        the archive meta names where it is (without a password)."""
        self.store.check_writable()
        self.archive.redis.hset(self.keys.archive_meta, "cold_store", self.store.base_location)

    def step(self, now: float | None = None) -> int:
        """One bounded step (see the module's docstring); returns the partitions it moved out of
        Redis or recorded (at least 1 when it did anything), 0 when nothing was due. A store that
        fails is noted in the archive meta and tried again after a backoff, never raised: archiving
        goes on meanwhile, and the batches wait in Redis."""
        if time.monotonic() < self._resume_at:
            return 0
        try:
            done = self._step(self._clock() if now is None else now)
        except ColdStoreUnavailable as exc:
            delay = _BACKOFF_S[min(self._failures, len(_BACKOFF_S) - 1)]
            self._failures += 1
            self._resume_at = time.monotonic() + delay
            self.archive.redis.hset(self.keys.archive_meta, mapping={"cold_error": str(exc)[:500]})
            _log().warning("cold store unavailable; expired batches stay in Redis", error=str(exc), retry_in_s=delay)
            return 0
        self._failures = 0
        return done

    def _step(self, now: float) -> int:
        if time.monotonic() >= self._orphans_at:
            self._orphans_at = time.monotonic() + ORPHANS_EVERY_S
            self.delete_orphans()
        done = self._delete_retired(now)
        due = self._due(now)
        if not due:
            return done
        batches = self._read(due)
        taken, covered, rows_before = self._merge(batches)
        if taken:
            merged_from = self._small_last(len(taken))
            files = {b.number: b.file for b in batches}
            if not self._write(taken, files, rows_before, merged_from, now):
                return 1
        done += self._expire([b for b in batches if b.number in taken or b.number in covered])
        return max(done, 1)

    def _due(self, now: float) -> list[int]:
        """The batches to take now: their retention has passed, and a file's worth is due or the
        oldest has waited ``gather_s``."""
        r, keys = self.archive.redis, self.keys
        retention = self.archive.retention_s()
        cutoff = int(now) - retention
        raw: Any = r.zrangebyscore(keys.expiry, "-inf", cutoff, start=0, num=self.file_batches, withscores=True)
        if not raw:
            return []
        if len(raw) < self.file_batches and float(raw[0][1]) + retention + self.gather_s > now:
            return []
        return sorted(int(b) for b, _ in raw)

    def _read(self, numbers: list[int]) -> list[_Batch]:
        """The due batches as Redis and the cold map hold them; corrupt blobs quarantined (their
        partitions stay counted in the statistics), as the sweep without a cold store does."""
        archive = self.archive
        out: list[_Batch] = []
        for start in range(0, len(numbers), 256):
            chunk = numbers[start : start + 256]
            trip = RoundTrip.on(archive.redis)
            parse_map = add_map_reads(trip.commands, self.keys, chunk)
            shelves = archive.shelves.add_reads(trip, chunk)
            replies = trip.commands.execute()
            trip.hand(replies)
            files = parse_map(replies[: parse_map.count])
            stored = shelves.value
            for b in chunk:
                records: dict[int, ArchivedPartition] = {}
                for blob in (stored[b].legacy, stored[b].slot):  # the shelf's wins
                    if blob is None:
                        continue
                    try:
                        records.update((p.partition_id, p) for p in archive.sealing.decode_batch(blob))
                    except DecodeError as exc:
                        archive.redis.set(self.keys.quarantine(b), blob)
                        archive.dead_letters.note(f"batch:{b}", f"corrupt batch blob quarantined at expiry: {exc}")
                out.append(_Batch(b, stored[b], records, files[b]))
        return out

    def _merge(self, batches: list[_Batch]) -> tuple[dict[int, list[ArchivedPartition]], set[int], int]:
        """What the new file takes (batch -> records), the batches a file already holds as Redis
        holds them, and the rows the taken ones had in their earlier files."""
        taken: dict[int, list[ArchivedPartition]] = {}
        covered: set[int] = set()
        rows_before = 0
        by_file: dict[int, list[_Batch]] = defaultdict(list)
        for b in batches:
            if b.file:
                by_file[b.file].append(b)
            elif b.records:
                taken[b.number] = [b.records[p] for p in sorted(b.records)]
            else:
                covered.add(b.number)  # nothing left in Redis: only its bookkeeping goes
        size = self.archive.policy.batch_size
        for number, group in sorted(by_file.items()):
            lo, hi = group[0].number * size, (group[-1].number + 1) * size - 1
            try:
                filed = self.store.rows_between(name_of(number), lo, hi).records()
            except ColdFileDamaged as exc:
                # the batch's earlier rows cannot be read: it stays in Redis until they can, named in status
                self.archive.redis.hset(self.keys.archive_meta, "cold_error", str(exc)[:500])
                _log().warning("a cold file cannot be read; its batches stay in Redis", error=str(exc))
                continue
            cold: dict[int, dict[int, ArchivedPartition]] = defaultdict(dict)
            for p in filed:
                cold[batch_of(p.partition_id, size)][p.partition_id] = p
            for b in group:
                mine = cold.get(b.number, {})
                if all(mine.get(pid) == rec for pid, rec in b.records.items()):
                    covered.add(b.number)
                    continue
                merged = mine | b.records
                taken[b.number] = [merged[p] for p in sorted(merged)]
                rows_before += len(mine)
        return taken, covered, rows_before

    def _small_last(self, adding: int) -> tuple[int, dict[str, Any]] | None:
        """The last file written, while it is small enough to take into the new one."""
        r, keys = self.archive.redis, self.keys
        last = r.hget(keys.archive_meta, "cold_last")
        if last is None:
            return None
        raw = r.hget(keys.cold_files, as_text(last))
        if raw is None:
            return None
        record = orjson.loads(raw)
        if record.get("batches", 0) * 2 >= self.file_batches or record.get("batches", 0) + adding > self.file_batches:
            return None
        return int(as_text(last)), record

    def _write(
        self,
        taken: dict[int, list[ArchivedPartition]],
        files_read: dict[int, int],
        rows_before: int,
        merged_from: tuple[int, dict[str, Any]] | None,
        now: float,
    ) -> bool:
        """Write and record the new file; False if the record was refused (the file is deleted)."""
        from codec.parquet import Rows, encode_file

        r, keys, size = self.archive.redis, self.keys, self.archive.policy.batch_size
        expected = {b: files_read[b] for b in taken}
        retired: list[tuple[int, str, int]] = []
        rows = Rows.empty()
        if merged_from is not None:
            number, record = merged_from
            try:
                table = self.store.rows_between(record["name"], record["first_pid"], record["last_pid"])
                pipe = r.pipeline(transaction=False)
                parse = add_map_reads(pipe, keys, sorted({batch_of(p, size) for p in table.pids}))
                files = parse(pipe.execute())
            except ColdFileDamaged as exc:
                _log().warning("the last cold file cannot be read: a new file is started", error=str(exc))
            else:
                live = {b for b, f in files.items() if f == number and b not in taken}
                keep = [i for i, p in enumerate(table.pids) if batch_of(p, size) in live]
                rows = Rows(*([column[i] for i in keep] for column in table.columns()))
                expected.update(dict.fromkeys(live, number))
                rows_before += len(keep)
                retired.append((number, record["name"], int(record.get("bytes", 0))))
        for b in taken:
            rows.extend(Rows.of(taken[b]))
        rows = rows.sorted()
        number = int(r.hincrby(keys.archive_meta, "cold_next", 1))  # type: ignore[arg-type]
        data = encode_file(rows, {"partarchive.namespace": keys.namespace, "partarchive.batch_size": str(size)})
        name = self.store.write(number, data)
        self.fault_point("cold_written")
        record = {
            "name": name,
            "rows": len(rows),
            "bytes": len(data),
            "batches": len(expected),
            "first_pid": rows.pids[0],
            "last_pid": rows.pids[-1],
            "first_at": min(rows.times),
            "last_at": max(rows.times),
            "written_at": int(now),
        }
        args: list[Any] = [number, orjson.dumps(record), name, len(data), len(rows) - rows_before, int(now)]
        args.append(len(retired))
        for item in retired:
            args += list(item)
        for b in sorted(expected):
            args += [b, expected[b]]
        record_keys = [keys.cold_map, keys.cold_files, keys.cold_retired, keys.archive_meta]
        reply = self._scripts("cold_record", record_keys, args)
        script_error(reply, meta_key=keys.archive_meta, unchanged="the cold file was not recorded")
        if as_text(reply[0]) != "ok":
            _log().warning("cold file not recorded: its batches changed meanwhile", file=name)
            self.store.delete(name)
            return False
        self.fault_point("cold_recorded")
        return True

    def _expire(self, batches: list[_Batch]) -> int:
        """Delete from Redis the batches a recorded file now holds (each only if unchanged)."""
        from layers.archive.transitions import drop_batches

        stored = {b.number: b.stored for b in batches}
        return drop_batches(self.archive, stored, {b.number: len(b.records) for b in batches})

    def _delete_retired(self, now: float) -> int:
        r, keys = self.archive.redis, self.keys
        raw: Any = r.zrangebyscore(keys.cold_retired, "-inf", now - RETIRED_GRACE_S, start=0, num=100)
        for name in raw:
            self.store.delete(as_text(name))
            r.zrem(keys.cold_retired, name)
        return len(raw)

    def delete_orphans(self) -> int:
        """Delete the store's files no record names (a writer died between writing and recording)
        and the temporary files of writers that died; returns how many."""
        r, keys = self.archive.redis, self.keys
        pipe = r.pipeline(transaction=False)
        pipe.hget(keys.archive_meta, "cold_next")
        pipe.hkeys(keys.cold_files)
        pipe.zrange(keys.cold_retired, 0, -1)
        top, recorded, retired = pipe.execute()
        names, temps = self.store.listing()
        known = {name_of(int(as_text(n))) for n in recorded} | {as_text(n) for n in retired}
        highest = int(top or 0)
        orphans = [n for n in names if n not in known and (number_of(n) or 0) <= highest] + temps
        for name in orphans:
            self.store.delete(name)
        if orphans:
            _log().info("deleted cold files no record names", files=len(orphans))
        return len(orphans)

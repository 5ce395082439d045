"""``partarchive export``: every archived partition as JSON Lines, or into a Redis hash.

``elk`` gives each partition as elk_coordinator's PartitionInfo: a partition that still has
its whole Go record (simple tier, staging) comes back byte for byte; one from a sealed batch or
the cold store comes back with the fields a batch keeps (id, range, worker, ``updated_at`` =
completion, ``created_at`` = completion - duration, in whole seconds, UTC) and Go's zero values
for the rest. ``native`` gives partarchive's archived form; ``parquet`` (`archiver.parquet_export`)
the archived fields as Parquet files by completion day. Records stream out in constant memory
(plus one bit per partition id, so a partition met twice, during a tier move or while a batch is
both in Redis and in the cold store, is written once). The cold store's files are read last, each
whole, keeping the rows of the batches the cold map gives them (`layers.archive.cold`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, Any

import redis

from codec import ArchivedPartition, DecodeError
from codec.elk import ElkRecord, archived_as_elk
from codec.stored import as_archived, parse_archived
from layers import ArchiveLayer
from layers.archive.cold import add_map_reads
from layers.archive.cold_store import ColdReads, name_of
from layers.archive.places import batch_of
from layers.errors import ColdFileDamaged, ColdStoreUnavailable
from layers.plumbing.replies import as_text
from layers.plumbing.settings import stored_int

FORMATS = ("elk", "native", "parquet")
_SCAN = 1000


def _render(fmt: str, raw: bytes | None, rec: ArchivedPartition | ElkRecord) -> bytes:
    if fmt == "native":
        return as_archived(rec).to_json()
    if isinstance(rec, ElkRecord):
        return raw if raw is not None else rec.to_json()
    return archived_as_elk(rec).to_json()


class Exporter:
    def __init__(self, archive: ArchiveLayer, fmt: str, cold: ColdReads | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(fmt)
        self.archive = archive
        self.cold = cold or ColdReads(None, archive.keys.namespace)
        self.redis: redis.Redis = archive.redis
        self.fmt = fmt
        self.skipped: list[str] = []

    def records(self) -> Iterator[tuple[int, bytes]]:
        """(pid, line) for every archived partition with detail: simple hash, staging, batches, cold store."""
        for pid, raw, rec in self.parts():
            yield pid, _render(self.fmt, raw, rec)

    def parts(self) -> Iterator[tuple[int, bytes | None, ArchivedPartition | ElkRecord]]:
        """(pid, stored JSON if any, record) for every archived partition with detail, each once."""
        keys = self.archive.keys
        max_pid = stored_int(keys.archive_meta, "max_pid", self.redis.hget(keys.archive_meta, "max_pid"), default=0)
        seen = bytearray((max_pid >> 3) + 1)

        def first(pid: int) -> bool:
            if pid >> 3 >= len(seen):
                seen.extend(bytes((pid >> 3) + 1 - len(seen)))
            if seen[pid >> 3] & (1 << (pid & 7)):
                return False
            seen[pid >> 3] |= 1 << (pid & 7)
            return True

        def stored(where: str, raw: bytes) -> Iterator[tuple[int, bytes | None, ArchivedPartition | ElkRecord]]:
            try:
                rec = parse_archived(raw)
            except DecodeError as exc:
                self.skipped.append(f"{where}: {exc}")
                return
            if first(rec.partition_id):
                yield rec.partition_id, raw, rec

        for fld, raw in self.redis.hscan_iter(keys.completed, count=_SCAN):
            yield from stored(f"simple:{as_text(fld)}", raw)
        open_batches: Any = self.redis.zrange(keys.open_batches, 0, -1)
        for batch_no in open_batches:
            for fld, raw in self.redis.hscan_iter(keys.staging(int(batch_no)), count=_SCAN):
                yield from stored(f"staging:{as_text(fld)}", raw)
        last_batch = self.archive.policy.batch_of(max_pid)
        for start in range(0, last_batch + 1, 128):
            sealed = self.archive.shelves.read(range(start, min(last_batch + 1, start + 128)), repair=False)
            for b, batch in sorted(sealed.items()):
                if batch.damaged:
                    self.skipped.append(f"batch:{b}: {batch.damaged}")
                for blob in batch.blobs:
                    try:
                        parts = self.archive.sealing.decode_batch(blob)
                    except DecodeError as exc:
                        self.skipped.append(f"batch:{b}: {exc}")
                        continue
                    for part in parts:
                        if first(part.partition_id):
                            yield part.partition_id, None, part
        for part in self._cold():
            if first(part.partition_id):
                yield part.partition_id, None, part

    def _cold(self) -> Iterator[ArchivedPartition]:
        """The rows of the cold store's files, each file's rows of the batches the cold map gives it."""
        keys, size = self.archive.keys, self.archive.stored_batch_size()
        files: Any = self.redis.hgetall(keys.cold_files)
        if not files:
            return
        location = self.redis.hget(keys.archive_meta, "cold_store")
        try:
            store = self.cold.store(None if location is None else as_text(location))
            from codec.parquet import rows_of  # the cold extra: the store above needs it too
        except ColdStoreUnavailable as exc:
            self.skipped.append(f"cold store: {exc}")
            return
        for number in sorted(int(as_text(n)) for n in files):
            try:
                rows = rows_of(store.read_file(name_of(number)))
            except (ColdFileDamaged, DecodeError) as exc:
                self.skipped.append(f"cold file {name_of(number)}: {exc}")
                continue
            pipe = self.redis.pipeline(transaction=False)
            parse = add_map_reads(pipe, keys, sorted({batch_of(p, size) for p in rows.pids}))
            owner = parse(pipe.execute())
            for part in rows.records():
                if owner.get(batch_of(part.partition_id, size)) == number:
                    yield part

    def to_file(self, out: IO[bytes], progress: Callable[[int], None] | None = None) -> int:
        count = 0
        for _, line in self.records():
            out.write(line + b"\n")
            count += 1
            if progress and count % 1000 == 0:
                progress(1000)
        return count

    def into_hash(self, client: redis.Redis, key: str) -> int:
        """HSET ``key`` pid -> record (e.g. Go's ``elk_archived``: the rollback); refuses a non-hash key."""
        kind = as_text(client.type(key))
        if kind not in ("none", "hash"):
            from layers import WrongKeyType

            raise WrongKeyType(f"{key} is a {kind}, not a hash")
        count = 0
        pipe = client.pipeline(transaction=False)
        for pid, line in self.records():
            pipe.hset(key, str(pid), line)
            count += 1
            if count % _SCAN == 0:
                pipe.execute()
        pipe.execute()
        return count

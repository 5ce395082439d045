"""Bulk writers that put N completed partitions into Redis in each storage scheme.

The compressed tier is written in its final, sealed state (what `BatchSealing.seal` leaves:
one framed blob per batch in its shelf, the index bitmap, the worker registry, the archive meta hash), in
bulk, because pushing millions of partitions through the queue one by one would measure the
benchmark's patience rather than the storage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson
import redis

from codec import ArchivedPartition, encode_blob, encode_text
from codec.framing import SHELF_SLOTS, pack_shelf, shelved, unpack_shelf
from layers import KeySchema, TierPolicy, WorkerRegistrar
from layers.archive.places import batch_of, shelf_of, slot_of

PIPELINE = 2000


def _chunks(items: Iterable[ArchivedPartition], size: int) -> Iterator[list[ArchivedPartition]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def original_json(part: ArchivedPartition) -> bytes:
    """The original scheme's full PartitionInfo JSON (Go field names and RFC 3339 times), ~370 bytes."""
    return orjson.dumps(
        {
            "partition_id": part.partition_id,
            "min_id": part.min_id,
            "max_id": part.max_id,
            "worker_id": part.worker_id,
            "status": "completed",
            "version": 4,
            "error": "",
            "options": {"index": "elk-logs-2024.06.24", "query": "level:error", "size": 500},
            "created_at": "2024-06-24T09:12:45.123456789+08:00",
            "updated_at": "2024-06-24T13:06:45.987654321+08:00",
            "last_heartbeat": "2024-06-24T13:06:40.555555555+08:00",
        }
    )


def write_original(client: redis.Redis, keys: KeySchema, parts: Iterable[ArchivedPartition]) -> float:
    """Returns the average JSON size."""
    total = count = 0
    for chunk in _chunks(parts, PIPELINE):
        docs = {str(p.partition_id): original_json(p) for p in chunk}
        total += sum(map(len, docs.values()))
        count += len(docs)
        client.hset(keys.active, mapping=docs)  # type: ignore[arg-type]
    return total / max(count, 1)


def write_simple(client: redis.Redis, keys: KeySchema, parts: Iterable[ArchivedPartition]) -> None:
    for chunk in _chunks(parts, PIPELINE):
        pipe = client.pipeline(transaction=False)
        pipe.hset(keys.completed, mapping={str(p.partition_id): p.to_json() for p in chunk})  # type: ignore[arg-type]
        _set_bits(pipe, keys, chunk)
        pipe.execute()


def write_text_batches(
    client: redis.Redis, keys: KeySchema, parts: Iterable[ArchivedPartition], batch_size: int
) -> None:
    registry = WorkerRegistrar(client, keys)
    for batches in _chunks_of_batches(parts, batch_size):
        pipe = client.pipeline(transaction=False)
        for batch_no, records in batches:
            workers = registry.register(r.worker_id for r in records)
            pipe.set(keys.batch(batch_no), encode_text(records, workers))
            _set_bits(pipe, keys, records)
        pipe.execute()


def write_compressed(
    client: redis.Redis,
    keys: KeySchema,
    parts: Iterable[ArchivedPartition],
    policy: TierPolicy,
    *,
    expire: bool = False,
) -> int:
    registry = WorkerRegistrar(client, keys)
    total = max_pid = 0
    for batches in _chunks_of_batches(parts, policy.batch_size, SHELF_SLOTS):
        pipe = client.pipeline(transaction=False)
        shelves: dict[int, list[bytes | None]] = {}
        for batch_no, records in batches:
            workers = registry.register(r.worker_id for r in records)
            shelf_no, slot = shelf_of(batch_no), slot_of(batch_no)
            shelves.setdefault(shelf_no, [None] * SHELF_SLOTS)[slot] = shelved(encode_blob(records, workers))
            if expire:  # the summary tier: the batch joins the expiry index
                pipe.zadd(keys.expiry, {str(batch_no): max(r.completed_at for r in records)})
            _set_bits(pipe, keys, records)
            total += len(records)
            max_pid = max(max_pid, records[-1].partition_id)
        for shelf_no, slots in shelves.items():
            pipe.set(keys.shelf(shelf_no), _merged_shelf(client, keys, shelf_no, slots))
        pipe.execute()
    tier = policy.tier_for(total).value
    client.hset(
        keys.archive_meta,
        mapping={
            "total": total,
            "tier": tier,
            "batch_size": policy.batch_size,
            "max_pid": max_pid,
            "expire_cursor": policy.batch_of(max_pid) + 1,
            "retention_s": policy.retention_s,  # the stored policy every reader applies
            "shelved": 1,  # written in shelves: no batch keys of older versions to move
        },
    )
    return total


def _merged_shelf(client: redis.Redis, keys: KeySchema, shelf_no: int, slots: list[bytes | None]) -> bytes:
    """The shelf with ``slots`` written over what it already holds (a group may end mid-shelf)."""
    held: Any = client.get(keys.shelf(shelf_no))
    if held is not None:
        slots = [new or old for new, old in zip(slots, unpack_shelf(held), strict=True)]
    return pack_shelf(slots)


def _set_bits(pipe: redis.client.Pipeline, keys: KeySchema, records: list[ArchivedPartition]) -> None:
    """SETBIT for a run of records, as BITFIELD calls of up to 200 bits each."""
    for start in range(0, len(records), 200):
        args: list[object] = []
        for r in records[start : start + 200]:
            args += ["SET", "u1", r.partition_id, 1]
        pipe.execute_command("BITFIELD", keys.index, *args)


def _chunks_of_batches(
    parts: Iterable[ArchivedPartition], batch_size: int, per_pipeline: int = 64
) -> Iterator[list[tuple[int, list[ArchivedPartition]]]]:
    group: list[tuple[int, list[ArchivedPartition]]] = []
    current: list[ArchivedPartition] = []
    current_no = -1
    for part in parts:
        batch_no = batch_of(part.partition_id, batch_size)
        if batch_no != current_no and current:
            group.append((current_no, current))
            current = []
            if len(group) >= per_pipeline:
                yield group
                group = []
        current_no = batch_no
        current.append(part)
    if current:
        group.append((current_no, current))
    if group:
        yield group


def write_stats(
    client: redis.Redis,
    keys: KeySchema,
    parts: Iterable[ArchivedPartition],
    policy: TierPolicy,
    range_width: int = 1000,
    chunk: int = 5000,
) -> None:
    """The statistics keys for ``parts``, applied by the commit script as a flush would.

    The partitions are not counted again in the index (the writers above set it), so the
    commit is given no entries, only the statistics updates. It applies the tier rule of
    ``policy``, which must be the storage writer's: under another one the commit would move the
    stored tier (the default policy takes a million partitions to the summary tier).
    """
    from layers import ArchiveLayer
    from stats.rollup import committer as archive_committer

    committer = archive_committer(ArchiveLayer(client, keys, policy), range_width)
    committer.check_statistics()
    for records in _chunks(parts, chunk):
        committer.statistics_only(records)


def write_cold(
    client: redis.Redis,
    keys: KeySchema,
    parts: Iterable[ArchivedPartition],
    store_url: str,
    policy: TierPolicy,
    file_batches: int = 1024,
) -> int:
    """N partitions as the cold tier leaves them once their batches have gone cold: Parquet files in
    the store (written as `layers.archive.cold` writes them, ``file_batches`` batches each), recorded
    in the cold map and the files hash, the index bits set, the archive meta naming the store, and
    nothing of them left in Redis's batches. Returns the files written."""
    from codec.parquet import Rows, encode_file
    from layers.archive.cold_store import ColdStore

    store = ColdStore(store_url, keys.namespace)
    store.check_writable()
    per_file = file_batches * policy.batch_size
    files = total = max_pid = 0
    rows_bytes = 0
    for chunk in _chunks(parts, per_file):
        files += 1
        rows = Rows.of(chunk)
        data = encode_file(rows)
        name = store.write(files, data)
        batches = sorted({p // policy.batch_size for p in rows.pids})
        record = {"name": name, "rows": len(rows), "bytes": len(data), "batches": len(batches),
                  "first_pid": rows.pids[0], "last_pid": rows.pids[-1], "first_at": min(rows.times),
                  "last_at": max(rows.times), "written_at": 0}  # fmt: skip
        pipe = client.pipeline(transaction=False)
        for start in range(0, len(batches), 500):
            args: list[object] = []
            for b in batches[start : start + 500]:
                args += ["SET", "u32", f"#{b}", files]
            pipe.execute_command("BITFIELD", keys.cold_map, *args)
        pipe.hset(keys.cold_files, str(files), orjson.dumps(record))
        for start in range(0, len(chunk), PIPELINE):
            _set_bits(pipe, keys, chunk[start : start + PIPELINE])
        pipe.execute()
        total += len(rows)
        rows_bytes += len(data)
        max_pid = max(max_pid, rows.pids[-1])
    client.hset(
        keys.archive_meta,
        mapping={
            "total": total,
            "tier": "summary",
            "batch_size": policy.batch_size,
            "max_pid": max_pid,
            "expire_cursor": policy.batch_of(max_pid) + 1,
            "retention_s": policy.retention_s,
            "shelved": 1,
            "cold_store": store.base_location,
            "cold_next": files,
            "cold_last": files,
            "cold_bytes": rows_bytes,
            "cold_partitions": total,
            "expired": total,
        },
    )
    return files

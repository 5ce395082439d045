"""Migrate section: importing an elk_coordinator deployment of 1M completed partitions.

Two sources, each synthesised from the standard workload in Go's exact bytes: ``elk_archived``
(one PartitionInfo JSON per partition, +08:00 times with nanoseconds) and
``elk_compressed_archive`` (Go's gzip'd binary batches of 50,000, workers numbered by the zset).
One process runs ``migrate from-elk --delete-source`` into a namespace whose tier policy keeps
the compressed tier (summary above 10^12), so the after-figure is what the compressed tier
costs rather than expired detail. Redis memory is the growth of used_memory over an empty
baseline, per partition. ``BENCH_MIGRATE_SIZE`` changes the size (default 1,000,000).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import orjson
import redis

from archiver.config import Config
from archiver.elk.migrate import ElkMigration
from bench.engine import bench_engine, drop, settle, used_memory
from bench.populate import _chunks
from bench.report import table
from bench.workload import standard_workload
from codec.elk import ElkRecord
from codec.elk_batch import encode_elk_batch
from codec.gojson import GoTime
from layers.keys import ElkKeys

TARGET_RATE = 30_000
NS = "benchmig"
PREFIX = "benchmig:"
GO_BATCH = 50_000


def _go_records(n: int) -> Iterator[ElkRecord]:
    for p in standard_workload(n):
        created = GoTime(p.completed_at - p.duration - 7, 366410794, 8 * 3600)
        updated = GoTime(p.completed_at, 623456807, 8 * 3600)
        beat = GoTime(p.completed_at - 30, 123456789, 8 * 3600)
        yield ElkRecord(
            p.partition_id, p.min_id, p.max_id, p.worker_id, beat, "completed", updated, None, 5, "", created
        )


def _load_archived(client: redis.Redis, n: int) -> None:
    key = ElkKeys(PREFIX).archived
    for chunk in _chunks(_go_records(n), 5000):  # type: ignore[arg-type]
        client.hset(key, mapping={str(r.partition_id): r.to_json() for r in chunk})  # type: ignore[attr-defined,arg-type]


def _load_batches(client: redis.Redis, n: int) -> None:
    keys = ElkKeys(PREFIX)
    workers = [f"worker{i}" for i in range(1, 33)]
    registered = "2024-06-01T00:00:00+08:00"
    members = {orjson.dumps({"worker_id": w, "register_time": registered}): i for i, w in enumerate(workers)}
    client.zadd(keys.workers, members)  # type: ignore[arg-type]
    number = {w: i + 1 for i, w in enumerate(workers)}
    for k, chunk in enumerate(_chunks(_go_records(n), GO_BATCH)):  # type: ignore[arg-type]
        blob = encode_elk_batch([(r, number[r.worker_id]) for r in chunk])  # type: ignore[attr-defined]
        client.hset(keys.compressed, f"compressed_batch_bench{k:04d}_1751699399019", blob)


def _one(client: redis.Redis, n: int, load: object) -> tuple[float, float, float, float, float, bool]:
    drop(client, NS)
    for key in client.scan_iter(match=f"elk:{PREFIX}*"):
        client.delete(key)
    settle(client)
    baseline = used_memory(client)
    load(client, n)  # type: ignore[operator]
    settle(client)
    loaded = used_memory(client)
    config = Config(namespace=NS, summary_above=10**12)
    started = time.perf_counter()
    report = ElkMigration(client, config, PREFIX).run(delete_source=True)
    elapsed = time.perf_counter() - started
    settle(client)
    after = used_memory(client)
    ok = report.ok and report.imported == n and report.verified == n
    drop(client, NS)
    for key in client.scan_iter(match=f"elk:{PREFIX}*"):
        client.delete(key)
    return (
        n / report.import_s,
        n / elapsed,
        (loaded - baseline) / n,
        (after - baseline) / n,
        report.import_s,
        ok,
    )


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_MIGRATE_SIZE", "1000000"))
    rows = []
    ok = True
    with bench_engine() as (client, engine):
        for name, load in (("elk_archived (Go JSON)", _load_archived), ("compressed batches (gzip)", _load_batches)):
            import_rate, total_rate, before, after, import_s, good = _one(client, n, load)
            ok = ok and good and import_rate >= TARGET_RATE
            rows.append((name, n, round(import_rate), round(total_rate), round(import_s, 1), before, after,
                         "yes" if good else "NO"))
    out = table(
        f"migrate: import of an elk_coordinator deployment, one process, {engine}",
        ["source", "completed", "import /s", "end to end /s", "import s", "B/p before", "B/p after", "exact"],
        rows,
    )
    out += (
        "import = reading the source, writing detail, counting statistics and sealing every batch once;\n"
        "end to end adds the survey, the verification pass and deleting the source.\n"
        "B/p = used_memory growth per partition over an empty baseline: before = the Go source,\n"
        "after = partarchive's compressed tier + index + statistics, the source deleted.\n"
        f"target: import >= {TARGET_RATE:,}/s, memory from the Go source down to the compressed tier: "
        + ("met" if ok else "MISSED")
        + "\n"
    )
    return out, ok

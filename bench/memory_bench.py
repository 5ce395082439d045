"""Memory section: Redis ``used_memory`` per completed partition, by storage scheme.

Each scheme is written into an empty namespace and measured as the growth of the engine's
``INFO memory`` used_memory, divided by the number of partitions. Standard workload.
"""

from __future__ import annotations

import os
import time

import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from bench.engine import bench_engine, drop, used_memory
from bench.populate import write_compressed, write_original, write_simple, write_stats, write_text_batches
from bench.report import table
from bench.workload import standard_workload
from layers import ActiveLayer, KeySchema, TierPolicy

SIZES = (100_000, 500_000, 1_000_000, 5_000_000)
TARGET_ARCHIVE = 2.5
TARGET_STATS = 1.5
NS = "benchmem"


def _measure(client: redis.Redis, write: object, n: int) -> float:
    drop(client, NS)
    time.sleep(0.5)
    before = used_memory(client)
    write(n)  # type: ignore[operator]
    after = used_memory(client)
    return (after - before) / n


def _live_layers(client: redis.Redis, n: int) -> tuple[int, int]:
    """With n archived: 1,000 active partitions and 2,000 completions through queue and archiver.

    Returns (active hash bytes, archive stream bytes) from MEMORY USAGE.
    """
    keys = KeySchema(NS)
    client.hset(keys.meta, "last_pid", n)
    active = ActiveLayer(client, NS)
    active.create_partitions(1, 3_000_000, 1000)
    for _ in range(2000):
        part = active.claim("bench")
        assert part is not None
        active.complete(part.partition_id, "bench")
    config = Config(namespace=NS, block_ms=10, seal_idle_s=0, maintenance_interval_s=0)
    daemon = ArchiverDaemon(client, config, consumer="bench")
    daemon.queue.ensure_group()
    drain(daemon)
    return int(client.memory_usage(keys.active) or 0), int(client.memory_usage(keys.queue) or 0)


def _verdict(sizes: list[int], met: bool) -> str:
    if 1_000_000 not in sizes:
        return "not measured (1M not in BENCH_MEMORY_SIZES)"
    return "met" if met else "MISSED"


def run() -> tuple[str, bool]:
    sizes = [int(s) for s in os.environ.get("BENCH_MEMORY_SIZES", "").split(",") if s] or list(SIZES)
    policy = TierPolicy()
    keys = KeySchema(NS)
    rows = []
    ok = archive_ok = stats_ok = False
    with bench_engine() as (client, engine):
        for n in sizes:
            avg_json = [0.0]

            def original(count: int, avg: list[float] = avg_json) -> None:
                avg[0] = write_original(client, keys, standard_workload(count))

            orig = _measure(client, original, n)
            simple = _measure(client, lambda c: write_simple(client, keys, standard_workload(c)), n)
            text = _measure(
                client, lambda c: write_text_batches(client, keys, standard_workload(c), policy.batch_size), n
            )
            compressed = _measure(client, lambda c: write_compressed(client, keys, standard_workload(c), policy), n)
            before = used_memory(client)
            write_stats(client, keys, standard_workload(n), policy)
            stats = (used_memory(client) - before) / n
            active_bytes, stream_bytes = _live_layers(client, n)
            drop(client, NS)
            rows.append(
                (n, avg_json[0], orig, simple, text, compressed, stats, compressed + stats, active_bytes, stream_bytes)
            )
            if n == 1_000_000:
                archive_ok, stats_ok = compressed <= TARGET_ARCHIVE, stats <= TARGET_STATS
                ok = archive_ok and stats_ok
    out = table(
        f"memory: used_memory growth per completed partition (B/p), standard workload, batches of 100, {engine}",
        [
            "completed",
            "orig JSON B",
            "original",
            "simple",
            "seed text",
            "compressed",
            "stats",
            "compr+stats",
            "active hash B",
            "stream B",
        ],
        rows,
    )
    out += (
        "original = every partition's full JSON in one hash; simple = elk_completed JSON + index; "
        "seed text = P{pid}:... batches + index;\n"
        "compressed = framed columnar batches in shelves of 64 + index + worker registry. "
        "active hash = 1,000 active partitions; stream = archive queue after 2,000 completions were archived.\n"
        f"targets at 1M: compressed (archive + index) <= {TARGET_ARCHIVE} B/p: "
        + _verdict(sizes, archive_ok)
        + f"; statistics <= {TARGET_STATS} B/p: "
        + _verdict(sizes, stats_ok)
        + "\n"
    )
    return out, ok

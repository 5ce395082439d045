"""Statistics section: stats() latency as completed partitions grow; Redis round trips per 1,000 archived."""

from __future__ import annotations

import os

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from bench.engine import bench_engine, drop
from bench.populate import write_compressed, write_stats
from bench.report import median, p99, sample_us, table
from bench.workload import standard_workload
from layers import ActiveLayer, KeySchema, TierPolicy
from stats import StatsReader
from tests.helpers import complete_partitions

TARGET_US = 2000.0
TARGET_ROUND_TRIPS = 10.0


def run() -> tuple[str, bool]:
    sizes = [int(s) for s in os.environ.get("BENCH_STATS_SIZES", "10000,1000000").split(",") if s]
    rows = []
    ok = True
    with bench_engine() as (client, engine):
        for n in sizes:
            ns = "benchstats"
            drop(client, ns)
            keys = KeySchema(ns)
            write_compressed(client, keys, standard_workload(n), TierPolicy())
            write_stats(client, keys, standard_workload(n), TierPolicy())
            ActiveLayer(client, ns).create_partitions(1, 1_000_000, 1000)
            reader = StatsReader(client, ns)
            assert reader.stats()["completed"]["total_completed"] == n
            samples = sample_us(reader.stats, 2000)
            ok = ok and p99(samples) < TARGET_US
            rows.append((f"stats(), {n:,} completed", len(samples), median(samples), p99(samples)))
            drop(client, ns)
        ns = "benchflush"
        drop(client, ns)
        count = 10_000
        complete_partitions(client, ns, count)
        daemon = ArchiverDaemon(client, Config(namespace=ns, block_ms=10), consumer="bench")
        drain(daemon)
        per_thousand = daemon.commit_buffer.committer.round_trips / (count / 1000)
        ok = ok and per_thousand <= TARGET_ROUND_TRIPS
        drop(client, ns)
    out = table(f"statistics, {engine}", ["operation", "samples", "median us", "p99 us"], rows)
    out += (
        f"statistics round trips per 1,000 archived partitions (flush every 100): {per_thousand:.1f} "
        f"({daemon.commit_buffer.flushes} flushes for {count:,})\n"
        f"targets: stats() p99 < {TARGET_US:.0f} us at every size; <= {TARGET_ROUND_TRIPS:.0f} round trips per "
        f"1,000: {'met' if ok else 'MISSED'}\n"
    )
    return out, ok

"""Scrape section: one ``/metrics`` scrape of a namespace bound to an elk_coordinator deployment,
at 10,000 and at 1M active partitions (Go's records, pending), read in process
(`archiver.metrics.LayerStateCollector`, what ``serve`` and ``run --metrics-port`` answer).

A scrape reads the namespace in one round trip (`archiver.snapshot`), its active partitions counted
by their indexes, which the daemon's maintenance rebuilds from Go's hash every adopt interval: it
takes the same time whatever the number of partitions. (Before issue 47 it rebuilt them itself,
from the whole hash, at every scrape.) ``BENCH_SCRAPE_SIZES`` changes the sizes.
"""

from __future__ import annotations

import os

import redis

from archiver.metrics import LayerStateCollector
from bench.engine import bench_engine, drop
from bench.report import median, p99, sample_us, table
from layers import ActiveLayer, ArchiveLayer, KeySchema

NS = "benchscrape"
ELK_PREFIX = "benchscrape-app:"
RUNS = 50
#: The largest size's median may be this much above the smallest's and still count as independent of it.
TOLERANCE = 1.5


def run() -> tuple[str, bool]:
    sizes = [int(s) for s in os.environ.get("BENCH_SCRAPE_SIZES", "10000,1000000").split(",")]
    rows, medians = [], []
    with bench_engine() as (client, engine):
        keys = KeySchema(NS, elk_prefix=ELK_PREFIX)
        for size in sizes:
            _drop(client, keys)
            active = ActiveLayer(client, keys)
            for first in range(0, size, 200_000):
                count = min(200_000, size - first)
                active.create_partitions(first * 100 + 1, (first + count) * 100, 100)
            collector = LayerStateCollector(ArchiveLayer(client, keys))
            list(collector.collect())  # the first builds what later scrapes reuse
            times = sample_us(lambda collector=collector: list(collector.collect()), RUNS)
            medians.append(median(times))
            rows.append([f"{size:,}", client.hlen(keys.active), median(times) / 1000, p99(times) / 1000])
        _drop(client, keys)
    independent = medians[-1] <= medians[0] * TOLERANCE
    verdict = (
        f"a scrape at {sizes[-1]:,} takes {medians[-1] / medians[0]:.2f}x the one at {sizes[0]:,}: "
        + ("independent of the number of partitions (met)" if independent else "MISSED")
    )
    title = f"metrics scrape of a bound namespace, medians of {RUNS}, {engine}"
    return table(title, ["active partitions", "in Go's hash", "scrape ms p50", "scrape ms p99"], rows) + verdict, (
        independent
    )


def _drop(client: redis.Redis, keys: KeySchema) -> None:
    """The namespace's keys, which are under Go's prefix, and Go's own."""
    drop(client, NS)
    for pattern in keys.patterns():
        for chunk in _chunks(list(client.scan_iter(match=pattern, count=5000))):
            client.delete(*chunk)
    client.delete(keys.active, *keys.go_stats)


def _chunks(items: list[bytes], size: int = 5000) -> list[list[bytes]]:
    return [items[i : i + size] for i in range(0, len(items), size)]

"""Pressure section: a burst of completions in the compressed tier, drained with compression skipped
(a critical backlog, `layers.control.pressure`), against the simple tier's rate; then the seal-up, and the
memory per partition once it is done.

Each run drains the same N queued completions (the archiver section's workload) with one archiver
in this process, three times:

  simple       a namespace in the simple tier: the rate to match
  compressed   the compressed tier, compression never skipped (the mode off)
  skipping     the compressed tier with the mode on from the first page (the backlog has been
               critical for the 10 s it takes), drained; then the seal-up (the lock holder seals
               every batch stored unsealed once the backlog is under the low-water mark), timed

Targets: skipping drains at >= 0.95x the simple tier's rate; after the seal-up the namespace's
keys take no more than with the compressed tier's usual drain (5 % allowed: the same sealed
batches). Memory is shown two ways: the server's used_memory over the empty namespace (as the
memory section measures a tier), and the sum of MEMORY USAGE over the namespace's keys, which
client buffers and the allocator's state do not move, so two drains compare.
The ratio is the median of the runs' ratios (the machine's speed drifts between runs).
``BENCH_PRESSURE_SIZE`` (default 1,000,000) and ``BENCH_PRESSURE_RUNS`` (default 3).
"""

from __future__ import annotations

import os
import time

import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon
from bench.archiver_bench import fill_queue
from bench.engine import bench_engine, drop, redis_cpu_us, settle, used_memory
from bench.report import median, table
from layers import KeySchema

NS = "benchpress"
RATE_TARGET = 0.95
MEMORY_TOLERANCE = 0.05


def _config(kind: str) -> Config:
    never = {"skip_compression_backlog": 0, "skip_compression_age_s": 0}
    at_once = {"skip_compression_for_s": 0}
    tiers = {"simple": (10**12, never), "compressed": (0, never), "skipping": (0, at_once)}
    compressed_from, pressure = tiers[kind]
    return Config(namespace=NS, compressed_from=compressed_from, summary_above=10**12, block_ms=10, **pressure)


def _drain(daemon: ArchiverDaemon) -> float:
    """Seconds until every queued entry is archived and committed."""
    client, queue = daemon.archive.redis, daemon.keys.queue
    started = time.perf_counter()
    while int(client.xlen(queue)) > daemon.commit_buffer.buffered:  # type: ignore[arg-type]
        daemon.run_once()
    daemon.flush()
    return time.perf_counter() - started


def _seal_up(daemon: ArchiverDaemon) -> float:
    """Seconds until the lock holder has sealed everything stored unsealed."""
    client, keys = daemon.archive.redis, daemon.keys
    started = time.perf_counter()
    while client.hlen(keys.completed) or client.zcard(keys.unsealed):
        daemon.run_once()
    return time.perf_counter() - started


def _bytes_per_partition(
    client: redis.Redis, daemon: ArchiverDaemon, baseline: int, n: int
) -> tuple[float, float]:
    """used_memory over the empty namespace, and the namespace's keys (MEMORY USAGE), per partition."""
    daemon.archive.sealing.seal_all()  # batches a page left partly staged: sealed as they would be once idle
    settle(client)
    return (used_memory(client) - baseline) / n, _key_bytes(client) / n


def _key_bytes(client: redis.Redis) -> int:
    """What the namespace's keys take (MEMORY USAGE of each, every element counted): unlike
    used_memory, not moved by client buffers and other namespaces, so two runs compare."""
    total = 0
    for pattern in KeySchema(NS).patterns():
        for key in client.scan_iter(match=pattern, count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)  # type: ignore[arg-type]
    return total


def _one_run(client: redis.Redis, n: int) -> dict[str, float]:
    got: dict[str, float] = {}
    keys = KeySchema(NS)
    for kind in ("simple", "skipping", "compressed"):  # the two compared, back to back
        drop(client, NS)
        baseline = used_memory(client)
        fill_queue(client, keys, n)
        daemon = ArchiverDaemon(client, _config(kind), consumer="bench")
        daemon.queue.ensure_group()
        daemon.maintain(force=True)  # takes the maintenance lock; for `skipping`, turns the mode on
        assert daemon.backlog.skipping == (kind == "skipping")
        usec = redis_cpu_us(client)
        got[f"{kind} /s"] = n / _drain(daemon)
        got[f"{kind} us/p"] = (redis_cpu_us(client) - usec) / n
        if kind == "skipping":
            settle(client)
            got["unsealed B/p"] = (used_memory(client) - baseline) / n
            got["seal-up /s"] = n / _seal_up(daemon)
        got[f"{kind} B/p"], got[f"{kind} key B/p"] = _bytes_per_partition(client, daemon, baseline, n)
        daemon.release_lock()
    drop(client, NS)
    return got


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_PRESSURE_SIZE", "1000000"))
    runs = int(os.environ.get("BENCH_PRESSURE_RUNS", "3"))
    with bench_engine() as (client, engine):
        results = [_one_run(client, n) for _ in range(runs)]
    pick = {name: median([r[name] for r in results]) for name in results[0]}
    ratios = [r["skipping /s"] / r["simple /s"] for r in results]
    ratio = median(ratios)
    memory = pick["skipping key B/p"] / pick["compressed key B/p"]
    rate_ok, memory_ok = ratio >= RATE_TARGET, memory <= 1 + MEMORY_TOLERANCE
    rows = [
        ("simple tier", round(pick["simple /s"]), "1.00x", round(pick["simple us/p"], 2), round(pick["simple B/p"], 2),
         "-", "the yardstick"),
        ("compressed, compression skipped", round(pick["skipping /s"]), f"{ratio:.2f}x",
         round(pick["skipping us/p"], 2), round(pick["unsealed B/p"], 2), "-",
         f">= {RATE_TARGET}x: {'met' if rate_ok else 'MISSED'}"),
        ("  then the seal-up", round(pick["seal-up /s"]), "-", "-", round(pick["skipping B/p"], 2),
         round(pick["skipping key B/p"], 2),
         f"{memory:.2f}x the compressed tier's, <= {1 + MEMORY_TOLERANCE}x: {'met' if memory_ok else 'MISSED'}"),
        ("compressed, mode off", round(pick["compressed /s"]), f"{pick['compressed /s'] / pick['simple /s']:.2f}x",
         round(pick["compressed us/p"], 2), round(pick["compressed B/p"], 2), round(pick["compressed key B/p"], 2),
         "-"),
    ]  # fmt: skip
    out = table(
        f"pressure: a burst of {n:,} queued completions, one archiver, median of {runs} run(s), {engine}",
        ["drain", "partitions/s", "vs simple", "Redis CPU us/p", "B/partition", "its keys B/p", "target"],
        rows,
    )
    out += (
        "B/partition: used_memory over the empty namespace per partition, after the drain (while skipping: before\n"
        "the seal-up, records unsealed in the simple hash; after it: sealed batches), lazy frees settled; its keys:\n"
        "MEMORY USAGE of the namespace's keys (index, shelves, statistics, ...), what the target compares. Redis CPU\n"
        "us/p: the server's CPU time (INFO cpu) per entry drained. Seal-up: records sealed per second once the\n"
        "backlog is gone (one archiver holding the maintenance lock, nothing else to do).\n"
        f"ratio by run: {' '.join(f'{r:.2f}' for r in ratios)}\n"
    )
    return out, rate_ok and memory_ok

"""Tiers section: the simple -> compressed move, live archiving during it, and the expiry sweep.

* move: 1M records in the simple hash (standard workload) moved into sealed batches by one
  process calling `migrate_step` until it is done; seconds, rate, and the most seals any
  batch got (1 = each batch sealed once).
* live: an archiver draining 50,000 new completions from the queue, first with nothing to move
  (compressed tier), then while the 1M-record move is pending; the ratio of the two rates.
* sweep: 1M archived in sealed batches in the summary tier, 1% of the batches past their
  retention; the sweep's duration and cost per expired partition, which must not grow with
  what is stored.

``BENCH_TIERS_SIZE`` changes the size (default 1,000,000).
"""

from __future__ import annotations

import os
import time

import orjson
import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon
from bench.engine import bench_engine, drop
from bench.populate import write_compressed, write_simple
from bench.report import table
from bench.workload import standard_workload
from layers import ArchiveLayer, ArchiveQueue, KeySchema, Tier, TierPolicy, migrate_step
from layers.archive.transitions import sweep_expired

NS = "benchtiers"
LIVE = 50_000
TARGET_MOVE_S = 60.0
TARGET_LIVE_RATIO = 0.8


def _simple_tier(client: redis.Redis, keys: KeySchema, n: int) -> None:
    write_simple(client, keys, standard_workload(n))
    client.hset(keys.archive_meta, mapping={"total": n, "max_pid": n, "tier": Tier.SIMPLE.value, "batch_size": 100})


def _move(client: redis.Redis, n: int) -> tuple[float, int]:
    drop(client, NS)
    keys = KeySchema(NS)
    _simple_tier(client, keys, n)
    client.hset(keys.archive_meta, "tier", Tier.COMPRESSED.value)
    layer = ArchiveLayer(client, keys, TierPolicy(summary_above=10**12))
    started = time.perf_counter()
    while migrate_step(layer):
        pass
    elapsed = time.perf_counter() - started
    assert layer.simple_size() == 0
    return elapsed, max(layer.sealing.seals.values())


def _queue_completions(client: redis.Redis, keys: KeySchema, first: int) -> None:
    queue = ArchiveQueue(client, keys)
    queue.ensure_group()
    pipe = client.pipeline(transaction=False)
    for i, part in enumerate(standard_workload(LIVE, first=first)):
        pipe.xadd(keys.queue, {"p": orjson.dumps(part._asdict())})
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()


def _live_rate(client: redis.Redis, n: int, *, moving: bool) -> tuple[float, int]:
    """Completions archived per second while draining LIVE queued ones; and what the move did meanwhile."""
    drop(client, NS)
    keys = KeySchema(NS)
    if moving:
        _simple_tier(client, keys, n)
    else:
        client.hset(keys.archive_meta, mapping={"total": n, "max_pid": n, "batch_size": 100})
    client.hset(keys.archive_meta, "tier", Tier.COMPRESSED.value)
    _queue_completions(client, keys, n + 1)
    config = Config(namespace=NS, summary_above=10**12, block_ms=5, seal_idle_s=0, stats_flush_interval_s=1)
    daemon = ArchiverDaemon(client, config, consumer="bench")
    left_before = int(client.hlen(keys.completed))  # type: ignore[arg-type]
    started = time.perf_counter()
    while client.xlen(keys.queue):
        daemon.run_once()
    elapsed = time.perf_counter() - started
    daemon.flush()
    daemon.release_lock()
    moved = left_before - int(client.hlen(keys.completed))  # type: ignore[arg-type]
    return LIVE / elapsed, moved


def _sweep(client: redis.Redis, n: int) -> tuple[float, int, int]:
    drop(client, NS)
    keys = KeySchema(NS)
    policy = TierPolicy(compressed_from=0, summary_above=0, retention_s=86400)
    write_compressed(client, keys, standard_workload(n), policy, expire=True)
    layer = ArchiveLayer(client, keys, policy)
    batches = int(client.zcard(keys.expiry))  # type: ignore[arg-type]
    expiring = max(1, batches // 100)
    oldest: list[tuple[bytes, float]] = client.zrange(keys.expiry, 0, expiring - 1, withscores=True)  # type: ignore[assignment]
    now = oldest[-1][1] + policy.retention_s + 1  # 1% of the batches are past their retention
    started = time.perf_counter()
    expired = 0
    while step := sweep_expired(layer, now=now):
        expired += step
    elapsed = time.perf_counter() - started
    assert int(client.zcard(keys.expiry)) == batches - expiring  # type: ignore[arg-type]
    return elapsed, expired, batches


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_TIERS_SIZE", "1000000"))
    with bench_engine() as (client, engine):
        move_s, max_seals = _move(client, n)
        before, _ = _live_rate(client, n, moving=False)
        during, moved = _live_rate(client, n, moving=True)
        sweep_s, expired, batches = _sweep(client, n)
        drop(client, NS)
    ratio = during / before
    ok = move_s <= TARGET_MOVE_S and ratio >= TARGET_LIVE_RATIO and max_seals == 1
    rows = [
        ("move simple -> compressed", f"{n:,} records", f"{move_s:.1f} s", f"{n / move_s:,.0f}/s",
         f"seals per batch <= {max_seals}"),
        ("archive rate, nothing to move", f"{LIVE:,} entries", "", f"{before:,.0f}/s", ""),
        ("archive rate, move pending", f"{LIVE:,} entries", "", f"{during:,.0f}/s",
         f"{ratio:.0%} of before; {moved:,} moved meanwhile"),
        ("expiry sweep, 1% expiring", f"{n:,} stored, {batches:,} batches", f"{sweep_s * 1000:.0f} ms",
         f"{sweep_s / max(expired, 1) * 1e6:.1f} us/partition", f"{expired:,} expired"),
    ]
    out = table(f"tiers: transitions and expiry, one process, {engine}", ["what", "size", "time", "rate", "note"], rows)
    out += (
        f"targets: move <= {TARGET_MOVE_S:.0f} s, live rate during the move >= {TARGET_LIVE_RATIO:.0%} of before, "
        "each batch sealed once: " + ("met" if ok else "MISSED") + "\n"
    )
    return out, ok

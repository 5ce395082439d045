"""Tier transitions on the real engine: ordered once-per-batch moves, the maintenance lock, retention."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis

from archiver import ArchiverDaemon, Config, QueryRouter, Source
from archiver.daemon.loop import drain
from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, Tier, TierPolicy, migrate_step
from layers.archive.transitions import transition_state
from layers.control.maintenance import MaintenanceLock
from stats import StatsChecker, StatsReader
from tests.helpers import archive_now, complete_partitions, start_archiver, wait_for

NOW = int(time.time())


def records(first: int, count: int, completed_at: int = NOW) -> list[ArchivedPartition]:
    return [
        ArchivedPartition(p, (p - 1) * 1000 + 1, p * 1000, f"worker{p % 7}", completed_at - p % 50, 300)
        for p in range(first, first + count)
    ]


def fill_simple_tier(client: redis.Redis, keys: KeySchema, parts: list[ArchivedPartition], junk: int = 0) -> None:
    """The simple tier as archiving leaves it (records, index bits, total), in bulk; with ``junk``
    extra fields added and deleted again, so the hash table is large and mostly empty."""
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(parts), 5000):
        chunk = parts[start : start + 5000]
        pipe.hset(keys.completed, mapping={str(p.partition_id): p.to_json() for p in chunk})  # type: ignore[arg-type]
        for p in chunk:
            pipe.setbit(keys.index, p.partition_id, 1)
        pipe.execute()
    for start in range(0, junk, 5000):
        fields = {f"junk:{i}": b"x" * 40 for i in range(start, min(junk, start + 5000))}
        client.hset(keys.completed, mapping=fields)  # type: ignore[arg-type]
    for start in range(0, junk, 5000):
        client.hdel(keys.completed, *[f"junk:{i}" for i in range(start, min(junk, start + 5000))])
    client.hset(
        keys.archive_meta,
        mapping={"total": len(parts), "max_pid": max(p.partition_id for p in parts), "tier": "simple"},
    )


def everything_in_one_place(client: redis.Redis, layer: ArchiveLayer, parts: list[ArchivedPartition]) -> None:
    q = QueryRouter(client, layer.keys, policy=layer.policy)
    assert layer.simple_size() == 0 and layer.open_batch_count() == 0
    stored: dict[int, ArchivedPartition] = {}
    for b in range(layer.policy.batch_of(max(p.partition_id for p in parts)) + 1):
        blob = layer.batch_blob(b)
        for p in layer.sealing.decode_batch(blob) if blob else []:  # type: ignore[arg-type]
            assert p.partition_id not in stored
            stored[p.partition_id] = p
    assert stored == {p.partition_id: p for p in parts}
    for p in parts[:: max(1, len(parts) // 200)]:
        assert q.get(p.partition_id).source is Source.BATCH


def test_move_finishes_over_a_sparse_hash_and_seals_each_batch_once(real_redis: redis.Redis, namespace: str) -> None:
    layer = ArchiveLayer(real_redis, KeySchema(namespace), TierPolicy(compressed_from=1000, summary_above=10**9))
    parts = records(1, 30_000)
    fill_simple_tier(real_redis, layer.keys, parts, junk=60_000)  # once a page of HSCAN 0 could come back empty
    assert layer.tier() is Tier.COMPRESSED
    steps = 0
    while migrate_step(layer):
        steps += 1
    everything_in_one_place(real_redis, layer, parts)
    assert steps >= 300 / 20 and set(layer.sealing.seals.values()) == {1} and len(layer.sealing.seals) == 301
    state = transition_state(layer)
    assert state.simple_left == 0 and state.moved == 30_000 and state.move_cursor > state.last_batch


def test_stragglers_behind_the_cursor_are_moved_in_order(real_redis: redis.Redis, namespace: str) -> None:
    layer = ArchiveLayer(real_redis, KeySchema(namespace), TierPolicy(compressed_from=1000, summary_above=10**9))
    parts = records(1, 3000)
    fill_simple_tier(real_redis, layer.keys, parts[:2000])
    while migrate_step(layer):
        pass
    # an archiver that read the tier just before it changed writes into the simple hash
    late = [*parts[2000:], ArchivedPartition(5, 4001, 5000, "late", NOW, 1)]
    real_redis.hset(layer.keys.completed, mapping={str(p.partition_id): p.to_json() for p in late})  # type: ignore[arg-type]
    for p in late:
        real_redis.setbit(layer.keys.index, p.partition_id, 1)
    while migrate_step(layer):
        pass
    assert layer.simple_size() == 0
    batch0 = {p.partition_id: p for p in layer.sealing.decode_batch(layer.batch_blob(0))}  # type: ignore[arg-type]
    assert batch0[5].worker_id == "late" and len(batch0) == 99
    assert QueryRouter(real_redis, layer.keys, policy=layer.policy).get(2999).source is Source.BATCH


@pytest.mark.chaos
def test_kill_9_mid_move_then_resume(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    ArchiveQueue(real_redis, keys).ensure_group()
    parts = records(1, 20_000)
    fill_simple_tier(real_redis, keys, parts)
    victim = start_archiver(
        engine_url, namespace, pauses={"after_step": 0.2}, PARTARCHIVE_COMPRESSED_FROM="1000"
    )
    try:
        wait_for(lambda: real_redis.hlen(keys.completed) < 15_000, timeout=60, what="part of the move")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    left = int(real_redis.hlen(keys.completed))  # type: ignore[arg-type]
    assert 0 < left < 15_000
    assert real_redis.get(keys.maintenance_lock) is not None  # the dead holder's lock, expiring by itself
    layer = ArchiveLayer(real_redis, keys, TierPolicy(compressed_from=1000))
    while migrate_step(layer):
        pass
    everything_in_one_place(real_redis, layer, parts)
    assert max(layer.sealing.seals.values()) == 1  # the resumed move seals each remaining batch once
    assert int(real_redis.bitcount(keys.index)) == 20_000  # type: ignore[arg-type]


def test_one_lock_holder_renewed_released_and_taken_over(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    a = MaintenanceLock(real_redis, keys, "a", ttl_s=60)
    b = MaintenanceLock(real_redis, keys, "b", ttl_s=60)
    assert a.acquire() and not b.acquire() and a.acquire()  # acquire again = renew
    assert b.release() is False and a.holder_now() == "a"
    assert a.release() and b.acquire() and not a.acquire()
    assert MaintenanceLock(real_redis, keys, "b", ttl_s=0.2).renew()  # b's last renewal, then b dies
    wait_for(a.acquire, what="b's lock expired and taken over")
    assert a.holder_now() == "a"


def test_two_replicas_race_and_only_one_maintains(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    parts = records(1, 6000)
    fill_simple_tier(real_redis, keys, parts)
    config = Config(namespace=namespace, compressed_from=1000, summary_above=10**9, maintenance_interval_s=0)
    daemons = [ArchiverDaemon(real_redis, config, consumer=f"r{i}") for i in range(2)]
    holders: list[int] = []

    def replica(d: ArchiverDaemon) -> None:
        d.queue.ensure_group()
        for _ in range(200):
            d.maintain(force=True)
            holders.append(sum(x.has_lock for x in daemons))
            if not real_redis.hlen(keys.completed):
                return

    threads = [threading.Thread(target=replica, args=(d,)) for d in daemons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(holders) == 1
    assert sum(d.has_lock for d in daemons) == 1
    layer = ArchiveLayer(real_redis, keys, config.policy)
    everything_in_one_place(real_redis, layer, parts)
    moved_by = [d for d in daemons if d.archive.sealing.seals]
    assert len(moved_by) == 1 and max(moved_by[0].archive.sealing.seals.values()) == 1


def test_live_completions_during_the_move_land_in_the_right_tier(real_redis: redis.Redis, namespace: str) -> None:
    config = Config(
        namespace=namespace,
        compressed_from=3000,
        summary_above=10**9,
        seal_idle_s=0,
        maintenance_interval_s=0,
        stats_flush_interval_s=0.1,
        block_ms=20,
    )
    daemon = ArchiverDaemon(real_redis, config, consumer="live")
    daemon.queue.ensure_group()
    first = complete_partitions(real_redis, namespace, 2900)
    drain(daemon)
    assert daemon.archive.tier() is Tier.SIMPLE and daemon.archive.simple_size() == 2900
    second = complete_partitions(real_redis, namespace, 3000)  # crosses the threshold: the move starts
    drain(daemon)
    assert daemon.archive.tier() is Tier.COMPRESSED
    pids = first + second
    q = QueryRouter(real_redis, daemon.keys, policy=config.policy)
    assert {q.get(p).source for p in pids} == {Source.BATCH}
    assert daemon.archive.simple_size() == 0
    assert StatsReader(real_redis, daemon.keys).stats()["completed"]["total_completed"] == 5900
    assert StatsChecker(real_redis, daemon.keys, policy=config.policy).check().ok


def test_retention_changed_at_run_time(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    layer = ArchiveLayer(real_redis, keys, TierPolicy(compressed_from=0, summary_above=0, retention_s=3 * 3600))
    ArchiveQueue(real_redis, keys).ensure_group()
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in records(1, 299, completed_at=NOW - 7200)])
    layer.sealing.seal_all()
    assert layer.tier() is Tier.SUMMARY
    while migrate_step(layer):  # batches sealed while the tier was still compressed join the expiry index
        pass
    assert real_redis.zcard(keys.expiry) == 3 and layer.batch_blob(1)
    q = QueryRouter(real_redis, keys, policy=layer.policy)
    assert q.get(150).source is Source.BATCH
    assert layer.set_retention(3600) == 3600  # every reader and the sweep use the stored policy at once
    answer = q.get(150)
    assert answer.source is Source.EXPIRED and answer.degraded
    while migrate_step(layer):
        pass
    assert real_redis.zcard(keys.expiry) == 0 and not real_redis.exists(keys.shelf(0))
    assert int(real_redis.hget(keys.archive_meta, "expired")) == 299  # type: ignore[arg-type]
    assert real_redis.getbit(keys.index, 150) == 1 and layer.archived_total() == 299


def test_statistics_keep_their_own_retention(real_redis: redis.Redis, namespace: str) -> None:
    from stats import StatsCompactor
    from stats.rollup import commit_buffer

    keys = KeySchema(namespace)
    layer = ArchiveLayer(real_redis, keys, TierPolicy())
    ArchiveQueue(real_redis, keys).ensure_group()
    acc = commit_buffer(layer, flush_count=10_000, range_width=100)
    old, young = NOW - 40 * 86400, NOW - 3600
    parts = [
        ArchivedPartition(p, p * 10, p * 10 + 9, f"w{p % 3}", (old if p <= 1000 else young) + p, 5)
        for p in range(1, 1201)
        if not 950 <= p < 960
    ]
    layer.write_detail(parts)
    acc.add([("-", p) for p in parts])  # "-": no queue entry to acknowledge
    acc.flush()
    reader = StatsReader(real_redis, keys)
    before_day = reader.time_series(time.strftime("%Y-%m-%d", time.gmtime(old + 500)))
    assert before_day["level"] == "hourly" and before_day["total"] > 0
    compactor = StatsCompactor(real_redis, keys, range_width=100, hourly_keep_days=30, range_keep_days=30)
    steps = 0
    while compactor.step(now=NOW):
        steps += 1
    assert steps > 0
    day = reader.time_series(time.strftime("%Y-%m-%d", time.gmtime(old + 500)))
    assert day["level"] == "daily" and day["hourly_completion"] is None and day["total"] == before_day["total"]
    assert reader.time_series(time.strftime("%Y-%m-%d", time.gmtime(young + 1100)))["level"] == "hourly"
    assert not real_redis.exists(keys.stats_range(5)) and real_redis.exists(keys.stats_range(11))
    merged = reader.range_stats(5)
    # the coarse level covers ranges 0..99: the 990 merged ones and the young ranges 10 and 11
    assert merged is not None and merged["level"] == "coarse" and merged["partition_count"] == 1190
    assert merged["partitions"] == [0, 9999] and reader.range_stats(11)["level"] == "range"  # type: ignore[index]
    assert StatsChecker(real_redis, keys).check().ok
    late = ArchivedPartition(955, 9550, 9559, "late", old, 5)  # a straggler in a merged range
    layer.write_detail([late])
    acc.add([("-", late)])
    acc.flush()
    assert real_redis.exists(keys.stats_range(9))
    assert reader.range_stats(9)["partition_count"] == 1191  # type: ignore[index]
    report = StatsChecker(real_redis, keys).check()
    assert report.ok, [str(d) for d in report.differences]
    real_redis.hincrby(keys.stats_coarse(0), "count", 7)
    assert not StatsChecker(real_redis, keys).check().ok
    assert StatsChecker(real_redis, keys).check(repair=True).repaired_keys >= 1
    assert StatsChecker(real_redis, keys).check().ok


def test_compaction_before_the_first_commit_leaves_the_ranges_alone(real_redis: redis.Redis, namespace: str) -> None:
    """A maintenance round in a namespace with nothing counted yet (an idle daemon) must not move the
    merge cursor past ranges that simply have no statistics yet."""
    from stats import StatsCompactor
    from stats.rollup import commit_buffer

    keys = KeySchema(namespace)
    compactor = StatsCompactor(real_redis, keys, range_width=100, range_keep_days=30)
    while compactor.step(now=NOW):
        pass
    layer = ArchiveLayer(real_redis, keys, TierPolicy())
    ArchiveQueue(real_redis, keys).ensure_group()
    parts = [ArchivedPartition(p, p * 10, p * 10 + 9, "w", NOW - 60, 5) for p in range(1, 301)]
    layer.write_detail(parts)
    acc = commit_buffer(layer, range_width=100)
    acc.add([("-", p) for p in parts])
    acc.flush()
    while compactor.step(now=NOW):
        pass
    assert StatsReader(real_redis, keys).range_stats(0)["level"] == "range"  # type: ignore[index]


def test_day_rolls_stop_at_the_newest_completions_day(real_redis: redis.Redis, namespace: str) -> None:
    from stats import StatsCompactor
    from stats.rollup import commit_buffer

    keys = KeySchema(namespace)
    layer = ArchiveLayer(real_redis, keys, TierPolicy())
    ArchiveQueue(real_redis, keys).ensure_group()
    acc = commit_buffer(layer, range_width=100)
    old = NOW - 400 * 86400  # an import of last year's work: a year of empty days lies between it and now
    parts = [ArchivedPartition(p, p * 10, p * 10 + 9, "w", old + p * 3600, 5) for p in range(1, 49)]
    layer.write_detail(parts)
    acc.add([("-", p) for p in parts])
    acc.flush()
    compactor = StatsCompactor(real_redis, keys, range_width=100, hourly_keep_days=30, range_keep_days=10**4)
    days = {p.completed_at // 86400 for p in parts}
    assert compactor.step(now=NOW) == len(days)  # the days that hold hours, all rolled in one step
    assert compactor.step(now=NOW) == 0
    assert int(real_redis.hget(keys.stats_meta, "compact_day")) == max(days) + 1  # type: ignore[arg-type]
    assert StatsChecker(real_redis, keys).check().ok

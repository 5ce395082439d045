"""The statistics' contract on every engine (`any_redis`: fakeredis, the real engine, a local
cluster): the views add up to what was committed (global, per worker, per range, per day); the
check finds a tampered rollup and repair mends it; compaction by age keeps every total."""

from __future__ import annotations

import datetime as dt
import time

import redis

from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema
from stats import StatsChecker, StatsCompactor, StatsReader
from stats.rollup import commit_buffer

DAY = 1_763_856_000  # 2025-11-23 00:00:00 UTC
WIDTH = 100


def _committed(client: redis.Redis, namespace: str) -> tuple[KeySchema, list[ArchivedPartition]]:
    """250 partitions in three ranges of 100, over two days and three workers, committed."""
    keys = KeySchema.of(namespace, client=client)
    ArchiveQueue(client, keys).ensure_group()
    archive = ArchiveLayer(client, keys)
    parts = [
        ArchivedPartition(p, p * 1000, p * 1000 + 999 - p % 10, f"w{p % 3}", DAY + p * 600, 20 + p % 4)
        for p in range(1, 251)
    ]
    archive.write_detail(parts)
    buffer = commit_buffer(archive, flush_count=10**6, range_width=WIDTH)
    buffer.add([("-", p) for p in parts])
    buffer.flush()
    return keys, parts


def _day(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def test_the_views_add_up_to_what_was_committed(any_redis: redis.Redis, namespace: str) -> None:
    keys, parts = _committed(any_redis, namespace)
    reader = StatsReader(any_redis, keys)
    view = reader.stats()
    assert view["completed"]["total_completed"] == 250
    assert view["completed"]["total_processed_data"] == sum(p.max_id - p.min_id + 1 for p in parts)
    assert view["completed"]["total_duration"] == sum(p.duration for p in parts)
    assert {w: v["count"] for w, v in view["workers"].items()} == {"w0": 83, "w1": 84, "w2": 83}
    ranges = [reader.range_stats(r) for r in range(3)]
    assert [r["partition_count"] for r in ranges if r] == [99, 100, 51]  # pid 0 does not exist
    one = reader.range_summary(150)
    assert one is not None and one["range"] == 1 and one["data_range"] == {"min": 100_000, "max": 199_999 - 9}
    days = [reader.time_series(_day(DAY)), reader.time_series(_day(DAY + 86400))]
    assert [d["total"] for d in days] == [143, 107]  # p * 600 s: pids 1..143 on the first day
    assert sum(days[0]["hourly_completion"]) == 143 and days[0]["level"] == "hourly"
    assert sum(days[0]["worker_completions"].values()) == 143


def test_the_check_finds_a_tampered_rollup_and_repair_mends_it(any_redis: redis.Redis, namespace: str) -> None:
    keys, _ = _committed(any_redis, namespace)
    checker = StatsChecker(any_redis, keys)
    assert checker.check().ok
    any_redis.hincrby(keys.stats_range(1), "count", 5)
    any_redis.hincrby(keys.stats_global, "duration", -7)
    report = checker.check()
    assert not report.ok
    found = {(d.key, d.field) for d in report.differences}
    assert found >= {(keys.stats_range(1), "count"), (keys.stats_global, "duration")}
    assert checker.check(repair=True).repaired_keys >= 2
    assert checker.check().ok
    assert StatsReader(any_redis, keys).range_stats(1)["partition_count"] == 100  # type: ignore[index]


def test_compaction_by_age_keeps_every_total(any_redis: redis.Redis, namespace: str) -> None:
    keys, _ = _committed(any_redis, namespace)
    reader = StatsReader(any_redis, keys)
    before = reader.stats()["completed"]
    compactor = StatsCompactor(any_redis, keys, range_width=WIDTH, hourly_keep_days=30, range_keep_days=30)
    steps = 0
    while compactor.step(now=time.time() + 400 * 86400):
        steps += 1
    assert steps >= 1
    assert reader.stats()["completed"] == before
    day = reader.time_series(_day(DAY))
    assert day["level"] == "daily" and day["hourly_completion"] is None and day["total"] == 143
    merged = reader.range_stats(1)
    assert merged is not None and merged["level"] == "coarse" and merged["partition_count"] == 250
    assert StatsChecker(any_redis, keys).check().ok

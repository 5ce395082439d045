"""After its queue's consumer group was lost, the archiver checks the archive against the index as a
paced, resumable maintenance step (`stats.index_check`), never all at once inside its loop."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from stats import StatsCompactor
from stats.index_check import IndexCheck
from tests.helpers import complete_partitions


@pytest.fixture
def daemon(real_redis: redis.Redis, namespace: str) -> ArchiverDaemon:
    """2,000 partitions archived, in 21 statistics ranges of 100 (pids 1..2000)."""
    config = Config(
        namespace=namespace, block_ms=20, stats_flush_interval_s=0.1, maintenance_interval_s=0, stats_range_width=100
    )
    archiver = ArchiverDaemon(real_redis, config, consumer="check")
    archiver.queue.ensure_group()
    complete_partitions(real_redis, namespace, 2000)
    drain(archiver)
    return archiver


def _lose_the_group(client: redis.Redis, daemon: ArchiverDaemon) -> None:
    client.delete(daemon.keys.queue)  # as after a restart without data: no stream, no group
    with pytest.raises(redis.ResponseError, match="NOGROUP"):
        daemon.run_once()
    daemon.recover_group()


def _meta(client: redis.Redis, daemon: ArchiverDaemon) -> dict[str, str]:
    raw = client.hgetall(daemon.keys.stats_meta)
    return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]


def test_the_check_walks_a_few_ranges_a_step_and_resumes_elsewhere(
    real_redis: redis.Redis, daemon: ArchiverDaemon
) -> None:
    keys = daemon.keys
    real_redis.hincrby(keys.stats_range(7), "count", 1)  # a rollup that disagrees with the index
    _lose_the_group(real_redis, daemon)
    walk = daemon.index_check
    assert walk.under_way()
    assert walk.step(3) == 3  # ranges 0..2 only
    assert real_redis.hget(keys.stats_index_check, "cursor") == b"3"
    walk.request()  # asked again meanwhile: the walk under way goes on
    assert real_redis.hget(keys.stats_index_check, "cursor") == b"3"

    other = IndexCheck(real_redis, keys, daemon.config.policy)  # another archiver took the lock over
    assert other.step(10) == 10 and other.step(10) == 8  # ranges 3..12, then 13..20 (pid 2000)
    assert "index_check_at" not in _meta(real_redis, daemon)
    assert other.step(10) == 1  # the totals, then the report
    assert not other.under_way() and other.step(10) == 0
    meta = _meta(real_redis, daemon)
    assert meta["index_check_ok"] == "0" and meta["index_check_differences"] == "1"
    (example,) = orjson.loads(meta["index_check_examples"])
    assert keys.stats_range(7) in example and "count" in example
    assert "last_check_at" not in meta  # `stats verify`'s own record is left alone


def test_the_daemon_finishes_the_check_in_its_maintenance_and_reports_it(
    real_redis: redis.Redis, daemon: ArchiverDaemon
) -> None:
    _lose_the_group(real_redis, daemon)
    drain(daemon)  # rounds with maintenance under the lock: the walk runs paced, to its end
    meta = _meta(real_redis, daemon)
    assert meta["index_check_ok"] == "1" and meta["index_check_differences"] == "0"
    assert not daemon.index_check.under_way()


def test_a_global_total_that_disagrees_with_the_index_fails_the_check(
    real_redis: redis.Redis, daemon: ArchiverDaemon
) -> None:
    real_redis.hincrby(daemon.keys.stats_global, "completed", -1)
    _lose_the_group(real_redis, daemon)
    while daemon.index_check.step(50):
        pass
    meta = _meta(real_redis, daemon)
    assert meta["index_check_ok"] == "0"
    assert any("index bitmap" in e for e in orjson.loads(meta["index_check_examples"]))


def test_ranges_merged_into_a_coarse_range_are_checked_as_their_group(
    real_redis: redis.Redis, daemon: ArchiverDaemon
) -> None:
    keys = daemon.keys
    compactor = StatsCompactor(real_redis, keys, range_width=100, hourly_keep_days=30, range_keep_days=30)
    while compactor.step(now=time.time() + 400 * 86400):  # every range old enough to merge
        pass
    assert int(real_redis.hget(keys.stats_meta, "compact_range") or 0) == 21  # type: ignore[arg-type]
    _lose_the_group(real_redis, daemon)
    assert daemon.index_check.step(3) == 21  # the whole coarse group 0 (ranges 0..20), whatever the step
    assert daemon.index_check.step(3) == 1
    assert _meta(real_redis, daemon)["index_check_ok"] == "1"

"""Skipping compression while the backlog is critical: the stored mode, the archivers following it,
the router answering throughout, and the seal-up once the backlog is gone (once per batch)."""

from __future__ import annotations

import time

import pytest
import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.router import QueryRouter, Source
from archiver.status import collect_status
from codec import ValidationError
from layers import ArchiveLayer, KeySchema, Tier, migrate_step
from layers.archive.transitions import seal_unsealed_step
from layers.control.pressure import Backlog, BacklogPressure, PressureSettings, observe_backlog
from stats import StatsChecker, StatsReader
from tests.helpers import RouterWatch, complete_partitions, scraped, wait_for

SETTINGS = PressureSettings(critical_backlog=10_000, critical_for_s=10, critical_age_s=60, low_water=1_000)


def test_the_mode_follows_the_backlog(any_redis: redis.Redis, namespace: str) -> None:
    pressure = BacklogPressure(any_redis, KeySchema.of(namespace, client=any_redis))

    def decide(length: int, at: float, age: float = 0.0, tier: Tier = Tier.COMPRESSED) -> bool | None:
        change = pressure.decide(SETTINGS, Backlog(length, age), tier, now=1000.0 + at)
        return None if change is None else change.skipping

    def watched(length: int, first: int, last: int) -> None:
        """The lock holder's looks, one a second (its maintenance interval), none changing the mode."""
        for at in range(first, last + 1):
            assert decide(length, at) is None, at

    assert decide(50_000, 0, age=600, tier=Tier.SIMPLE) is None  # the simple tier has nothing to skip
    watched(20_000, 0, 9)  # critical from 0 on ...
    assert decide(5_000, 9.5) is None  # ... but it dipped: the 10 s start again
    watched(20_000, 10, 19)
    assert decide(20_000, 20) is True  # above 10,000 for 10 s
    state = pressure.state(Tier.COMPRESSED)
    assert state.skipping and state.since == 1020.0 and "for 10 s" in state.reason and state.times_on == 1
    assert decide(5_000, 21) is None  # on until the low-water mark
    assert decide(999, 22) is False
    assert not pressure.skipping() and "low-water" in pressure.state(Tier.COMPRESSED).reason
    assert decide(900, 23, age=120) is None  # old, but too little to be worth it
    assert decide(2_000, 24, age=61) is True  # an entry older than a minute: at once
    assert "61 s old" in pressure.state(Tier.SUMMARY).reason
    assert decide(0, 25) is False
    watched(20_000, 30, 32)  # critical again, and the last look said so too ...
    watched(20_000, 36, 45)  # ... 4 s later (three looks missed, the archivers stopped): the 10 s start at 36
    assert decide(20_000, 46) is True
    assert decide(0, 47) is False
    off = PressureSettings(critical_backlog=0, critical_age_s=0, low_water=1)
    assert pressure.decide(off, Backlog(10**6, 10**4), Tier.COMPRESSED, now=2000.0) is None
    with pytest.raises(ValidationError):
        PressureSettings(critical_backlog=100, low_water=200)


def test_the_backlog_is_the_queues_length_and_its_oldest_entry(real_redis: redis.Redis, namespace: str) -> None:
    keys = [KeySchema(f"{namespace}{i}") for i in range(2)]
    try:
        now_ms = int(time.time() * 1000)
        real_redis.xadd(keys[0].queue, {"p": b"x"}, id=f"{now_ms - 90_000}-0")
        real_redis.xadd(keys[0].queue, {"p": b"x"})
        real_redis.xadd(keys[1].queue, {"p": b"x"}, id=f"{now_ms - 5_000}-0")
        got = observe_backlog(real_redis, keys, now=now_ms / 1000)
        assert got.length == 3 and got.oldest_age_s == pytest.approx(90, abs=0.01)
        assert observe_backlog(real_redis, [KeySchema(namespace)]) == Backlog(0, 0.0)
    finally:
        real_redis.delete(*(k.queue for k in keys))


def _critical_config(namespace: str) -> Config:
    """A batch tier from the first partition, a backlog of 200 critical at once, 100 the low-water
    mark; a page (and a commit) every 100 entries, maintenance every round."""
    return Config(
        namespace=namespace,
        compressed_from=0,
        skip_compression_backlog=200,
        skip_compression_for_s=0,
        skip_compression_age_s=0,
        skip_compression_low_water=100,
        read_count=100,
        stats_flush_count=100,
        block_ms=10,
        maintenance_interval_s=0,
    )


def test_a_critical_backlog_is_stored_unsealed_then_sealed_once(server_redis: redis.Redis, namespace: str) -> None:
    n = 2000
    complete_partitions(server_redis, namespace, n)
    config = _critical_config(namespace)
    daemon = ArchiverDaemon(server_redis, config, consumer="one")
    keys, archive = daemon.keys, daemon.archive
    daemon.queue.ensure_group()
    with RouterWatch(server_redis, namespace, range(1, n + 1)) as watch:  # asked about every partition throughout
        daemon.run_once()  # the first page is sealed as usual; then the lock holder finds the backlog critical
        assert daemon.backlog.skipping and daemon.has_lock
        daemon.pages.pipeline.writes.write_now()  # the page's seals, written with the next round trip otherwise
        sealed_before = sum(archive.sealing.seals.values())
        while server_redis.xlen(keys.queue) >= 300:
            daemon.run_once()
        assert daemon.backlog.skipping
        assert sum(archive.sealing.seals.values()) == sealed_before  # nothing sealed while critical: no competition
        assert migrate_step(archive, defer_seals=True) == 0
        unsealed = {int(b) for b in server_redis.zrange(keys.unsealed, 0, -1)}
        assert len(unsealed) >= 10 and server_redis.hlen(keys.completed) >= 1000
        report = collect_status(server_redis, config)["pressure"]
        assert report["skipping"] and report["unsealed_records"] == server_redis.hlen(keys.completed)
        assert report["unsealed_batches"] == len(unsealed) and "backlog of" in report["reason"]
        gauges = scraped(server_redis, keys)
        assert gauges["partarchive_compression_skipped"] == 1 and gauges["partarchive_compression_skipped_seconds"] >= 0
        assert gauges["partarchive_unsealed_records"] == report["unsealed_records"]
        assert gauges["partarchive_unsealed_batches"] == len(unsealed)

        while server_redis.xlen(keys.queue) >= 100:
            daemon.run_once()
        daemon.run_once()
        assert not daemon.backlog.skipping  # under the low-water mark
        while seal_unsealed_step(archive, Tier.COMPRESSED, max_batches=2):  # slowly, while the router is asked
            pass
        drain(daemon)
        wait_for(lambda: watch.passes >= 3, 60, "the router asked about every partition again")
    assert not watch.lost, watch.lost[:5]
    assert server_redis.hlen(keys.completed) == 0 and server_redis.zcard(keys.unsealed) == 0
    assert all(archive.sealing.seals[b] == 1 for b in unsealed), {b: archive.sealing.seals[b] for b in unsealed}
    router = QueryRouter(server_redis, keys, archive=archive)
    assert all(router.get(pid).source is Source.BATCH for pid in range(1, n + 1, 97))
    assert archive.archived_total() == n and server_redis.bitcount(keys.index) == n
    assert StatsReader(server_redis, keys).stats()["completed"]["total_completed"] == n
    assert StatsChecker(server_redis, keys, policy=config.policy).check().ok
    assert collect_status(server_redis, config)["pressure"]["unsealed_records"] == 0
    gauges = scraped(server_redis, keys)
    assert gauges["partarchive_compression_skipped"] == 0 and gauges["partarchive_unsealed_records"] == 0


def test_every_archiver_follows_the_stored_mode(real_redis: redis.Redis, namespace: str) -> None:
    complete_partitions(real_redis, namespace, 1000)
    config = _critical_config(namespace)
    holder = ArchiverDaemon(real_redis, config, consumer="holder")
    other = ArchiverDaemon(real_redis, config, consumer="other")
    holder.queue.ensure_group()
    holder.run_once()
    assert holder.has_lock and holder.backlog.skipping
    other.run_once()  # it reads the mode at its maintenance, after its first page
    assert not other.has_lock and other.backlog.skipping
    in_simple = real_redis.hlen(holder.keys.completed)
    other.run_once()
    other.run_once()  # a page's commit, with its detail, goes out once the next page is read
    assert real_redis.hlen(holder.keys.completed) == in_simple + 100  # its page went unsealed too
    drain(other)
    drain(holder)
    assert real_redis.hlen(holder.keys.completed) == 0
    assert ArchiveLayer(real_redis, holder.keys).archived_total() == 1000
    assert StatsChecker(real_redis, holder.keys, policy=config.policy).check().ok

"""The statistics layer on the real engine: flushing, exactly-once, values, verify/repair, degraded view."""

from __future__ import annotations

import signal

import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from codec import ArchivedPartition
from layers import ActiveLayer, ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy
from layers.archive.commit import CommitBuffer
from layers.archive.shelves import SlotWrite
from layers.control.maintenance import MaintenanceLock
from stats import StatsChecker, StatsReader
from stats.rollup import commit_buffer
from tests.conftest import Clock
from tests.helpers import complete_partitions, kill_archiver_when, start_archiver, wait_for

T0 = 1_719_234_405  # 2024-06-24 13:06:45 UTC


def known_parts() -> list[ArchivedPartition]:
    """Ten partitions of 1,000 IDs over two ranges of width 5, two workers, two UTC hours."""
    out = []
    for pid in range(1, 11):
        worker = "alpha" if pid % 3 else "beta:2"
        out.append(ArchivedPartition(pid, (pid - 1) * 1000 + 1, pid * 1000, worker, T0 + 600 * pid, 100 + pid))
    return out


def queued(client: redis.Redis, namespace: str, parts: list[ArchivedPartition]) -> list[tuple[str, ArchivedPartition]]:
    keys = KeySchema(namespace)
    queue = ArchiveQueue(client, keys)
    queue.ensure_group()
    for part in parts:
        client.xadd(keys.queue, {"p": part.to_json()})
    entries = queue.read_new("t", len(parts) + 10, 10)
    return [(e.entry_id, ArchivedPartition.from_json(e.payload)) for e in entries]


def accumulator(client: redis.Redis, namespace: str, **kw: object) -> CommitBuffer:
    archive = ArchiveLayer(client, KeySchema(namespace), TierPolicy())
    return commit_buffer(archive, **kw)  # type: ignore[arg-type]


def test_flush_by_count(real_redis: redis.Redis, namespace: str) -> None:
    acc = accumulator(real_redis, namespace, flush_count=10, range_width=5)
    entries = queued(
        real_redis,
        namespace,
        known_parts() + [ArchivedPartition(p, p * 10, p * 10 + 9, "w", T0, 1) for p in range(11, 26)],
    )
    ArchiveLayer(real_redis, KeySchema(namespace)).write_detail([p for _, p in entries])
    assert acc.add(entries[:9]) == [] and acc.buffered == 9 and not acc.due()
    assert real_redis.xlen(KeySchema(namespace).queue) == 25  # nothing acknowledged before the commit
    results = acc.add(entries[9:])  # 25 wait: a commit is due, and it takes all of them (one script call)
    assert len(results) == 1 and acc.buffered == 0 and acc.flushes == 1
    assert StatsReader(real_redis, namespace).stats()["completed"]["total_completed"] == 25
    assert real_redis.xlen(KeySchema(namespace).queue) == 0


def test_flush_by_time(real_redis: redis.Redis, namespace: str, clock: Clock) -> None:
    acc = accumulator(real_redis, namespace, flush_count=100, flush_interval_s=30, clock=clock)
    entries = queued(real_redis, namespace, known_parts()[:4])
    acc.add(entries)
    clock.advance(29)
    assert not acc.due()
    clock.advance(1.5)
    assert acc.due()
    acc.flush()
    assert StatsReader(real_redis, namespace).stats()["completed"]["total_completed"] == 4
    assert real_redis.xlen(KeySchema(namespace).queue) == 0


def test_daemon_flushes_by_time_in_its_loop(real_redis: redis.Redis, namespace: str) -> None:
    config = Config(namespace=namespace, block_ms=20, stats_flush_interval_s=2.0, maintenance_interval_s=0)
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    daemon.queue.ensure_group()
    complete_partitions(real_redis, namespace, 7)
    daemon.run_once()
    assert daemon.commit_buffer.buffered == 7
    wait_for(lambda: daemon.run_once() >= 0 and daemon.commit_buffer.buffered == 0, what="timed flush")
    assert StatsReader(real_redis, namespace).stats()["completed"]["total_completed"] == 7


def test_redelivered_entries_are_counted_once(real_redis: redis.Redis, namespace: str) -> None:
    entries = queued(real_redis, namespace, known_parts())
    first = accumulator(real_redis, namespace, range_width=5)
    first.add(entries[:6])
    first.flush()
    second = accumulator(real_redis, namespace, range_width=5)
    second.add(entries + entries[2:4])  # a takeover re-reads 0..5, and a duplicate inside one flush
    result = second.flush()
    assert result.newly_archived == 4
    view = StatsReader(real_redis, namespace).stats()
    assert view["completed"]["total_completed"] == 10
    assert sum(w["count"] for w in view["workers"].values()) == 10
    assert real_redis.xlen(KeySchema(namespace).queue) == 0


@pytest.mark.chaos
def test_exactly_once_after_kill_between_write_and_ack(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    pids = complete_partitions(real_redis, namespace, 300)
    queue = ArchiveQueue(real_redis, keys)
    kill_archiver_when(
        engine_url,
        namespace,
        "victim",
        lambda: real_redis.hlen(keys.completed) == 300 and queue.state().pending == 300,  # written, not acked
        "detail written by the victim",
        PARTARCHIVE_STATS_FLUSH_COUNT="100000",
        PARTARCHIVE_STATS_FLUSH_INTERVAL_S="3600",
    )
    survivor = start_archiver(engine_url, namespace, "--consumer", "survivor", "--claim-idle-ms", "300")
    try:
        wait_for(lambda: real_redis.xlen(keys.queue) == 0, what="survivor commits")
    finally:
        survivor.send_signal(signal.SIGTERM)
        survivor.communicate(timeout=15)
    view = StatsReader(real_redis, namespace).stats()
    assert view["completed"]["total_completed"] == 300
    assert view["completed"]["total_processed_data"] == 300 * 1000
    assert view["workers"]["w"]["count"] == 300
    assert real_redis.bitcount(keys.index) == 300 and len(pids) == 300
    assert StatsChecker(real_redis, namespace).check().ok


def test_range_and_time_series_values(real_redis: redis.Redis, namespace: str) -> None:
    acc = accumulator(real_redis, namespace, range_width=5)
    entries = queued(real_redis, namespace, known_parts())
    acc.archive.write_detail([p for _, p in entries])
    acc.add(entries)
    acc.flush()
    reader = StatsReader(real_redis, namespace)
    r0 = reader.range_stats(0)
    assert r0 is not None
    # range 0 holds pids 1..4 (pid 0 does not exist): alpha has 1, 2, 4; beta:2 has 3
    assert r0["partitions"] == [0, 4] and r0["partition_count"] == 4
    assert r0["data_range"] == {"min": 1, "max": 4000}
    assert r0["completed_time_range"] == {"start": T0 + 600, "end": T0 + 2400}
    assert r0["total_duration"] == 101 + 102 + 103 + 104
    assert r0["worker_distribution"]["alpha"] == {
        "count": 3,
        "total_duration": 307,
        "data_processed": 3000,
        "avg_duration": 102.333,
    }
    assert r0["worker_distribution"]["beta:2"]["count"] == 1
    assert reader.range_summary(7) == reader.range_stats(1)
    day = reader.time_series("2024-06-24")
    # T0 is 13:06:45 UTC; completions at T0 + 600k for k = 1..10 fall in hours 13, 14, 14, ... 14
    assert day["hourly_completion"][13] == 5 and day["hourly_completion"][14] == 5 and day["total"] == 10
    assert day["worker_completions"] == {"alpha": 7, "beta:2": 3}
    view = reader.stats()
    assert view["completed"]["avg_duration"] == 105.5
    assert view["workers"]["beta:2"]["data_processed"] == 3000


def test_merged_view_counts_active_and_completed(real_redis: redis.Redis, namespace: str) -> None:
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(1, 10_000, 1000)
    for _ in range(3):
        part = active.claim("w")
        assert part is not None
        active.complete(part.partition_id, "w")
    active.claim("w")
    daemon = ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t")
    drain(daemon)
    view = StatsReader(real_redis, namespace).stats()
    assert view["active"] == {"pending": 6, "claimed": 1, "running": 0, "failed": 0}
    assert view["completed"]["total_completed"] == 3 and view["total_partitions"] == 10
    assert view["degraded"] is False


def test_degraded_view_when_statistics_cannot_be_read(real_redis: redis.Redis, namespace: str) -> None:
    ActiveLayer(real_redis, namespace).create_partitions(1, 3000, 1000)
    real_redis.set(KeySchema(namespace).stats_global, "not a hash")
    view = StatsReader(real_redis, namespace).stats()
    assert view["active"]["pending"] == 3
    assert view["degraded"] is True and view["completed"] is None and "WRONGTYPE" in view["error"]


def archive_known_parts(client: redis.Redis, namespace: str, policy: TierPolicy) -> ArchiveLayer:
    """The ten known partitions archived in full (detail sealed, statistics flushed), by range width 5."""
    archive = ArchiveLayer(client, KeySchema(namespace), policy)
    entries = queued(client, namespace, known_parts())
    archive.write_detail([p for _, p in entries])
    archive.sealing.seal_idle()
    acc = commit_buffer(archive, range_width=5)
    acc.add(entries)
    acc.flush()
    return archive


@pytest.mark.parametrize("tier", ["simple", "compressed"])
def test_verify_detects_tampering_and_repair_fixes_it(real_redis: redis.Redis, namespace: str, tier: str) -> None:
    policy = TierPolicy(compressed_from=0 if tier == "compressed" else 100_000, seal_idle_s=0)
    keys = archive_known_parts(real_redis, namespace, policy).keys
    checker = StatsChecker(real_redis, namespace, policy=policy)
    assert checker.check().ok
    real_redis.hincrby(keys.stats_global, "completed", 5)
    real_redis.hincrby(keys.stats_range(1), "duration", -40)
    report = checker.check()
    assert not report.ok
    assert {(d.key, d.field) for d in report.differences} >= {
        (keys.stats_global, "completed"),
        (keys.stats_range(1), "duration"),
    }
    assert real_redis.hget(keys.stats_meta, "last_check_ok") == b"0"
    repaired = checker.check(repair=True)
    assert repaired.repaired_keys >= 2
    assert checker.check().ok
    view = StatsReader(real_redis, namespace).stats()
    assert view["completed"]["total_completed"] == 10 and view["completed"]["total_duration"] == 1055


def test_repair_never_counts_below_the_index(real_redis: redis.Redis, namespace: str) -> None:
    """With detail expired, a range is checked by count only and repaired up to the index."""
    policy = TierPolicy(compressed_from=0, seal_idle_s=0)
    archive = archive_known_parts(real_redis, namespace, policy)
    stored = archive.shelves.read([0])[0]
    archive.shelves.write([SlotWrite(0, stored.slot, b"")])  # detail gone, as after expiry ...
    real_redis.setbit(archive.keys.expired_batches, 0, 1)  # ... which marks the batch expired
    real_redis.hset(archive.keys.stats_range(1), "count", 2)
    checker = StatsChecker(real_redis, namespace, policy=policy)
    report = checker.check(repair=True)
    assert report.ranges_count_only >= 1
    assert int(real_redis.hget(archive.keys.stats_range(1), "count")) == 5  # type: ignore[arg-type]
    assert checker.check().ok


def test_router_answers_expired_partitions_from_the_range_statistics(real_redis: redis.Redis, namespace: str) -> None:
    from archiver import QueryRouter, Source

    config = Config(
        namespace=namespace,
        block_ms=10,
        compressed_from=0,
        summary_above=0,
        retention_s=1,
        seal_idle_s=0,
        maintenance_interval_s=0,
    )
    complete_partitions(real_redis, namespace, 120)
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    drain(daemon)  # its one commit moves the namespace to the summary tier
    router = QueryRouter(real_redis, namespace, policy=config.policy)

    def expired() -> bool:
        daemon.run_once(block_ms=1)  # the daemon's next rounds: maintenance indexes the batches for expiry
        return router.get(5).source is Source.STATISTICS

    wait_for(expired, what="expiry", timeout=15)
    daemon.release_lock()
    answer = router.get(5)
    assert answer.degraded and answer.summary is not None
    assert answer.summary["partition_count"] == 120 and answer.summary["partitions"] == [0, 999]


def test_stats_cli(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    import orjson

    from tests.helpers import run_cli

    complete_partitions(real_redis, namespace, 30)
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    table = run_cli(engine_url, namespace, "stats")
    assert table.returncode == 0 and "30 partitions" in table.stdout
    data = orjson.loads(run_cli(engine_url, namespace, "stats", "--json").stdout)
    assert data["completed"]["total_completed"] == 30
    assert run_cli(engine_url, namespace, "stats", "verify").returncode == 0
    real_redis.hincrby(KeySchema(namespace).stats_workers, "w:c", 3)
    bad = run_cli(engine_url, namespace, "stats", "verify")
    assert bad.returncode == 1 and "difference" in bad.stdout
    held = MaintenanceLock(real_redis, KeySchema(namespace), "someone")
    assert held.acquire()
    refused = run_cli(engine_url, namespace, "stats", "verify", "--repair")
    assert refused.returncode == 2 and "taken by 'someone'" in refused.stderr and refused.stderr.count("\n") == 1
    held.release()
    fixed = run_cli(engine_url, namespace, "stats", "verify", "--repair")
    assert fixed.returncode == 0 and "repaired" in fixed.stdout
    assert real_redis.get(KeySchema(namespace).maintenance_lock) is None
    assert run_cli(engine_url, namespace, "stats", "verify", "--json").returncode == 0
    assert run_cli(engine_url, namespace, "stats", "--range", "0").returncode == 0
    assert run_cli(engine_url, namespace, "stats", "--day", "not-a-day").returncode == 2


def test_verify_fails_on_a_batch_it_cannot_decode(real_redis: redis.Redis, namespace: str, engine_url: str) -> None:
    from tests.helpers import run_cli

    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 250)
    daemon = ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10, compressed_from=0, seal_idle_s=0))
    drain(daemon)
    daemon.maintain(force=True)
    assert StatsChecker(real_redis, keys).check().ok
    real_redis.set(keys.batch(1), b"\x00garbage")  # a batch key from before shelves, damaged
    report = StatsChecker(real_redis, keys).check()
    assert not report.ok and report.undecodable_batches == [1]
    done = run_cli(engine_url, namespace, "stats", "verify")
    assert done.returncode == 1 and "undecodable batches: [1]" in done.stdout and "1 batches unreadable" in done.stdout

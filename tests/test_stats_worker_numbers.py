"""Range hashes name workers by registry number, on the real engine: read back by ID, ranges
from before that change still read and verified, and a registry rebuilt meanwhile noticed."""

from __future__ import annotations

import redis

from layers import KeySchema, TierPolicy, WorkerRegistrar
from layers.plumbing.replies import as_text
from stats import StatsChecker, StatsReader
from tests.test_stats import accumulator, archive_known_parts, known_parts, queued

SIMPLE = TierPolicy(compressed_from=100_000, seal_idle_s=0)


def fields_of(client: redis.Redis, key: str) -> dict[str, int]:
    return {as_text(k): int(v) for k, v in client.hgetall(key).items()}  # type: ignore[union-attr]


def test_a_range_names_its_workers_by_number_and_reads_back_by_id(real_redis: redis.Redis, namespace: str) -> None:
    keys = archive_known_parts(real_redis, namespace, SIMPLE).keys
    numbers = WorkerRegistrar(real_redis, keys).reload()
    alpha, beta = numbers.known_short_id("alpha"), numbers.known_short_id("beta:2")
    # range 1 holds pids 5..9: alpha has 5, 7, 8; beta:2 has 6, 9
    assert fields_of(real_redis, keys.stats_range(1)) == {
        "count": 5,
        "data": 5000,
        "duration": 105 + 106 + 107 + 108 + 109,
        "min_id": 4001,
        "max_id": 9000,
        "first_at": 1_719_234_405 + 3000,
        "last_at": 1_719_234_405 + 5400,
        f"#{alpha}c": 3,
        f"#{alpha}d": 105 + 107 + 108,
        f"#{alpha}p": 3000,
        f"#{beta}c": 2,
        f"#{beta}d": 106 + 109,
        f"#{beta}p": 2000,
    }
    r1 = StatsReader(real_redis, namespace).range_stats(1)
    assert r1 is not None
    assert r1["worker_distribution"] == {
        "alpha": {"count": 3, "total_duration": 320, "data_processed": 3000, "avg_duration": 106.667},
        "beta:2": {"count": 2, "total_duration": 215, "data_processed": 2000, "avg_duration": 107.5},
    }
    assert set(fields_of(real_redis, keys.stats_workers)) == {f"{w}:{k}" for w in ("alpha", "beta:2") for k in "cdp"}
    assert StatsChecker(real_redis, namespace, policy=SIMPLE).check().ok


def test_a_range_written_before_numbering_is_read_verified_and_repaired(
    real_redis: redis.Redis, namespace: str
) -> None:
    keys = archive_known_parts(real_redis, namespace, SIMPLE).keys
    numbers = WorkerRegistrar(real_redis, keys).reload()
    alpha = numbers.known_short_id("alpha")
    key = keys.stats_range(1)
    before = StatsReader(real_redis, namespace).range_stats(1)
    # as an earlier version left it: alpha's fields named by ID, one of them split across both names
    real_redis.hdel(key, f"#{alpha}c", f"#{alpha}d")
    real_redis.hset(key, mapping={"alpha:c": 3, "alpha:d": 100})
    real_redis.hincrby(key, f"#{alpha}p", -1000)
    real_redis.hset(key, "alpha:p", 1000)
    real_redis.hincrby(key, f"#{alpha}d", 220)
    assert StatsReader(real_redis, namespace).range_stats(1) == before
    checker = StatsChecker(real_redis, namespace, policy=SIMPLE)
    assert checker.check().ok

    real_redis.hincrby(key, "alpha:c", 1)
    report = checker.check()
    assert [(d.key, d.field, d.stored, d.expected) for d in report.differences] == [(key, "alpha:c", 4, 3)]
    assert checker.check(repair=True).repaired_keys == 1
    assert checker.check().ok
    assert not any(":" in name for name in fields_of(real_redis, key))  # rewritten with numbers
    assert StatsReader(real_redis, namespace).range_stats(1) == before


def test_a_commit_after_the_registry_was_rebuilt_takes_the_new_numbers(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    acc = accumulator(real_redis, namespace, range_width=5)
    parts = known_parts()
    first = queued(real_redis, namespace, parts[4:9])  # range 1
    acc.add(first)
    acc.flush()
    assert acc.archive.workers.map.known_short_id("alpha") == 1
    real_redis.delete(keys.workers, keys.workers_by_short)  # lost, and rebuilt by another process
    rebuilt = WorkerRegistrar(real_redis, keys)
    for worker in ("zeta", "beta:2", "alpha"):
        rebuilt.register([worker])
    rest = queued(real_redis, namespace, parts[:4] + parts[9:])  # ranges 0 and 2
    acc.add(rest)
    acc.flush()
    assert acc.archive.workers.map.known_short_id("alpha") == 3  # reloaded after the refused commit
    assert "#3c" in fields_of(real_redis, keys.stats_range(0))
    reader = StatsReader(real_redis, namespace)
    r0, r2 = reader.range_stats(0), reader.range_stats(2)
    assert r0 is not None and r2 is not None
    assert {w: v["count"] for w, v in r0["worker_distribution"].items()} == {"alpha": 3, "beta:2": 1}
    assert {w: v["count"] for w, v in r2["worker_distribution"].items()} == {"alpha": 1}
    assert reader.stats()["completed"]["total_completed"] == 10
    assert real_redis.xlen(keys.queue) == 0

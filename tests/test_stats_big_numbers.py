"""Statistics past 64 bits: a partition of the whole int64 range processes 2^64 ids, more than
HINCRBY can add. The scripts add and compare integers as decimal text (``_decimal.lua``), so
such sums are exact, and nothing is half-written on the way."""

from __future__ import annotations

import json
import time
from importlib import resources

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.output import json_bytes
from codec import ArchivedPartition
from layers import KeySchema
from layers.errors import CorruptMetadata
from layers.keys import ARCHIVER_GROUP
from layers.plumbing.replies import as_text
from stats import StatsChecker, StatsReader
from stats.compaction import StatsCompactor

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DECIMAL = (resources.files("layers") / "plumbing" / "lua" / "_decimal.lua").read_text(encoding="utf-8")
PROBE = DECIMAL + "\nreturn {decimal_add(ARGV[1], ARGV[2]), decimal_cmp(ARGV[1], ARGV[2])}"

big = st.one_of(
    st.integers(-(10**15), 10**15), st.integers(-(2**130), 2**130), st.sampled_from([0, 2**53, -(2**63), 2**64])
)


def _text(value: int, zeros: int) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}{'0' * zeros}{abs(value)}"


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(big, big, st.integers(0, 3), st.integers(0, 3))
def test_decimal_add_and_compare_are_exact(real_redis: redis.Redis, a: int, b: int, za: int, zb: int) -> None:
    got = real_redis.eval(PROBE, 0, _text(a, za), _text(b, zb))
    assert as_text(got[0]) == str(a + b)  # leading zeros and -0 come back normalized
    assert got[1] == (a > b) - (a < b)


def _queue(client: redis.Redis, keys: KeySchema, parts: list[ArchivedPartition]) -> None:
    client.xgroup_create(keys.queue, ARCHIVER_GROUP, id="0", mkstream=True)
    for part in parts:
        client.xadd(keys.queue, {"p": part.to_json()})


def test_partitions_of_the_whole_int64_range_are_counted_exactly(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    now = int(time.time())
    parts = [ArchivedPartition(pid, INT64_MIN, INT64_MAX, f"w{pid % 2}", now, 5) for pid in (1, 2, 3)]
    parts.append(ArchivedPartition(4, INT64_MAX - 9, INT64_MAX, "w0", now, 5))
    _queue(real_redis, keys, parts)
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    processed = 3 * 2**64 + 10
    assert real_redis.xlen(keys.queue) == 0 and int(real_redis.hget(keys.archive_meta, "total")) == 4
    assert int(real_redis.hget(keys.stats_global, "processed")) == processed
    assert StatsChecker(real_redis, keys).check().ok
    reader = StatsReader(real_redis, keys)
    summary = reader.range_summary(1)
    assert summary is not None and summary["processed_data"] == processed
    assert json.loads(json_bytes(summary)) == summary  # orjson stops at 64 bits: the JSON still holds it
    stats = reader.stats()
    assert stats["completed"]["total_processed_data"] == processed
    assert stats["workers"]["w1"]["data_processed"] == 2 * 2**64

    compactor = StatsCompactor(real_redis, keys, range_width=reader.range_width())
    assert compactor.step(now=now + 400 * 86400)  # the range merged into its coarse range
    assert not real_redis.exists(keys.stats_range(0))
    assert StatsChecker(real_redis, keys).check().ok
    coarse = real_redis.hgetall(keys.stats_coarse(0))
    assert int(coarse[b"data"]) == processed and int(coarse[b"max_id"]) == INT64_MAX
    assert int(coarse[b"min_id"]) == INT64_MIN


def test_a_merge_checks_the_coarse_range_before_it_writes(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    real_redis.hset(keys.archive_meta, "max_pid", 10)
    fine = {"count": "2", "data": str(2**70), "min_id": "5", "last_at": "1"}
    real_redis.hset(keys.stats_range(0), mapping=fine)
    real_redis.hset(keys.stats_coarse(0), mapping={"count": 1, "data": "1.5e3"})
    compactor = StatsCompactor(real_redis, keys, range_width=1000)
    with pytest.raises(CorruptMetadata, match=f"^{keys.stats_coarse(0)} data is not a number partarchive wrote; "):
        compactor.step(now=time.time())
    assert real_redis.hgetall(keys.stats_coarse(0)) == {b"count": b"1", b"data": b"1.5e3"}
    assert {as_text(k): as_text(v) for k, v in real_redis.hgetall(keys.stats_range(0)).items()} == fine
    real_redis.hset(keys.stats_coarse(0), "data", str(-(2**65)))
    assert compactor.step(now=time.time())
    assert real_redis.hgetall(keys.stats_coarse(0)) == {
        b"count": b"3",
        b"data": str(2**70 - 2**65).encode(),
        b"min_id": b"5",
        b"last_at": b"1",
    }
    assert not real_redis.exists(keys.stats_range(0))


@pytest.mark.parametrize("where", ["range", "day"])
def test_a_compaction_refusal_names_the_key_and_field_as_corrupt_meta(
    real_redis: redis.Redis, namespace: str, where: str
) -> None:
    """Both compaction scripts refuse a field that is not a number with the code every script uses
    for it (``corrupt_meta``), read by the shared parser: the same typed error as the commit's."""
    keys = KeySchema(namespace)
    real_redis.hset(keys.archive_meta, "max_pid", 10)
    if where == "range":
        key, field = keys.stats_range(0), "count"
        real_redis.hset(key, mapping={"count": "x", "last_at": "1"})
    else:
        key, field = keys.stats_day("1970-01-01"), "h03"
        real_redis.hset(key, mapping={"h03": "1.5"})
        real_redis.hset(keys.stats_global, mapping={"first_completed_at": 3 * 3600, "last_completed_at": 3 * 3600})
    before = real_redis.hgetall(key)
    with pytest.raises(CorruptMetadata, match=f"^{key} {field} is not a number partarchive wrote; nothing was"):
        StatsCompactor(real_redis, keys, range_width=1000).step(now=time.time())
    assert real_redis.hgetall(key) == before

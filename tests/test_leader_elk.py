"""The leader beside an elk_coordinator deployment (a namespace bound to Go's KeyPrefix, Go's namespace
known), on the real engine, with the recorded Go fixture (`tests/fixtures/elk/small.jsonl`) and the
emulated Go worker and leader (`tests/go_worker.py`): partarchive's leader stands aside while Go's leader
holds its lock and, leading, holds that lock in Go's format so Go's leader stands aside; its runs go on
from Go's allocation and move Go's counters byte for byte as Go's creation does; Python workers register
where Go's leader counts workers, and are counted by partarchive's leader with Go's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.runtime import LeaderSettings
from archiver.status import collect_status
from codec.gojson import GoTime, go_string
from layers import ActiveLayer, KeySchema, NotLeader
from layers.active.planning import PlanningLayer, Run
from tests.elk_fixtures import delete_prefix, load_dump
from tests.go_worker import GoWorker
from tests.helpers import wait_for
from tests.test_elk_side_by_side import LAYOUT, go_layout_of
from tests.test_runtime import Running

GO_NS = "my-app"  # the fixture's namespace (NewMgr's first argument)
GO_LEADER = "my-app-worker-6d8f7b9c4-2xkqp-1-8c1f3a2e"  # who holds its leader lock


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    yield f"{namespace}:"
    delete_prefix(real_redis, f"{namespace}:")


def bound(prefix: str) -> Config:
    return Config(namespace="elk", elk_prefix=prefix, elk_namespace=GO_NS)


def plans(client: redis.Redis, keys: KeySchema) -> PlanningLayer:
    return PlanningLayer(ActiveLayer(client, keys))


def test_the_leader_stands_aside_for_go_s_leader_and_holds_go_s_lock_when_it_leads(
    real_redis: redis.Redis, prefix: str
) -> None:
    load_dump(real_redis, prefix)  # Go's leader holds its lock (loaded without its time to live)
    config = bound(prefix)
    keys = config.keys
    p = plans(real_redis, keys)
    go_lock = keys.elk.leader_lock(GO_NS)  # type: ignore[union-attr]
    assert keys.go_leader_lock == [go_lock] and go_lock == f"elk:{prefix}my-app:leader_lock"
    got = p.lead("py-1", 0, 30)
    assert not got.leads and got.go and got.holder == GO_LEADER
    assert not real_redis.exists(keys.leader_lock) and real_redis.get(go_lock) == GO_LEADER.encode()
    assert collect_status(real_redis, config)["leader"]["leader"] == f"elk_coordinator:{GO_LEADER}"

    real_redis.delete(go_lock)  # Go's leader is gone: its lock expired
    got = p.lead("py-1", 0, 30)
    assert got.leads and real_redis.get(go_lock) == b"py-1" and 29_000 < real_redis.pttl(go_lock) <= 30_000
    go = GoWorker(real_redis, prefix, "go-host-9-1234abcd")
    assert not go.try_elect(GO_NS)  # Go's leaders stand aside: their SET NX fails
    real_redis.pexpire(go_lock, 5000)
    assert p.lead("py-1", got.token, 30).leads and real_redis.pttl(go_lock) > 29_000  # renewed with the lease
    assert collect_status(real_redis, config)["leader"]["leader"] == "py-1"

    real_redis.delete(go_lock)  # lost (expired in a stall, say), and Go's leader took it
    assert go.try_elect(GO_NS)
    again = p.lead("py-1", got.token, 30)
    assert not again.leads and again.go and again.holder == go.worker_id
    assert not real_redis.exists(keys.leader_lock)  # the lease given up: its token writes nothing more
    real_redis.hset(keys.elk.stats, "last_allocated_id", "3000")  # type: ignore[union-attr]
    with pytest.raises(NotLeader, match="no longer leads"):
        p.extend(got.token, 5000, 1000)
    assert real_redis.hlen(keys.plan) == 0

    real_redis.delete(go_lock)
    got = p.lead("py-2", 0, 30)
    assert p.resign("py-2", got.token) and not real_redis.exists(go_lock)  # given back: Go may lead at once
    assert go.try_elect(GO_NS)


def test_the_fixture_s_allocation_is_used_up_and_nothing_is_written(real_redis: redis.Redis, prefix: str) -> None:
    """The fixture's Go counter holds ``9.2233720368548e+18`` (a back-fill of 64-bit ids): every ID up to
    2^63 - 1 counts as allocated by Go, so nothing can be planned, and Go's counters stay as they are."""
    load_dump(real_redis, prefix)
    keys = bound(prefix).keys
    real_redis.delete(keys.elk.leader_lock(GO_NS))  # type: ignore[union-attr]
    p = plans(real_redis, keys)
    token = p.lead("py-1", 0, 30).token
    stats = real_redis.hgetall(keys.elk.stats)  # type: ignore[union-attr]
    assert stats[b"last_allocated_id"] == b"9.2233720368548e+18"
    start, adopted = p.state().start(1)
    assert start > 2**63 - 1 and adopted == (1, 2**63 - 1)  # past the last int64
    assert p.extend(token, 2**63 - 1, 1000) is None
    assert real_redis.hgetall(keys.elk.stats) == stats and real_redis.hlen(keys.plan) == 0  # type: ignore[union-attr]


def test_the_plan_goes_on_from_go_s_allocation_and_moves_go_s_counters_as_go_does(
    real_redis: redis.Redis, prefix: str
) -> None:
    keys = bound(prefix).keys
    go = GoWorker(real_redis, prefix, "go-host-1-8c1f3a2e")
    go.create(3, size=1000)  # Go's leader: pids 1..3, ids 1..3000
    p = plans(real_redis, keys)
    token = p.lead("py-1", 0, 30).token
    made = p.extend(token, 5500, 1000)
    assert made is not None and list(made.pids) == [4, 5, 6] and (made.min_id, made.max_id) == (3001, 5500)
    for pid in made.pids:
        assert go_layout_of(real_redis.hget(keys.active, str(pid))) == LAYOUT["pending"]  # Go's records
    stats = real_redis.hgetall(keys.elk.stats)  # type: ignore[union-attr]
    assert {k: stats[k] for k in (b"total", b"pending", b"max_partition_id", b"last_allocated_id")} == {
        b"total": b"6", b"pending": b"6", b"max_partition_id": b"6", b"last_allocated_id": b"5500"}  # fmt: skip
    assert p.go_spans() == [(1, 3000)] and p.runs() == [Run(4, 6, 3001, 5500, 1000)]  # Go's span, then ours

    before = real_redis.hgetall(keys.elk.stats)  # type: ignore[union-attr]
    ActiveLayer(real_redis, keys).create_partitions(-10_000, -7_001, 1000)  # lower IDs, by hand: not raised
    after = real_redis.hgetall(keys.elk.stats)  # type: ignore[union-attr]
    assert (after[b"last_allocated_id"], after[b"max_partition_id"], after[b"total"]) == (b"5500", b"9", b"9")
    assert after[b"pending"] == b"%d" % (int(before[b"pending"]) + 3)
    p.resign("py-1", token)  # Go's leader leads again, and goes on from where the plan ended
    assert go.create(2, size=1000) == [10, 11]
    assert go.get(10).min_id == 5501 and go.get(11).max_id == 7500
    token = p.lead("py-1", 0, 30).token
    made = p.extend(token, 9000, 1000)
    assert made is not None and made.min_id == 7501 and list(made.pids) == [12, 13]
    assert p.go_spans() == [(1, 3000), (5501, 7500)] and p.runs()[-1] == Run(12, 13, 7501, 9000, 1000)
    report = p.check(token)
    assert report is not None and report.holes == [] and report.overlaps == []  # Go's partitions: in Go's spans

    # Go's counters as Go's Lua writes them: %.14g past 10^14 (rounded), raised only, and not taken for
    # an allocation of Go's when the plan reads them back
    real_redis.hset(keys.elk.stats, "last_allocated_id", "123456789012345")  # type: ignore[union-attr]
    made = p.extend(token, 123456789013345, 1000)
    assert made is not None and made.min_id == 123456789012346
    after = real_redis.hget(keys.elk.stats, "last_allocated_id")  # type: ignore[union-attr]
    assert after == b"%.14g" % 123456789013345.0 == b"1.2345678901334e+14"  # (a tie, to even)
    assert p.state().start(1) == (123456789013346, None)
    real_redis.hset(keys.elk.stats, "last_allocated_id", "-5")  # type: ignore[union-attr]
    p.extend(token, 123456789014345, 1000)
    assert real_redis.hget(keys.elk.stats, "last_allocated_id") == b"1.2345678901434e+14"  # type: ignore[union-attr]


class Endless:
    """A planner of a source that always has more."""

    def partition_size(self) -> int:
        return 100

    def next_max_id(self, start_id: int, size: int) -> int:
        return start_id + size - 1


def test_python_workers_register_where_go_s_leader_counts_them_and_count_go_s(
    real_redis: redis.Redis, prefix: str
) -> None:
    keys = bound(prefix).keys
    elk = keys.elk
    assert elk is not None
    go_workers = [GoWorker(real_redis, prefix, f"go-host-{i}-0000000{i}") for i in (1, 2)]
    for go in go_workers:
        go.register()
    run = Running("threads", real_redis, keys, lambda part, lease: lease.wait_lost(30), window=2,
                  planner=Endless(), leader=LeaderSettings(lease_s=3, interval_s=0.1, multiple=2))  # fmt: skip
    me = run.worker.worker_id
    run.start()
    try:
        wait_for(lambda: real_redis.exists(elk.heartbeat(me)) == 1, 10, "the process registered")
        listed = real_redis.zrange(elk.workers, 0, -1, withscores=True)
        member, score = {orjson.loads(m)["worker_id"]: (m, s) for m, s in listed}[me]
        at = orjson.loads(member)["register_time"]
        assert member == f'{{"worker_id":{go_string(me)},"register_time":"{at}"}}'.encode()  # Go's WorkerInfo
        registered = GoTime.parse(at)
        assert score == float(registered.seconds * 10**9 + registered.nanos)  # scored by its time in ns
        assert real_redis.get(elk.heartbeat(me)) == GoTime(registered.seconds, 0, registered.offset).format().encode()
        assert 170_000 < real_redis.pttl(elk.heartbeat(me)) <= 180_000
        counted = {k.decode().rsplit("heartbeat:", 1)[1] for k in real_redis.keys(f"elk:{prefix}heartbeat:*")}
        assert counted == {me, *(go.worker_id for go in go_workers)}  # Go's GetActiveWorkers: KEYS heartbeat:*
        # the leader counts Go's live workers with Go's window (3): 2 x (2 + 2 x 3) partitions ahead
        wait_for(lambda: ActiveLayer(real_redis, keys).counts()["pending"] == 16, 10, "16 partitions pending")
        time.sleep(0.3)
        assert ActiveLayer(real_redis, keys).counts() | {"failed": 0} == {
            "pending": 16, "claimed": 0, "running": 2, "failed": 0}  # fmt: skip
    finally:
        run.stop(now=True)
    stopped = {orjson.loads(m)["worker_id"]: m for m in real_redis.zrange(elk.workers, 0, -1)}[me]
    stop_time = orjson.loads(stopped)["stop_time"]
    assert GoTime.parse(stop_time).nanos == 0 and real_redis.zscore(elk.workers, stopped) == score
    assert not real_redis.exists(elk.heartbeat(me))
    scratch = f"elk:{prefix}scratch"  # Go's UnregisterWorker on the registration as it was: the same bytes
    real_redis.zadd(scratch, {member: score})
    GoWorker(real_redis, prefix, me).unregister(stop_time, scratch)
    assert real_redis.zrange(scratch, 0, -1) == [stopped]
    if b"stop_time" in stopped[-40:]:  # Redis 7.0's cjson, as the fixture's stopped members are laid out
        assert stopped == member[:-1] + f',"stop_time":"{stop_time}"}}'.encode()

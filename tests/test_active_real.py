"""Active-layer behaviour that only a real engine can prove: races, atomicity under failure."""

from __future__ import annotations

import threading

import pytest
import redis

from codec import ValidationError
from layers import ActiveLayer, KeySchema, NotOwner, WrongKeyType
from tests.conftest import delete_namespace


def test_two_threads_race_to_claim_one_partition(real_redis: redis.Redis, namespace: str) -> None:
    for _ in range(20):
        layer = ActiveLayer(real_redis, namespace)
        delete_namespace(real_redis, namespace)
        layer.create_partitions(1, 1000, 1000)
        barrier = threading.Barrier(2)
        got: dict[str, object] = {}

        def claim(name: str, layer: ActiveLayer, barrier: threading.Barrier, got: dict[str, object]) -> None:
            barrier.wait()
            got[name] = layer.claim(name)

        threads = [threading.Thread(target=claim, args=(n, layer, barrier, got)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [name for name, part in got.items() if part is not None]
        assert len(winners) == 1
        loser = "b" if winners == ["a"] else "a"
        try:
            layer.complete(1, loser)
            raise AssertionError("the loser must not be able to complete")
        except NotOwner:
            pass


def test_many_workers_claim_each_partition_once(real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 500_000, 1000)
    claimed: list[int] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        while (part := layer.claim(name)) is not None:
            with lock:
                claimed.append(part.partition_id)
            layer.complete(part.partition_id, name)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == list(range(1, 501))
    assert real_redis.xlen(KeySchema(namespace).queue) == 500
    assert layer.size() == 0


def test_concurrent_completes_append_exactly_one_entry(real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w")
    barrier = threading.Barrier(6)
    results = []

    def complete() -> None:
        barrier.wait()
        results.append(layer.complete(1, "w"))

    threads = [threading.Thread(target=complete) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(not r.already_completed for r in results) == 1
    assert real_redis.xlen(KeySchema(namespace).queue) == 1


def test_complete_leaves_no_trace_when_the_queue_append_fails(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w")
    before = real_redis.hget(keys.active, "1")
    real_redis.set(keys.queue, "not a stream")  # checked before the first write
    with pytest.raises(WrongKeyType, match=f"{keys.queue} is a string, not a stream"):
        layer.complete(1, "w")
    assert real_redis.hget(keys.active, "1") == before
    assert real_redis.getbit(keys.done, 1) == 0
    assert layer.counts()["claimed"] == 1
    real_redis.delete(keys.queue)
    assert layer.complete(1, "w").archived is not None
    assert real_redis.xlen(keys.queue) == 1 and layer.size() == 0


def test_removal_and_queue_entry_are_seen_together(real_redis: redis.Redis, namespace: str) -> None:
    """A reader polling both keys atomically never sees the record gone without its entry."""
    keys = KeySchema(namespace)
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 200_000, 1000)
    stop = threading.Event()
    violations: list[tuple[int, int]] = []

    def observe() -> None:
        while not stop.is_set():
            pipe = real_redis.pipeline(transaction=True)
            pipe.hlen(keys.active)
            pipe.xlen(keys.queue)
            active, queued = pipe.execute()
            if active + queued != 200:
                violations.append((active, queued))

    watcher = threading.Thread(target=observe)
    watcher.start()
    while (part := layer.claim("w")) is not None:
        layer.complete(part.partition_id, "w")
    stop.set()
    watcher.join()
    assert violations == []
    assert real_redis.xlen(keys.queue) == 200


def test_two_leaders_creating_at_once_each_get_one_contiguous_run(real_redis: redis.Redis, namespace: str) -> None:
    barrier = threading.Barrier(2)
    got: dict[int, range] = {}

    def leader(base: int) -> None:
        layer = ActiveLayer(real_redis, namespace)
        barrier.wait()
        got[base] = layer.create_partitions(base, base + 12_000 * 10 - 1, 10)

    threads = [threading.Thread(target=leader, args=(base,)) for base in (1, 10**9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in got.values()) == [12_000, 12_000]
    assert set(got[1]).isdisjoint(got[10**9])
    layer = ActiveLayer(real_redis, namespace)
    for base, pids in got.items():
        firsts = [layer.get(pid).min_id for pid in (pids[0], pids[6_000], pids[-1])]  # type: ignore[union-attr]
        assert firsts == [base, base + 60_000, base + 119_990]


def test_a_creation_that_would_pass_the_pid_limit_writes_nothing(real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    real_redis.hset(layer.keys.meta, "last_pid", 2**32 - 8_000)
    with pytest.raises(ValidationError, match="past 2"):
        layer.create_partitions(1, 10_000, 1)
    assert real_redis.hlen(layer.keys.active) == 0 and not real_redis.exists(layer.keys.pending)
    assert real_redis.hget(layer.keys.meta, "last_pid") == str(2**32 - 8_000).encode()


def test_leases_use_the_servers_clock_whatever_the_hosts_say(real_redis: redis.Redis, namespace: str) -> None:
    import time

    from layers.active.clock import ServerClock

    behind = ActiveLayer(real_redis, namespace, clock=ServerClock(real_redis, local=lambda: time.time() - 3600))
    ahead = ActiveLayer(real_redis, namespace, clock=ServerClock(real_redis, local=lambda: time.time() + 3600))
    behind.create_partitions(1, 2000, 1000)
    part = behind.claim("slow-clock")
    assert part is not None
    server_now = real_redis.time()[0]  # type: ignore[index]
    assert abs(part.claimed_at - server_now) <= 2  # the server's time, not an hour ago
    taken = ahead.claim("fast-clock")  # an hour ahead: by its own clock the lease above is long stale
    assert taken is not None and taken.partition_id == 2
    assert behind.get(1).worker_id == "slow-clock"  # type: ignore[union-attr]

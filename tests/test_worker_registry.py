"""The Redis-backed worker registry (shared suite: fakeredis and the real engine)."""

from __future__ import annotations

import threading

import redis

from bench.workload import standard_workload
from codec import WorkerNumbering, decode_blob, encode_blob
from layers import KeySchema
from layers.archive.workers import WorkerRegistrar


def test_numbers_are_stable_and_shared(any_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    first = WorkerRegistrar(any_redis, keys)
    first.register(["worker2", "worker1"])
    second = WorkerRegistrar(any_redis, keys)
    second.register(["worker1", "worker3:x,y"])
    assert second.map.known_short_id("worker1") == first.map.known_short_id("worker1")
    assert sorted(second.refresh().lookup_table()) == [1, 2, 3]
    assert WorkerRegistrar(any_redis, keys).refresh() == second.map


def test_blob_encoded_by_one_archiver_decodes_in_another(any_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    records = list(standard_workload(100))
    writer = WorkerRegistrar(any_redis, keys)
    blob = encode_blob(records, writer.register(r.worker_id for r in records))
    reader = WorkerRegistrar(any_redis, keys)
    assert decode_blob(blob, reader.refresh()) == records


def test_racing_registrations_agree(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    maps: list[WorkerNumbering] = []
    barrier = threading.Barrier(4)

    def register() -> None:
        registry = WorkerRegistrar(real_redis, keys)
        barrier.wait()
        maps.append(registry.register([f"w{i}" for i in range(50)]))

    threads = [threading.Thread(target=register) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(maps) == 4 and all(m == maps[0] for m in maps)
    assert sorted(maps[0].lookup_table()) == list(range(1, 51))

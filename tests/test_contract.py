"""The contract of the queue, archive, tiers and statistics, run on fakeredis and on the real
engine (the `any_redis` fixture): the same calls must give the same results on each. Where a case
goes through the worker SDK or the query router, it runs with the blocking and the asyncio ones
(`flavour`)."""

from __future__ import annotations

import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.router import Source
from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy
from layers.archive.queue import QueueEntry
from stats import StatsChecker, StatsReader
from stats.rollup import commit_buffer
from tests.flavours import Flavour

NOW = 1_763_900_000


def _parts(first: int, count: int) -> list[ArchivedPartition]:
    return [
        ArchivedPartition(p, (p - 1) * 100 + 1, p * 100, f"w{p % 3}", NOW + p, 10 + p % 5)
        for p in range(first, first + count)
    ]


def _completed(client: redis.Redis, namespace: str, count: int, flavour: Flavour) -> KeySchema:
    sdk = flavour.active(client, namespace, clock=lambda: float(NOW))
    sdk.create_partitions(1, count * 100, 100)
    for _ in range(count):
        part = sdk.claim("w")
        assert part is not None
        sdk.complete(part.partition_id, "w")
    return sdk.keys


def test_queue_delivers_takes_over_and_dead_letters(any_redis: redis.Redis, namespace: str, flavour: Flavour) -> None:
    keys = _completed(any_redis, namespace, 6, flavour)
    queue = ArchiveQueue(any_redis, keys)
    queue.ensure_group()
    queue.ensure_group()  # idempotent
    first = queue.read_new("a", 4, 0)
    assert len(first) == 4 and all(e.deliveries == 1 for e in first)
    state = queue.state()
    assert (state.length, state.pending, state.lag) == (6, 4, 2)
    taken = queue.take_over("b", 0, 10)
    assert sorted(e.entry_id for e in taken) == sorted(e.entry_id for e in first)
    assert all(e.deliveries == 2 for e in taken)
    queue.dead_letter(taken[0], "poison")
    assert queue.state().dead_letters == 1 and queue.state().length == 5
    [letter] = queue.dead_letters()
    assert letter["reason"] == "poison" and letter["requeueable"]
    assert queue.requeue([letter["id"]]) == (1, 0)
    assert queue.state().dead_letters == 0 and queue.state().length == 6


def test_commit_counts_each_partition_once(any_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    archive = ArchiveLayer(any_redis, keys)
    ArchiveQueue(any_redis, keys).ensure_group()
    stats = commit_buffer(archive, flush_count=1000)
    parts = _parts(1, 10)
    archive.write_detail(parts)
    stats.add([("-", p) for p in parts])
    stats.flush()
    archive.write_detail(parts[:3])
    stats.add([("-", p) for p in parts[:3] + parts[:1]])  # redelivered, and one twice in a batch
    stats.flush()
    assert archive.archived_total() == 10
    assert archive.indexed([1, 10, 11]) == [True, True, False]
    view = StatsReader(any_redis, keys).stats()
    assert view["completed"]["total_completed"] == 10
    assert view["completed"]["total_duration"] == sum(p.duration for p in parts)
    assert StatsChecker(any_redis, keys).check().ok


def test_batches_seal_once_and_read_back(any_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    archive = ArchiveLayer(any_redis, keys, TierPolicy(compressed_from=0, seal_idle_s=0))
    ArchiveQueue(any_redis, keys).ensure_group()
    parts = _parts(100, 250)
    archive.stage(parts[:50])
    by_batch: dict[int, list[ArchivedPartition]] = {}
    for p in parts[50:]:
        by_batch.setdefault(p.partition_id // 100, []).append(p)
    assert archive.sealing.seal_many(by_batch) == 3
    assert archive.sealing.seal_idle() == 0  # batch 1 was sealed with its staged records
    for b in (1, 2, 3):
        blob = archive.batch_blob(b)
        assert archive.sealing.decode_batch(blob) == [p for p in parts if p.partition_id // 100 == b]  # type: ignore[arg-type]
    assert archive.open_batch_count() == 0 and sum(archive.sealing.seals.values()) == 3


def test_dead_letter_entries_round_trip(any_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    queue = ArchiveQueue(any_redis, keys)
    queue.ensure_group()
    queue.dead_letter(QueueEntry("0-1", b"{}"), "hand-made")
    assert queue.purge_dead_letters() == 1 and queue.state().dead_letters == 0


def test_the_archiver_moves_through_every_tier_and_answers_for_each(
    server_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    sdk = flavour.active(server_redis, namespace)
    sdk.create_partitions(1, 900 * 10, 10)
    config = Config(
        namespace=namespace, block_ms=1, compressed_from=200, summary_above=600, batch_size=50,
        seal_idle_s=0, maintenance_interval_s=0, stats_flush_count=64,
    )  # fmt: skip
    daemon = ArchiverDaemon(server_redis, config, consumer="contract")
    router = flavour.router(server_redis, daemon.keys, policy=config.policy)
    tiers = []
    for _ in range(9):  # 100 at a time, archiving as it goes
        for _ in range(100):
            part = sdk.claim("w")
            assert part is not None
            sdk.complete(part.partition_id, "w")
        drain(daemon)
        while daemon.maintain(force=True):  # tier moves run in bounded steps
            pass
        tiers.append(daemon.archive.tier().value)
    assert tiers[0] == "simple" and "compressed" in tiers and tiers[-1] == "summary"
    assert daemon.archive.archived_total() == 900 and daemon.archive.simple_size() == 0
    answers = [router.get(pid) for pid in range(1, 901)]
    assert all(a.found and a.partition is not None and a.source is Source.BATCH for a in answers)
    assert [a.partition.max_id for a in answers if a.partition] == [pid * 10 for pid in range(1, 901)]
    assert StatsReader(server_redis, daemon.keys).stats()["completed"]["total_completed"] == 900
    assert StatsChecker(server_redis, daemon.keys, policy=config.policy).check().ok

"""Tier transitions' contract on every engine (`any_redis`: fakeredis, the real engine, a local
cluster): the move out of the simple hash goes in bounded steps, seals every batch once and keeps
every partition readable; in the summary tier only batches past the retention expire, and the
state reports both. The router's answers are checked blocking and on asyncio (`flavour`)."""

from __future__ import annotations

import time

import redis

from archiver.router import Source
from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, Tier, TierPolicy, migrate_step
from layers.archive.transitions import sweep_expired, transition_state
from tests.flavours import Flavour
from tests.helpers import archive_now


def _parts(pids: range, completed_at: int) -> list[ArchivedPartition]:
    return [ArchivedPartition(p, p * 10, p * 10 + 9, f"w{p % 5}", completed_at - p % 7, 30) for p in pids]


def _archive(client: redis.Redis, namespace: str, policy: TierPolicy) -> ArchiveLayer:
    keys = KeySchema.of(namespace, client=client)
    ArchiveQueue(client, keys).ensure_group()
    return ArchiveLayer(client, keys, policy)


def test_the_move_out_of_the_simple_hash_is_stepwise_and_seals_each_batch_once(
    any_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    now = int(time.time())
    parts = _parts(range(1, 1201), now)
    simple = _archive(any_redis, namespace, TierPolicy(compressed_from=10**6, summary_above=10**7))
    archive_now(simple, [("-", p) for p in parts])
    assert simple.simple_size() == 1200 and simple.tier() is Tier.SIMPLE

    archive = ArchiveLayer(any_redis, simple.keys, TierPolicy(compressed_from=1000, summary_above=10**6))
    assert archive.tier() is Tier.COMPRESSED
    state = transition_state(archive)
    assert state.simple_left == 1200 and state.move_eta_s is None  # nothing moved yet: no rate
    steps = 0
    while migrate_step(archive, max_batches=2):
        steps += 1
    assert steps >= 6  # 13 batches (pids 1..1200), two at a time
    assert archive.simple_size() == 0 and archive.open_batch_count() == 0
    assert max(archive.sealing.seals.values()) == 1 and len(archive.sealing.seals) == 13
    stored = [p for b in range(13) for p in archive.sealing.decode_batch(archive.batch_blob(b) or b"")]  # type: ignore[arg-type]
    assert stored == parts
    state = transition_state(archive)
    assert (state.simple_left, state.moved, state.move_eta_s) == (0, 1200, 0.0)
    router = flavour.router(any_redis, archive.keys, archive=archive)
    assert {router.get(pid).source for pid in (1, 600, 1200)} == {Source.BATCH}


def test_only_batches_past_the_retention_expire(any_redis: redis.Redis, namespace: str, flavour: Flavour) -> None:
    now = int(time.time())
    policy = TierPolicy(compressed_from=0, summary_above=0, retention_s=3600, seal_idle_s=0)
    archive = _archive(any_redis, namespace, policy)
    old, young = _parts(range(100, 300), now - 2 * 86400), _parts(range(300, 400), now)
    archive_now(archive, [("-", p) for p in old + young])
    assert archive.tier() is Tier.SUMMARY
    archive.sealing.seal_all()
    while migrate_step(archive, now=now - 2 * 86400):  # the expiry index; nothing was past retention then
        pass
    assert archive.batch_blob(1) is not None
    assert sweep_expired(archive, now=now) == 200  # batches 1 and 2
    assert archive.batch_blob(1) is None and archive.batch_blob(2) is None
    assert archive.batch_blob(3) is not None
    assert sweep_expired(archive, now=now) == 0
    state = transition_state(archive, now=now)
    assert state.expired == 200 and state.expired_share == round(200 / 300, 6) and state.retention_s == 3600
    router = flavour.router(any_redis, archive.keys, archive=archive)
    assert router.get(150).source is Source.EXPIRED and router.get(350).source is Source.BATCH
    assert archive.indexed([150, 350]) == [True, True]  # the index stays: "ever completed"

"""Batch sealing's contract on every engine (`any_redis`: fakeredis, the real engine, a local cluster):
staged records are sealed once their batch is idle, a straggler re-seals its batch with everything
it held, sealing again changes nothing, and a batch sealed from records in hand keeps what was staged."""

from __future__ import annotations

import time

import redis

from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy

NOW = 1_763_900_000


def _parts(pids: range) -> list[ArchivedPartition]:
    return [ArchivedPartition(p, p * 10, p * 10 + 9, f"w{p % 4}", NOW + p, 5 + p % 3) for p in pids]


def _batched(client: redis.Redis, namespace: str, seal_idle_s: float = 0) -> ArchiveLayer:
    keys = KeySchema.of(namespace, client=client)
    ArchiveQueue(client, keys).ensure_group()
    return ArchiveLayer(client, keys, TierPolicy(compressed_from=0, seal_idle_s=seal_idle_s))


def _stored(archive: ArchiveLayer, batch_no: int) -> list[ArchivedPartition]:
    blob = archive.batch_blob(batch_no)
    return [] if blob is None else archive.sealing.decode_batch(blob)


def test_staged_records_are_sealed_once_their_batch_is_idle(any_redis: redis.Redis, namespace: str) -> None:
    archive = _batched(any_redis, namespace, seal_idle_s=600)
    parts = _parts(range(200, 260))
    archive.stage(parts)
    assert archive.open_batch_count() == 1 and archive.batch_blob(2) is None
    assert archive.sealing.seal_idle() == 0  # staged just now: not idle for ten minutes yet
    assert archive.sealing.seal_idle(now=time.time() + 601) == 1
    assert _stored(archive, 2) == parts
    assert archive.open_batch_count() == 0 and archive.sealing.seals[2] == 1
    assert archive.sealing.seal_idle(now=time.time() + 601) == 0  # nothing left open


def test_a_straggler_reseals_its_batch_with_everything(any_redis: redis.Redis, namespace: str) -> None:
    archive = _batched(any_redis, namespace)
    first, late = _parts(range(300, 350)), _parts(range(350, 351))
    archive.stage(first)
    assert archive.sealing.seal(3)
    archive.stage(late)
    assert archive.open_batch_count() == 1
    assert archive.sealing.seal_idle(now=time.time() + 1) == 1
    assert _stored(archive, 3) == first + late and archive.sealing.seals[3] == 2
    assert not any_redis.exists(archive.keys.staging(3))


def test_sealing_again_changes_nothing(any_redis: redis.Redis, namespace: str) -> None:
    archive = _batched(any_redis, namespace)
    parts = _parts(range(400, 500))
    archive.stage(parts)
    assert archive.sealing.seal_all() == 1
    blob = archive.batch_blob(4)
    assert archive.sealing.seal(4) is False and archive.sealing.seal_all() == 0
    assert archive.batch_blob(4) == blob and archive.sealing.seals[4] == 1


def test_a_batch_sealed_from_records_in_hand_keeps_what_was_staged(any_redis: redis.Redis, namespace: str) -> None:
    archive = _batched(any_redis, namespace)
    staged, in_hand = _parts(range(500, 520)), _parts(range(520, 600))
    archive.stage(staged)
    assert archive.sealing.seal_many({5: in_hand, 6: _parts(range(600, 610))}) == 2
    assert _stored(archive, 5) == staged + in_hand
    assert [p.partition_id for p in _stored(archive, 6)] == list(range(600, 610))
    assert archive.open_batch_count() == 0

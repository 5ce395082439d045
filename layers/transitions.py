"""Background tier transitions, in bounded, resumable, idempotent steps.

simple -> compressed: move records out of the simple hash into sealed batches. Each step
takes a chunk with ``HSCAN 0`` (the hash only shrinks, so the hash itself is the cursor),
seals the chunk's batches, and only then deletes the chunk from the hash: a reader finds
every partition in one place or the other, and a crash just repeats the step.

-> summary: give every sealed batch its expiry (newest completion + retention), walking batch
numbers with a cursor kept in the archive meta hash.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from codec import ArchivedPartition, DecodeError
from codec.elk import ElkRecord, as_archived, parse_archived
from layers.archive import ArchiveLayer
from layers.replies import as_text
from layers.tiers import Tier


def migrate_step(archive: ArchiveLayer) -> int:
    """Do one bounded step of whatever transition is due; returns the items it handled (0 = idle)."""
    tier = archive.tier()
    if tier is Tier.SIMPLE:
        return 0
    moved = _move_simple_chunk(archive, tier)
    if moved or tier is not Tier.SUMMARY:
        return moved
    return _expire_batches_chunk(archive)


def _move_simple_chunk(archive: ArchiveLayer, tier: Tier) -> int:
    keys, policy = archive.keys, archive.policy
    reply: Any = archive.redis.hscan(keys.completed, 0, count=policy.migrate_chunk)
    raw = reply[1]
    if not raw:
        return 0
    parts: list[ArchivedPartition | ElkRecord] = []
    corrupt: list[tuple[Any, Any]] = []
    for field, value in raw.items():
        try:
            rec = parse_archived(value)
            as_archived(rec)
            parts.append(rec)
        except DecodeError:
            corrupt.append((field, value))
    by_batch: dict[int, list[ArchivedPartition | ElkRecord]] = defaultdict(list)
    for part in parts:
        by_batch[policy.batch_of(part.partition_id)].append(part)
    archive.stage(parts)
    for batch_no in sorted(by_batch):
        archive.seal(batch_no, tier)
    pipe = archive.redis.pipeline(transaction=False)
    for field, value in corrupt:
        pipe.xadd(
            keys.dead_letter, {"entry": f"simple:{as_text(field)}", "reason": "corrupt simple-tier record", "p": value}
        )
    pipe.hdel(keys.completed, *raw.keys())
    pipe.execute()
    return len(raw)


def _expire_batches_chunk(archive: ArchiveLayer) -> int:
    keys, policy, r = archive.keys, archive.policy, archive.redis
    meta: Any = r.hmget(keys.archive_meta, ["expire_cursor", "max_pid"])
    cursor = int(meta[0] or 0)
    last_batch = policy.batch_of(int(meta[1] or 0))
    if cursor > last_batch:
        return 0
    numbers = list(range(cursor, min(last_batch + 1, cursor + policy.migrate_chunk // 10 + 1)))
    pipe = r.pipeline(transaction=False)
    for b in numbers:
        pipe.get(keys.batch(b))
        pipe.ttl(keys.batch(b))
    replies = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for b, blob, ttl in zip(numbers, replies[::2], replies[1::2], strict=True):
        if blob is None or ttl != -1:
            continue
        try:
            newest = max(p.completed_at for p in archive.decode_batch(blob))
        except DecodeError:
            continue  # left for the verify/repair tools; the router already degrades on it
        pipe.expireat(keys.batch(b), newest + policy.retention_s)
    pipe.hset(keys.archive_meta, "expire_cursor", numbers[-1] + 1)
    pipe.execute()
    return len(numbers)

"""Background tier transitions and expiry, in bounded, resumable, idempotent steps.

simple -> compressed: walk the simple hash in partition order, batch by batch, with a cursor
kept in the archive meta hash (``move_cursor``). The index bitmap says where archived
partitions are (BITPOS skips the gaps), one HMGET per batch reads what the simple hash holds
of it, and each batch is sealed once from its simple records, its staging and its blob
together; only then are the simple records deleted (each only while it holds what was read),
and only then does the cursor move on. A kill -9 anywhere repeats at most the batches in hand;
readers find every partition in one place or the other throughout. Records that arrive behind
the cursor (an archiver that read the tier just before it changed) are moved by a last pass
over what is left, in id order. Nothing depends on how SCAN pages a hash.

Batch keys from versions before shelves are moved into shelves by `shelve_step`, a cursor
walk over the batch numbers that runs once per namespace (a namespace begun with shelves skips it).

-> summary: every sealed batch goes into the expiry index (batch -> newest completion). The
sweep deletes the batches whose newest completion is older than the stored retention, reading
only those: it costs what expires, not what is stored, and marks them expired (a bit per batch).
The index bits and the statistics stay, so the router answers "expired" with the range summary.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from codec import ArchivedPartition, DecodeError, blob_record_count
from codec.stored import as_archived, parse_archived
from layers.archive.layer import ArchiveLayer
from layers.archive.shelves import SlotWrite, StoredBatch
from layers.archive.tiers import Tier, TierPolicy
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts
from layers.plumbing.settings import stored_float, stored_int

_STRAGGLER_HKEYS_LIMIT = 100_000
_EXPIRY_INDEX_STEP = 200
_SHELVE_STEP = 256


@dataclass(frozen=True, slots=True)
class TransitionState:
    tier: str
    simple_left: int
    move_cursor: int
    last_batch: int
    moved: int
    move_rate: float
    move_eta_s: float | None
    expired: int
    expired_share: float
    expiry_indexed: bool
    expiry_lag_s: float
    last_sweep_s: float
    retention_s: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def migrate_step(
    archive: ArchiveLayer, max_batches: int | None = None, now: float | None = None, *, defer_seals: bool = False
) -> int:
    """Do one bounded step of whatever is due; returns the items it handled (0 = nothing to do).

    ``defer_seals``: compression is skipped (a critical backlog, `layers.control.pressure`): nothing is
    sealed or moved, so maintenance does not compete with the drain; only the expiry sweep runs,
    since it frees memory."""
    tier = archive.tier()
    if tier is Tier.SIMPLE:
        return 0
    if defer_seals:
        return sweep_expired(archive, now=now) if tier is Tier.SUMMARY else 0
    moved = seal_unsealed_step(archive, tier, max_batches) or move_simple_step(archive, tier, max_batches)
    moved = moved or shelve_step(archive)
    if moved or tier is not Tier.SUMMARY:
        return moved
    return index_expiry_step(archive) or sweep_expired(archive, now=now)


def _batches_per_step(archive: ArchiveLayer, max_batches: int | None) -> int:
    return max(1, max_batches or archive.policy.migrate_chunk // archive.policy.batch_size)


def move_simple_step(archive: ArchiveLayer, tier: Tier, max_batches: int | None = None) -> int:
    """Move the next batches' worth of the simple hash into sealed batches; 0 once it is empty."""
    r, keys, policy = archive.redis, archive.keys, archive.policy
    if not r.hlen(keys.completed):
        return 0
    meta: Any = r.hmget(keys.archive_meta, ["move_cursor", "max_pid"])
    cursor = int(meta[0] or 0)
    last_batch = policy.batch_of(int(meta[1] or 0))
    count = _batches_per_step(archive, max_batches)
    if cursor > last_batch:
        return _move_stragglers(archive, tier, count)
    first_pid: Any = r.bitpos(keys.index, 1, (cursor * policy.batch_size) // 8)
    if first_pid < 0 or policy.batch_of(first_pid) > last_batch:
        r.hset(keys.archive_meta, "move_cursor", last_batch + 1)
        return 1
    first = max(cursor, policy.batch_of(first_pid))
    numbers = list(range(first, min(last_batch, first + count - 1) + 1))
    moved = _move_batches(archive, tier, {b: _batch_pids(archive, b) for b in numbers})
    pipe = r.pipeline(transaction=False)
    pipe.hsetnx(keys.archive_meta, "move_started_at", int(time.time()))
    pipe.hset(keys.archive_meta, "move_cursor", numbers[-1] + 1)
    pipe.hincrby(keys.archive_meta, "moved", moved)
    pipe.execute()
    return max(moved, 1)


def seal_unsealed_step(archive: ArchiveLayer, tier: Tier, max_batches: int | None = None) -> int:
    """Seal the lowest batches whose records were stored unsealed while compression was skipped
    (`KeySchema.unsealed`), each once, from the records the simple hash holds of it; returns the
    records sealed (at least 1 when batches were found), 0 once none is left.

    A batch is taken off the set only after it was sealed and its records deleted, so a kill -9
    repeats at most the batches in hand; an archiver that stores into a batch meanwhile notes it
    again, and the check after the removal puts back a batch whose records arrived in between."""
    r, keys = archive.redis, archive.keys
    raw: Any = r.zrange(keys.unsealed, 0, _batches_per_step(archive, max_batches) - 1)
    if not raw:
        return 0
    fields = {int(b): _batch_pids(archive, int(b)) for b in raw}
    moved = _move_batches(archive, tier, fields)
    pipe = r.pipeline(transaction=False)
    pipe.zrem(keys.unsealed, *raw)
    for names in fields.values():
        pipe.hmget(keys.completed, names)
    pipe.hincrby(keys.archive_meta, "sealed_up", moved)
    replies = pipe.execute()
    again = [b for b, values in zip(fields, replies[1:-1], strict=True) if any(v is not None for v in values)]
    if again:
        r.zadd(keys.unsealed, {str(b): int(time.time() * 1000) for b in again})
    return max(moved, 1)


def _batch_pids(archive: ArchiveLayer, batch_no: int) -> list[str]:
    size = archive.policy.batch_size
    return [str(p) for p in range(max(1, batch_no * size), (batch_no + 1) * size)]


def _move_stragglers(archive: ArchiveLayer, tier: Tier, count: int) -> int:
    """Records left in the simple hash behind the cursor, the lowest batches first."""
    r, keys = archive.redis, archive.keys
    if int(r.hlen(keys.completed)) <= _STRAGGLER_HKEYS_LIMIT:  # type: ignore[arg-type]
        names: Any = r.hkeys(keys.completed)
    else:  # a full HSCAN iteration, cursor followed to 0 (pages may be empty on the way)
        names = [fld for fld, _ in r.hscan_iter(keys.completed, count=1000)]
    by_batch: dict[int, list[str]] = {}
    for name in names:
        text = as_text(name)
        pid = int(text) if text.isdigit() else 0
        by_batch.setdefault(archive.policy.batch_of(pid), []).append(text)
    chosen = {b: by_batch[b] for b in sorted(by_batch)[:count]}
    moved = _move_batches(archive, tier, chosen)
    r.hincrby(keys.archive_meta, "moved", moved)
    return max(moved, 1) if chosen else 0


def _move_batches(archive: ArchiveLayer, tier: Tier, fields: dict[int, list[str]]) -> int:
    """Seal each batch once with its simple records, then delete those records (if unchanged)."""
    r, keys = archive.redis, archive.keys
    numbers = sorted(fields)
    pipe = r.pipeline(transaction=False)
    for b in numbers:
        pipe.hmget(keys.completed, fields[b])
    replies = pipe.execute()
    found: dict[int, list[ArchivedPartition]] = {}
    read: list[tuple[str, bytes]] = []
    corrupt: list[tuple[str, bytes]] = []
    for b, values in zip(numbers, replies, strict=True):
        for name, raw in zip(fields[b], values, strict=True):
            if raw is None:
                continue
            try:
                part = as_archived(parse_archived(raw))
            except DecodeError:
                corrupt.append((name, raw))
                continue
            found.setdefault(archive.policy.batch_of(part.partition_id), []).append(part)
            read.append((name, raw))
    if found:
        archive.sealing.seal_many(found, tier)
    pipe = r.pipeline(transaction=False)
    for name, raw in corrupt:
        archive.dead_letters.note(f"simple:{name}", "corrupt simple-tier record", raw, pipe=pipe)
    pipe.execute()
    if read or corrupt:
        _delete_unchanged(archive, [*read, *corrupt])
    return len(read)


def _delete_unchanged(archive: ArchiveLayer, pairs: list[tuple[str, bytes]]) -> None:
    scripts = Scripts.of(archive.redis)
    for start in range(0, len(pairs), 500):
        args: list[Any] = []
        for name, raw in pairs[start : start + 500]:
            args += [name, raw]
        scripts("hdel_if_equal", [archive.keys.completed], args)


def shelve_step(archive: ArchiveLayer) -> int:
    """Move the batch keys of versions before shelves into shelves: a cursor walk over the batch
    numbers (``shelve_cursor``), `_SHELVE_STEP` batches a step, done once (``shelved``); a
    namespace begun with shelves has none to move. Returns the batches walked, 0 once done."""
    r, keys, policy = archive.redis, archive.keys, archive.policy
    meta: Any = r.hmget(keys.archive_meta, ["shelved", "shelve_cursor", "max_pid"])
    if meta[0]:
        return 0
    cursor = int(meta[1] or 0)
    last_batch = policy.batch_of(int(meta[2] or 0))
    if cursor > last_batch:
        r.hset(keys.archive_meta, "shelved", 1)
        return 0
    numbers = range(cursor, min(last_batch + 1, cursor + _SHELVE_STEP))
    stored = archive.shelves.read(numbers)
    old = {b: batch for b, batch in stored.items() if batch.legacy is not None}
    if archive.sealing.shelve(old) == len(old):  # else walked again: a batch sealed meanwhile is read anew
        r.hset(keys.archive_meta, "shelve_cursor", numbers[-1] + 1)
    return len(numbers)


def index_expiry_step(archive: ArchiveLayer) -> int:
    """Put batches sealed before the summary tier into the expiry index, a cursor walk (once).

    Returns the batches walked when some of them needed indexing, else 0: the walk only followed
    batches sealed in this tier (they index themselves) or none, which is no work to come back
    for at once. (While a summary-tier archive grows, the walk follows its newest batches: counted
    as work, it took maintenance's whole share of a drain.)"""
    r, keys, policy = archive.redis, archive.keys, archive.policy
    meta: Any = r.hmget(keys.archive_meta, ["expire_cursor", "max_pid"])
    cursor = int(meta[0] or 0)
    last_batch = policy.batch_of(int(meta[1] or 0))
    if cursor > last_batch:
        return 0
    numbers = list(range(cursor, min(last_batch + 1, cursor + _EXPIRY_INDEX_STEP)))
    scores: Any = r.zmscore(keys.expiry, [str(b) for b in numbers])
    missing = [b for b, score in zip(numbers, scores, strict=True) if score is None]  # not sealed in this tier
    stored = archive.shelves.read(missing)
    newest: dict[str, int] = {}
    for b in missing:
        blob = stored[b].blob
        if blob is None:
            continue
        try:
            newest[str(b)] = max(p.completed_at for p in archive.sealing.decode_batch(blob))
        except DecodeError:
            continue  # left for the verify/repair tools; the router already degrades on it
    pipe = r.pipeline(transaction=False)
    if newest:
        pipe.zadd(keys.expiry, newest, nx=True)  # type: ignore[arg-type]
    pipe.hset(keys.archive_meta, "expire_cursor", numbers[-1] + 1)
    pipe.execute()
    return len(numbers) if newest else 0


def sweep_expired(archive: ArchiveLayer, now: float | None = None, limit: int = 200) -> int:
    """Delete up to ``limit`` batches whose retention has passed; returns the partitions expired.
    With a cold store (``archive.cold``) they are written there first (`layers.archive.cold`), and
    leave Redis only once their file is durable and recorded."""
    if archive.cold is not None:
        return archive.cold.step(now)
    r, keys = archive.redis, archive.keys
    started = time.perf_counter()
    now = time.time() if now is None else now
    cutoff = int(now) - archive.retention_s()
    due: Any = r.zrangebyscore(keys.expiry, "-inf", cutoff, start=0, num=limit)
    if not due:
        return 0
    numbers = [int(b) for b in due]
    stored = archive.shelves.read(numbers)
    counts: dict[int, int] = {}
    quarantine = r.pipeline(transaction=False)
    for b in numbers:
        counts[b] = 0
        for blob in (stored[b].legacy, stored[b].slot):  # the shelf's count wins: it holds the old key's too
            if blob is None:
                continue
            try:
                counts[b] = blob_record_count(blob)
            except DecodeError:
                quarantine.set(keys.quarantine(b), blob)
    quarantine.execute()
    expired = drop_batches(archive, stored, counts, now=now)
    r.hset(keys.archive_meta, "last_sweep_s", round(time.perf_counter() - started, 6))
    return max(expired, 1)


def drop_batches(
    archive: ArchiveLayer, stored: dict[int, StoredBatch], counts: dict[int, int], *, now: float | None = None
) -> int:
    """Delete expired batches from Redis, each only if its slot still holds the blob read
    (``stored``), out of the expiry index and marked expired; returns their partitions (``counts``:
    per batch). A batch sealed again meanwhile waits for its new time."""
    r, keys = archive.redis, archive.keys
    now = time.time() if now is None else now
    dropped = archive.shelves.write([SlotWrite(b, s.slot, b"", s.legacy) for b, s in stored.items()])
    expired = sum(counts.get(b, 0) for b in dropped)
    pipe = r.pipeline(transaction=False)
    if dropped:
        pipe.zrem(keys.expiry, *(str(b) for b in dropped))
        for b in dropped:  # expired on purpose, as `stats verify` tells it from detail that is missing
            pipe.setbit(keys.expired_batches, b, 1)
    pipe.hincrby(keys.archive_meta, "expired", expired)
    pipe.hset(keys.archive_meta, "last_sweep_at", int(now))
    pipe.execute()
    return expired


_MOVE_NUMBERS = ("move_cursor", "max_pid", "moved", "expired", "expire_cursor", "move_started_at")
#: The archive meta's fields a `TransitionState` is made of.
MOVE_FIELDS = (*_MOVE_NUMBERS, "total", "last_sweep_s", "retention_s")


def transition_state(archive: ArchiveLayer, now: float | None = None) -> TransitionState:
    """Where the tier transitions and the expiry stand: backlog, rate, ETA, expired share, lag."""
    r, keys = archive.redis, archive.keys
    pipe = r.pipeline(transaction=False)
    pipe.hlen(keys.completed)
    pipe.hmget(keys.archive_meta, MOVE_FIELDS)
    pipe.zrange(keys.expiry, 0, 0, withscores=True)
    left, raw, oldest = pipe.execute()
    meta = dict(zip(MOVE_FIELDS, raw, strict=True))
    total = stored_int(keys.archive_meta, "total", meta["total"], default=0)
    now = time.time() if now is None else now
    return transition_from(keys, archive.policy, meta, archive.tier(), int(left), oldest, total, now)


def transition_from(
    keys: KeySchema, policy: TierPolicy, meta: dict[str, Any], tier: Tier, simple: int, oldest: Any, total: int,
    now: float,
) -> TransitionState:  # fmt: skip
    """`transition_state` from what it read: ``meta`` the archive meta's `MOVE_FIELDS` as stored,
    ``simple`` the simple hash's size, ``oldest`` the expiry's first entry with its score, ``tier``
    the tier in force, ``total`` the archived total."""
    key = keys.archive_meta
    n = {name: int(stored_float(key, name, meta[name])) for name in _MOVE_NUMBERS}
    retention = stored_int(key, "retention_s", meta["retention_s"], default=policy.retention_s)
    last_batch = policy.batch_of(n["max_pid"])
    backlog = simple if tier is not Tier.SIMPLE else 0
    elapsed = now - n["move_started_at"] if n["move_started_at"] else 0.0
    rate = n["moved"] / elapsed if elapsed > 0 and n["moved"] else 0.0
    lag = max(0.0, now - retention - oldest[0][1]) if oldest else 0.0
    return TransitionState(
        tier=tier.value,
        simple_left=backlog,
        move_cursor=n["move_cursor"],
        last_batch=last_batch,
        moved=n["moved"],
        move_rate=round(rate, 1),
        move_eta_s=round(backlog / rate, 1) if backlog and rate else (0.0 if not backlog else None),
        expired=n["expired"],
        expired_share=round(n["expired"] / total, 6) if total else 0.0,
        expiry_indexed=n["expire_cursor"] > last_batch,
        expiry_lag_s=round(lag, 1),
        last_sweep_s=stored_float(key, "last_sweep_s", meta["last_sweep_s"]),
        retention_s=retention,
    )

"""The archive queue: a Redis Stream read through one consumer group.

An entry is acknowledged and deleted only by the script that writes what it implies, so
the stream holds exactly the partitions not yet archived: its length is the backlog and
its memory does not grow with the number of partitions archived.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis

from layers.archive.dead_letters import DeadLetters
from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.plumbing.key_types import is_wrong_type, wrong_type_error
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts


class QueueEntry(NamedTuple):
    """One queue entry as read (a tuple: built for every archived partition)."""

    entry_id: str
    payload: bytes
    deliveries: int = 1


@dataclass(frozen=True, slots=True)
class QueueState:
    length: int
    pending: int  # entries delivered and unacknowledged (named as XPENDING and `status` name them)
    oldest_pending_age_s: float  # of the oldest unacknowledged entry
    consumers: int
    dead_letters: int
    lag: int | None = None


def _read(reply: Any) -> list[QueueEntry]:
    """The entries of an XREADGROUP reply of one stream as redis-py parses it: [[stream, entries]],
    or on RESP3 {stream: [entries]}."""
    if not reply:
        return []
    return _entries(next(iter(reply.values()))[0] if isinstance(reply, dict) else reply[0][1])


def _entries(raw: list[Any]) -> list[QueueEntry]:
    """Entries from redis-py's parsed form: (id, {field: value}); a deleted one has no fields."""
    return [_entry(entry_id, fields) for entry_id, fields in raw if fields is not None]


def _entry(entry_id: Any, fields: dict[Any, Any]) -> QueueEntry:
    """An entry from its id and fields (bytes or text, as the client decodes); the payload as bytes."""
    payload = fields.get(b"p", fields.get("p", b""))
    return QueueEntry(as_text(entry_id), payload.encode("utf-8") if isinstance(payload, str) else payload)


def page_columns(reply: Any) -> tuple[list[str], list[bytes]]:
    """The entry ids and payloads of an XREADGROUP reply as Redis sent it: streams, each a list of
    [id, [field, value, ...]] (a map of streams in RESP3); a deleted entry has no fields. Two
    lists, no object per entry: the archiver reads 500 at a time."""
    ids: list[str] = []
    payloads: list[bytes] = []
    for _, entries in reply.items() if isinstance(reply, dict) else reply or ():
        for entry_id, fields in entries:
            if not fields:
                continue
            if len(fields) == 2 and fields[0] == b"p":  # the usual entry: no dict for it
                ids.append(entry_id.decode())
                payloads.append(fields[1])
            else:
                entry = _entry(entry_id, dict(zip(fields[::2], fields[1::2], strict=True)))
                ids.append(entry.entry_id)
                payloads.append(entry.payload)
    return ids, payloads


def _dead_letter_view(entry_id: Any, fields: dict[Any, Any]) -> dict[str, Any]:
    get = {as_text(k): v for k, v in fields.items()}
    payload = get.get("p", b"")
    return {
        "id": as_text(entry_id),
        "entry": as_text(get.get("entry", "")),
        "reason": as_text(get.get("reason", "")),
        "payload": payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload),
        "requeueable": bool(payload),
    }


def oldest_pending_age(summary: Any) -> float:
    """Seconds since the oldest unacknowledged entry was added, from an XPENDING summary.

    Entry ids are ``{unix ms}-{seq}``, so the age needs no further round trip.
    """
    if not isinstance(summary, dict) or not summary.get("pending") or not summary.get("min"):
        return 0.0
    return max(0.0, time.time() - int(as_text(summary["min"]).split("-")[0]) / 1000)


class ArchiveQueue:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(keys, client=redis_client)
        self.group = ARCHIVER_GROUP
        self._scripts = Scripts.of(redis_client)
        self._claim_cursor = "0-0"
        self.letters = DeadLetters(redis_client, self.keys, self.group)

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.keys.queue, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if is_wrong_type(exc):
                raise wrong_type_error(self.redis, self.keys) from None
            if "BUSYGROUP" not in str(exc):
                raise

    def read_new(self, consumer: str, count: int, block_ms: int) -> list[QueueEntry]:
        """Entries never delivered, waiting up to ``block_ms`` for one (0: not at all; Redis's
        own BLOCK 0 would wait forever). The archiver reads its pages so where it cannot read
        them on a connection of its own (`archiver.daemon.readahead`: Redis Cluster)."""
        block = block_ms if block_ms > 0 else None
        try:
            reply: Any = self.redis.xreadgroup(self.group, consumer, {self.keys.queue: ">"}, count=count, block=block)
        except redis.ResponseError as exc:
            if str(exc).startswith("UNBLOCKED"):  # the queue left this node meanwhile: a slot move (Redis 7.0)
                return []
            raise
        return _read(reply)

    def read_own_unacknowledged(self, consumer: str, count: int) -> list[QueueEntry]:
        """Entries delivered to this consumer name before and never acknowledged, with their
        delivery counts (a re-read counts as a delivery)."""
        reply: Any = self.redis.xreadgroup(self.group, consumer, {self.keys.queue: "0"}, count=count)
        return self._with_deliveries(_read(reply), consumer)

    def take_over(self, consumer: str, min_idle_ms: int, count: int) -> list[QueueEntry]:
        """Claim entries another consumer left unacknowledged for ``min_idle_ms`` (XAUTOCLAIM), with
        their delivery counts. The scan cursor is kept between calls, so every idle entry is reached
        however many stay unacknowledged before it."""
        reply: Any = self.redis.xautoclaim(
            self.keys.queue, self.group, consumer, min_idle_time=min_idle_ms, start_id=self._claim_cursor, count=count
        )
        self._claim_cursor = as_text(reply[0])
        claimed = _entries(reply[1])
        deleted = reply[2] if len(reply) > 2 else []
        if deleted:
            self.redis.xack(self.keys.queue, self.group, *deleted)
        return self._with_deliveries(claimed, consumer)

    @property
    def claim_scan_done(self) -> bool:
        """Whether the last `take_over` reached the end of the unacknowledged entries."""
        return self._claim_cursor == "0-0"

    def _with_deliveries(self, entries: list[QueueEntry], consumer: str) -> list[QueueEntry]:
        if not entries:
            return entries
        pending: Any = self.redis.xpending_range(
            self.keys.queue,
            self.group,
            min=entries[0].entry_id,
            max=entries[-1].entry_id,
            count=len(entries) * 2 + 10,
            consumername=consumer,
        )
        counts = {as_text(p["message_id"]): int(p["times_delivered"]) for p in pending}
        return [QueueEntry(e.entry_id, e.payload, counts.get(e.entry_id, 1)) for e in entries]

    def dead_letter(self, entry: QueueEntry, reason: str) -> None:
        self.letters.entry(entry.entry_id, entry.payload, reason)

    # the dead-letter stream, for operators

    def dead_letters(self, limit: int = 100, after: str = "-") -> list[dict[str, Any]]:
        raw: Any = self.redis.xrange(self.keys.dead_letter, min=after, max="+", count=limit)
        return [_dead_letter_view(entry_id, fields) for entry_id, fields in raw]

    def dead_letter_by_id(self, entry_id: str) -> dict[str, Any] | None:
        raw: Any = self.redis.xrange(self.keys.dead_letter, min=entry_id, max=entry_id)
        return _dead_letter_view(*raw[0]) if raw else None

    def requeue(self, entry_ids: list[str]) -> tuple[int, int]:
        """Put dead letters back on the queue; returns (requeued, skipped: gone or not queue entries)."""
        requeued = skipped = 0
        for start in range(0, len(entry_ids), 500):
            got = self._scripts("requeue", [self.keys.dead_letter, self.keys.queue], entry_ids[start : start + 500])
            requeued, skipped = requeued + int(got[0]), skipped + int(got[1])
        return requeued, skipped

    def purge_dead_letters(self, older_than_ms: int | None = None) -> int:
        """Delete dead letters (all, or those older than ``older_than_ms``); returns how many."""
        if older_than_ms is None:
            count = int(self.redis.xlen(self.keys.dead_letter))  # type: ignore[arg-type]
            self.redis.delete(self.keys.dead_letter)
            return count
        cutoff = f"{max(0, int(time.time() * 1000) - older_than_ms)}-0"
        return int(self.redis.xtrim(self.keys.dead_letter, minid=cutoff))  # type: ignore[arg-type]

    def state(self) -> QueueState:
        pipe = self.redis.pipeline(transaction=False)
        pipe.xlen(self.keys.queue)
        pipe.xpending(self.keys.queue, self.group)
        pipe.xlen(self.keys.dead_letter)
        length, pending, dead = pipe.execute(raise_on_error=False)
        for reply in (length, dead):
            if isinstance(reply, Exception):
                raise reply
        return queue_state_from(int(length), pending, int(dead))


def queue_state_from(length: int, pending: Any, dead: int) -> QueueState:
    """A `QueueState` from the stream's length, its XPENDING summary and the dead letters' length.
    Entries are deleted when acknowledged, so the stream holds exactly those not yet archived: the
    ones not delivered yet are its length less the unacknowledged ones (XINFO's own lag is unknown after
    deletions and after a restart). Before the group exists (XPENDING answered an error) nothing is
    unacknowledged and the lag is unknown."""
    if not isinstance(pending, dict):
        return QueueState(length, 0, 0.0, 0, dead)
    count = int(pending["pending"])
    consumers = len(pending.get("consumers") or [])
    return QueueState(length, count, oldest_pending_age(pending), consumers, dead, max(0, length - count))

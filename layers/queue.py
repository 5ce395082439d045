"""The archive queue: a Redis Stream read through one consumer group.

An entry is acknowledged and deleted only by the script that writes what it implies, so
the stream holds exactly the partitions not yet archived: its length is the backlog and
its memory does not grow with the number of partitions archived.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.replies import as_text
from layers.scripts import Scripts


@dataclass(frozen=True, slots=True)
class QueueEntry:
    entry_id: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class QueueState:
    length: int
    pending: int
    oldest_pending_age_s: float
    consumers: int
    dead_letters: int
    lag: int | None = None


def _entries(raw: list[Any]) -> list[QueueEntry]:
    out = []
    for entry_id, fields in raw:
        if fields is None:
            continue
        payload = fields.get(b"p", fields.get("p", b""))
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        out.append(QueueEntry(as_text(entry_id), payload))
    return out


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
        self.keys = keys
        self.group = ARCHIVER_GROUP
        self._scripts = Scripts(redis_client)

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.keys.queue, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read_new(self, consumer: str, count: int, block_ms: int) -> list[QueueEntry]:
        reply: Any = self.redis.xreadgroup(self.group, consumer, {self.keys.queue: ">"}, count=count, block=block_ms)
        return _entries(reply[0][1]) if reply else []

    def read_own_pending(self, consumer: str, count: int) -> list[QueueEntry]:
        """Entries delivered to this consumer name before and never acknowledged."""
        reply: Any = self.redis.xreadgroup(self.group, consumer, {self.keys.queue: "0"}, count=count)
        return _entries(reply[0][1]) if reply else []

    def take_over(self, consumer: str, min_idle_ms: int, count: int) -> list[QueueEntry]:
        """Claim entries another consumer left unacknowledged for ``min_idle_ms`` (XAUTOCLAIM)."""
        reply: Any = self.redis.xautoclaim(
            self.keys.queue, self.group, consumer, min_idle_time=min_idle_ms, start_id="0-0", count=count
        )
        claimed = _entries(reply[1])
        deleted = reply[2] if len(reply) > 2 else []
        if deleted:
            self.redis.xack(self.keys.queue, self.group, *deleted)
        return claimed

    def dead_letter(self, entry: QueueEntry, reason: str) -> None:
        self._scripts(
            "dead_letter",
            [self.keys.queue, self.keys.dead_letter],
            [self.group, entry.entry_id, reason, entry.payload],
        )

    def state(self) -> QueueState:
        pipe = self.redis.pipeline(transaction=False)
        pipe.xlen(self.keys.queue)
        pipe.xpending(self.keys.queue, self.group)
        pipe.xlen(self.keys.dead_letter)
        try:
            length, pending, dead = pipe.execute()
        except redis.ResponseError:  # no group yet
            length, dead = self.redis.xlen(self.keys.queue), self.redis.xlen(self.keys.dead_letter)
            return QueueState(int(length), 0, 0.0, 0, int(dead))  # type: ignore[arg-type]
        age = oldest_pending_age(pending)
        consumers = len(pending.get("consumers") or [])
        lag = None
        groups: Any = self.redis.xinfo_groups(self.keys.queue)
        for group in groups:
            if as_text(group.get("name")) == self.group and group.get("lag") is not None:
                lag = int(group["lag"])
        return QueueState(int(length), int(pending["pending"]), age, consumers, int(dead), lag)

"""The query router: answers for any partition from whichever layer holds it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import redis

from codec import ArchivedPartition, DecodeError, PartitionInfo
from layers import KeySchema
from layers.active import check_partition_id


class Source(enum.StrEnum):
    ACTIVE = "active"
    QUEUE = "queue"
    SIMPLE = "archive:simple"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Answer:
    partition_id: int
    source: Source
    partition: PartitionInfo | ArchivedPartition | None = None
    degraded: bool = False
    detail: str = ""

    @property
    def found(self) -> bool:
        return self.source is not Source.NONE

    @property
    def status(self) -> str:
        if isinstance(self.partition, PartitionInfo):
            return self.partition.status.value
        return "completed" if self.found else "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition_id": self.partition_id,
            "found": self.found,
            "status": self.status,
            "source": self.source.value,
            "degraded": self.degraded,
            "detail": self.detail,
            "partition": None if self.partition is None else self.partition.to_dict(),
        }


class QueryRouter:
    def __init__(self, redis_client: redis.Redis, namespace: str = "elk", *, cluster: bool = False) -> None:
        self.redis = redis_client
        self.keys = KeySchema(namespace, cluster)
        self.decode_failures = 0

    def get(self, partition_id: int) -> Answer:
        """One round trip: active hash, archive index, simple tier, and the SDK's done bit."""
        pid = check_partition_id(partition_id)
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(k.active, str(pid))
        pipe.getbit(k.index, pid)
        pipe.hget(k.completed, str(pid))
        pipe.getbit(k.done, pid)
        active, indexed, simple, done = pipe.execute()
        if active is not None:
            try:
                return Answer(pid, Source.ACTIVE, PartitionInfo.from_json(active))
            except DecodeError as exc:
                self.decode_failures += 1
                return Answer(pid, Source.ACTIVE, None, True, f"active record is corrupt: {exc}")
        if simple is not None:
            try:
                return Answer(pid, Source.SIMPLE, ArchivedPartition.from_json(simple))
            except DecodeError as exc:
                self.decode_failures += 1
                return Answer(pid, Source.SIMPLE, None, True, f"archived record is corrupt: {exc}")
        if indexed:
            return Answer(pid, Source.SIMPLE, None, True, "archived, but its detail is gone")
        if done:
            return Answer(pid, Source.QUEUE, None, True, "completed, waiting in the archive queue")
        return Answer(pid, Source.NONE, detail="no such partition")

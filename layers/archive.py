"""The archive layer (v0: the simple tier, one JSON per partition in ``elk_completed``)."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from codec import ArchivedPartition
from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.scripts import Scripts


class ArchiveLayer:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = keys
        self._scripts = Scripts(redis_client)

    def write_simple(self, entries: Sequence[tuple[str, ArchivedPartition]]) -> int:
        """Store the partitions, set their index bits and acknowledge their queue entries."""
        if not entries:
            return 0
        args: list[object] = [ARCHIVER_GROUP]
        for entry_id, part in entries:
            args += [entry_id, part.partition_id, part.to_json()]
        k = self.keys
        return int(self._scripts("archive_simple", [k.completed, k.index, k.queue], args))

    def get_simple(self, pid: int) -> bytes | None:
        return self.redis.hget(self.keys.completed, str(pid))  # type: ignore[return-value]

    def archived_total(self) -> int:
        """Partitions ever archived, from the index bitmap."""
        return int(self.redis.bitcount(self.keys.index))  # type: ignore[arg-type]

    def simple_size(self) -> int:
        return int(self.redis.hlen(self.keys.completed))  # type: ignore[arg-type]

"""The worker SDK, blocking: `ActiveLayer` runs the operations of `layers.active.core` on a
`redis.Redis` (or `redis.RedisCluster`) client. `layers.active.sdk_async.AsyncActiveLayer` is the
same SDK on `redis.asyncio`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import redis

from codec import PartitionInfo
from codec.validate import check_partition_id
from layers.active.clock import ServerClock
from layers.active.core import RECORD_FORMATS, Completion
from layers.active.leader import MAX_PARTITIONS_PER_CALL
from layers.active.operations import ActiveOperations
from layers.keys import KeySchema
from layers.plumbing.runners import Blocking, SyncIO

__all__ = ["MAX_PARTITIONS_PER_CALL", "RECORD_FORMATS", "ActiveLayer", "Completion", "check_partition_id"]


class ActiveLayer(ActiveOperations, Blocking):
    """Worker SDK: create, claim, start, heartbeat, complete, fail and inspect partitions."""

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        lease_timeout: float = 300.0,
        clock: Callable[[], float] | None = None,
        elk_prefix: str | None = None,
        record_format: str | None = None,
    ) -> None:
        self.redis = redis_client
        self._io = SyncIO(redis_client)
        keys = KeySchema.of(namespace, cluster, elk_prefix, client=redis_client)
        clock = clock or ServerClock(redis_client)
        super().__init__(keys, clock, lease_timeout=lease_timeout, record_format=record_format)

    def iter_active(self, batch: int = 1000) -> Iterator[PartitionInfo]:
        """Every active partition, in no particular order, without loading them all at once."""
        cursor = 0
        while True:
            cursor, parts = self._io.run(self.reads._active_scan(cursor, batch))
            yield from parts
            if not cursor:
                return

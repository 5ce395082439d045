"""The worker SDK for asyncio programs: `AsyncActiveLayer` awaits the operations of
`layers.active.core` on a `redis.asyncio` client (``redis.asyncio.Redis``, a Sentinel's
``master_for``, or ``redis.asyncio.RedisCluster``). Same methods, arguments, results and typed
errors as `layers.active.sdk.ActiveLayer`, each a coroutine; `iter_active` is an async iterator."""

from __future__ import annotations

from collections.abc import AsyncIterator

from codec import PartitionInfo
from layers.active.clock import AsyncServerClock
from layers.active.core import Clock
from layers.active.operations import ActiveOperations
from layers.keys import KeySchema
from layers.plumbing.runners import AsyncClient, AsyncIO, Awaited


class AsyncActiveLayer(ActiveOperations, Awaited):
    """Worker SDK on asyncio: ``part = await sdk.claim("worker1")``. One instance may serve any
    number of tasks of its event loop. ``clock`` may be a plain function or a coroutine function
    (the default is the server's clock, `layers.active.clock.AsyncServerClock`)."""

    def __init__(
        self,
        redis_client: AsyncClient,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        lease_timeout: float = 300.0,
        clock: Clock | None = None,
        elk_prefix: str | None = None,
        record_format: str | None = None,
    ) -> None:
        self.redis = redis_client
        self._io = AsyncIO(redis_client)
        keys = KeySchema.of(namespace, cluster, elk_prefix, client=redis_client)
        clock = clock or AsyncServerClock(redis_client)
        super().__init__(keys, clock, lease_timeout=lease_timeout, record_format=record_format)

    async def iter_active(self, batch: int = 1000) -> AsyncIterator[PartitionInfo]:
        """Every active partition, in no particular order, without loading them all at once."""
        cursor = 0
        while True:
            cursor, parts = await self._io.run(self.reads._active_scan(cursor, batch))
            for part in parts:
                yield part
            if not cursor:
                return

"""Unix time as the Redis server has it, without a round trip per reading.

Leases are compared across hosts (a worker's heartbeat, another worker's takeover), so they
must come from one clock: the server's. `ServerClock` measures the offset between the
server's ``TIME`` and this host's clock (the midpoint of the round trip, so within half of it)
and adds it to the local clock, measuring again every ``resync_s`` so drift stays small.
`AsyncServerClock` is the same clock on a `redis.asyncio` client (awaited).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import redis

from layers.plumbing.runners import AsyncClient, AsyncIO, SyncIO
from layers.plumbing.steps import Steps, one

RESYNC_S = 60.0


class ClockOffset:
    """The offset and when to measure it again; the reading as steps (`layers.plumbing.steps`)."""

    def __init__(self, *, resync_s: float = RESYNC_S, local: Callable[[], float] = time.time) -> None:
        self.resync_s = resync_s
        self._local = local
        self.offset = 0.0  # server clock minus local clock, seconds
        self._next_sync = float("-inf")

    def cached(self) -> float | None:
        """The server's time from the offset measured last, or None when it is due again."""
        now = self._local()
        return now + self.offset if now < self._next_sync else None

    def reading(self) -> Steps[float]:
        now = self._local()
        if now >= self._next_sync:
            yield from self.sync_steps()
            now = self._local()
        return now + self.offset

    def sync_steps(self) -> Steps[None]:
        before = self._local()
        seconds, micros = yield one().time()
        after = self._local()
        self.offset = int(seconds) + int(micros) / 1e6 - (before + after) / 2
        self._next_sync = after + self.resync_s


class ServerClock(ClockOffset):
    def __init__(
        self, client: redis.Redis, *, resync_s: float = RESYNC_S, local: Callable[[], float] = time.time
    ) -> None:
        super().__init__(resync_s=resync_s, local=local)
        self.redis = client
        self._io = SyncIO(client)

    def __call__(self) -> float:
        now = self.cached()
        return self._io.run(self.reading()) if now is None else now

    def sync(self) -> None:
        self._io.run(self.sync_steps())


class AsyncServerClock(ClockOffset):
    """`ServerClock` on a `redis.asyncio` client: ``clock()`` is the time, or, when the offset is due to be
    measured again, an awaitable of it (a `Call` step takes either)."""

    def __init__(
        self, client: AsyncClient, *, resync_s: float = RESYNC_S, local: Callable[[], float] = time.time
    ) -> None:
        super().__init__(resync_s=resync_s, local=local)
        self.redis = client
        self._io = AsyncIO(client)

    def __call__(self) -> float | Awaitable[float]:
        """The time, or (when the offset is due to be measured again) a coroutine that measures it and
        gives the time: a `Call` step awaits what is awaitable, and most readings need no await."""
        now = self.cached()
        return self._io.run(self.reading()) if now is None else now

    async def sync(self) -> None:
        await self._io.run(self.sync_steps())

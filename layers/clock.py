"""Unix time as the Redis server has it, without a round trip per reading.

Leases are compared across hosts (a worker's heartbeat, another worker's takeover), so they
must come from one clock: the server's. `ServerClock` measures the offset between the
server's ``TIME`` and this host's clock (the midpoint of the round trip, so within half of it)
and adds it to the local clock, measuring again every ``resync_s`` so drift stays small.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

RESYNC_S = 60.0


class ServerClock:
    def __init__(
        self, client: redis.Redis, *, resync_s: float = RESYNC_S, local: Callable[[], float] = time.time
    ) -> None:
        self.redis = client
        self.resync_s = resync_s
        self._local = local
        self.offset = 0.0  # server clock minus local clock, seconds
        self._next_sync = float("-inf")

    def __call__(self) -> float:
        now = self._local()
        if now >= self._next_sync:
            self.sync()
            now = self._local()
        return now + self.offset

    def sync(self) -> None:
        before = self._local()
        seconds, micros = self.redis.time()  # type: ignore[misc]
        after = self._local()
        self.offset = int(seconds) + int(micros) / 1e6 - (before + after) / 2
        self._next_sync = after + self.resync_s

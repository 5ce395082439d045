"""The maintenance lock: one holder across all replicas for tier moves, expiry sweeps,
statistics compaction and repair.

``SET NX PX`` takes it; the holder renews it while it works (a script that only extends
its own lock) and releases it on stop (a script that only deletes its own lock). A holder
that dies stops renewing, the key expires, and another replica takes over. Replicas without
the lock skip maintenance and keep archiving.
"""

from __future__ import annotations

import redis

from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts

DEFAULT_TTL_S = 30.0


class MaintenanceLock:
    def __init__(self, client: redis.Redis, keys: KeySchema, holder: str, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.redis = client
        self.key = keys.maintenance_lock
        self.holder = holder
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._scripts = Scripts.of(client)

    def acquire(self) -> bool:
        """Take the lock, or renew it if this holder has it already; False if another has taken it."""
        if self.redis.set(self.key, self.holder, nx=True, px=self.ttl_ms):
            return True
        return self.renew()

    def renew(self) -> bool:
        return bool(self._scripts("lock_renew", [self.key], [self.holder, self.ttl_ms]))

    def release(self) -> bool:
        return bool(self._scripts("lock_release", [self.key], [self.holder]))

    def holder_now(self) -> str | None:
        raw = self.redis.get(self.key)
        return None if raw is None else as_text(raw)

"""The Redis-backed worker registry: persists the `codec.WorkerMap` numbering."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

from codec import DecodeError, WorkerMap
from codec.validate import check_worker_id
from layers.keys import KeySchema
from layers.replies import as_text
from layers.scripts import Scripts


class WorkerRegistry:
    """A local `WorkerMap` kept in step with the registry in Redis."""

    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = keys
        self.map = WorkerMap()
        self._scripts = Scripts(redis_client)
        self.round_trips = 0

    def register(self, worker_ids: Iterable[str]) -> WorkerMap:
        """Make sure every worker has a number (assigned atomically in Redis); returns the local map."""
        new = sorted({w for w in worker_ids if w not in self.map})
        for w in new:
            check_worker_id(w)
        if new:
            self.round_trips += 1
            shorts = self._scripts("register_workers", [self.keys.workers, self.keys.workers_by_short], new)
            for worker_id, short in zip(new, shorts, strict=True):
                self.map.add(int(short), worker_id)
        return self.map

    def refresh(self) -> WorkerMap:
        """Reload every pair from Redis (after another process registered workers)."""
        raw: Any = self.redis.hgetall(self.keys.workers_by_short)
        try:
            for short, worker_id in raw.items():
                self.map.add(int(short), as_text(worker_id))
        except ValueError as exc:
            raise DecodeError(f"the worker registry is corrupt: {exc}") from None
        return self.map

"""A planner for the tests that run ``partarchive worker --planner`` as real processes
(`tests/test_leader_processes.py`): imported by each worker process from the repository's root."""

from __future__ import annotations

import os
import time

import redis


class Source:
    """A source whose IDs grow: its highest ID is the Redis string named by ``LEADER_SOURCE_KEY``, which
    the test raises. Partitions of ``LEADER_PARTITION_SIZE`` IDs (10). While the string named by
    ``LEADER_STALL_KEY`` holds ``armed``, the next ``partition_size()`` call takes it (the value becomes
    the process's pid) and waits ``LEADER_STALL_S`` (1 s) there, so that a test can stop the leader in the
    middle of its turn, between its lease and its write."""

    def __init__(self) -> None:
        self.redis = redis.Redis.from_url(os.environ["REDIS_URL"])
        self.key = os.environ["LEADER_SOURCE_KEY"]
        self.stall = os.environ.get("LEADER_STALL_KEY")

    def partition_size(self) -> int:
        if self.stall and self.redis.get(self.stall) == b"armed":
            self.redis.set(self.stall, os.getpid())
            time.sleep(float(os.environ.get("LEADER_STALL_S", "1")))
        return int(os.environ.get("LEADER_PARTITION_SIZE", "10"))

    def next_max_id(self, start_id: int, size: int) -> int:
        return min(int(self.redis.get(self.key) or 0), start_id + size - 1)

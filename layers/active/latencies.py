"""The worker SDK's completion latency, two ways.

- In the worker process: the histogram ``partarchive_sdk_complete_seconds`` in the default
  prometheus-client registry, created on the first ``complete()`` rather than at import (so
  importing the SDK registers nothing), for a worker that serves or pushes its own metrics.
- In Redis, for every worker of a namespace at once: a ``complete()`` hands the latencies
  observed since the SDK last handed them, at most once every `HAND_EVERY_S` seconds, to the
  completion script, which adds them to a small hash (`KeySchema.complete_latency`) in the same
  round trip. partarchive's processes export that hash as ``partarchive_worker_complete_seconds``,
  which the alert rules use. A latency is thus counted with a later completion, within a second
  or so: a worker that exits leaves its last ones uncounted. (Handed with every completion, they
  cost Redis more than the rest of the completion's own writes.)
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from functools import cache

from prometheus_client import Histogram

#: Upper bounds (seconds) of the latency buckets; the hash's field ``b{i}`` counts bucket ``i``,
#: ``b{len(COMPLETE_BUCKETS)}`` the slower ones.
COMPLETE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

#: How often at most a worker's SDK hands its latencies to Redis (seconds).
HAND_EVERY_S = 1.0


@cache
def sdk_complete_seconds() -> Histogram:
    return Histogram(
        "partarchive_sdk_complete_seconds",
        "Latency of the worker SDK's complete() call (remove from the active layer + queue append).",
        ["namespace"],
        buckets=COMPLETE_BUCKETS,
    )


class LatencyBuffer:
    """Completion latencies not yet handed to Redis: counts per bucket and the summed microseconds
    (one per SDK object, which worker threads may share)."""

    def __init__(self, *, every_s: float = HAND_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._counts: dict[int, int] = {}
        self._sum_us = 0
        self._lock = threading.Lock()
        self._every_s = every_s
        self._clock = clock
        self._next = float("-inf")  # the first observations go with the next completion

    def observe(self, seconds: float) -> None:
        bucket = bisect_left(COMPLETE_BUCKETS, seconds)
        with self._lock:
            self._counts[bucket] = self._counts.get(bucket, 0) + 1
            self._sum_us += round(seconds * 1_000_000)

    def take(self) -> tuple[dict[int, int], int]:
        """The observations not handed to Redis yet (counts per bucket, summed microseconds), forgotten here;
        `give_back` restores them when the call that carried them did not complete."""
        with self._lock:
            taken = self._counts, self._sum_us
            self._counts, self._sum_us = {}, 0
            return taken

    def take_due(self) -> tuple[dict[int, int], int]:
        """`take`, once `every_s` has passed since the last take that handed any; nothing before."""
        if not self._counts or self._clock() < self._next:
            return {}, 0
        self._next = self._clock() + self._every_s
        return self.take()

    def give_back(self, taken: tuple[dict[int, int], int]) -> None:
        """Observations a call took and did not hand: the next completion carries them."""
        counts, sum_us = taken
        with self._lock:
            if counts:
                self._next = float("-inf")
            for bucket, n in counts.items():
                self._counts[bucket] = self._counts.get(bucket, 0) + n
            self._sum_us += sum_us


def latency_argument(taken: tuple[dict[int, int], int]) -> str:
    """Observations as the completion script's argument: ``'bucket:count,...;sum_us'``, '' if none."""
    counts, sum_us = taken
    if not counts:
        return ""
    return ",".join(f"{i}:{n}" for i, n in sorted(counts.items())) + f";{sum_us}"

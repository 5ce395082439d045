"""Turning archived partitions into statistics updates (pure: no Redis).

The updates are ``(key position, op, field, value)`` with op '+' (add), '<' (keep the
smaller) or '>' (keep the larger); the commit script applies them to the keys listed
beside them. Aggregating here first is what keeps a flush to one round trip.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence

from codec import ArchivedPartition
from layers import KeySchema

Op = tuple[int, str, str, int]


def day_of(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d")


class RollupBuilder:
    """Collects updates per (key, field); `build` returns the key list and the ops."""

    def __init__(self) -> None:
        self._adds: dict[tuple[str, str], int] = defaultdict(int)
        self._mins: dict[tuple[str, str], int] = {}
        self._maxs: dict[tuple[str, str], int] = {}

    def add(self, key: str, field: str, value: int) -> None:
        self._adds[(key, field)] += value

    def keep_min(self, key: str, field: str, value: int) -> None:
        current = self._mins.get((key, field))
        if current is None or value < current:
            self._mins[(key, field)] = value

    def keep_max(self, key: str, field: str, value: int) -> None:
        current = self._maxs.get((key, field))
        if current is None or value > current:
            self._maxs[(key, field)] = value

    def build(self) -> tuple[list[str], list[Op]]:
        positions: dict[str, int] = {}
        ops: list[Op] = []
        for op, table in (("+", self._adds), ("<", self._mins), (">", self._maxs)):
            for (key, field), value in table.items():
                ops.append((positions.setdefault(key, len(positions)), op, field, value))
        return list(positions), ops


def add_partitions(
    builder: RollupBuilder, parts: Sequence[ArchivedPartition], keys: KeySchema, range_width: int
) -> None:
    """Add every rollup update that ``parts`` imply (global, worker, range, day).

    Per-worker fields are ``{worker_id}:c`` (count), ``:d`` (duration), ``:p`` (processed
    data), read back with ``rpartition(":")``, so a worker ID holding ``:`` is still
    unambiguous, and no worker registry round trip is needed to count.
    """
    g, w = keys.stats_global, keys.stats_workers
    for part in parts:
        worker = part.worker_id
        data, duration = part.processed_data, part.duration
        builder.add(g, "completed", 1)
        builder.add(g, "processed", data)
        builder.add(g, "duration", duration)
        builder.keep_max(g, "last_completed_at", part.completed_at)
        r = keys.stats_range(part.partition_id // range_width)
        for key in (w, r):
            builder.add(key, f"{worker}:c", 1)
            builder.add(key, f"{worker}:d", duration)
            builder.add(key, f"{worker}:p", data)
        builder.add(r, "count", 1)
        builder.add(r, "data", data)
        builder.add(r, "duration", duration)
        builder.keep_min(r, "min_id", part.min_id)
        builder.keep_max(r, "max_id", part.max_id)
        builder.keep_min(r, "first_at", part.completed_at)
        builder.keep_max(r, "last_at", part.completed_at)
        when = dt.datetime.fromtimestamp(part.completed_at, dt.UTC)
        day = keys.stats_day(when.strftime("%Y-%m-%d"))
        builder.add(day, f"h{when.hour:02d}", 1)
        builder.add(day, f"w:{worker}", 1)


def rollup_ops(
    parts: Sequence[ArchivedPartition], keys: KeySchema, range_width: int, now: int
) -> tuple[list[str], list[Op]]:
    if not parts:
        return [], []
    builder = RollupBuilder()
    add_partitions(builder, parts, keys, range_width)
    builder.keep_max(keys.stats_global, "last_updated", now)
    return builder.build()

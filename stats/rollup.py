"""Turning archived partitions into statistics updates (pure: no Redis).

The updates are ``(key position, op, field, value)`` with op '+' (add), '<' (keep the
smaller) or '>' (keep the larger); the commit script applies them to the keys listed
beside them. Aggregating here first is what keeps a flush to one round trip.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache

from codec import ArchivedPartition
from layers import KeySchema

Op = tuple[int, str, str, int]
#: Partitions per statistics range, unless the namespace stores another (``stats_meta.range_width``).
DEFAULT_RANGE_WIDTH = 1000


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

    The partitions are first summed in plain local tables (one pass, a few dict updates per
    partition) and only the sums go to the builder: this runs for every archived partition.
    """
    if not parts:
        return
    workers: dict[str, list[int]] = {}
    ranges: dict[int, list[int]] = {}
    range_workers: dict[tuple[int, str], list[int]] = {}
    hours: dict[int, int] = defaultdict(int)
    day_workers: dict[tuple[int, str], int] = defaultdict(int)
    processed = duration_sum = 0
    first_at = last_at = parts[0].completed_at
    for pid, lo, hi, worker, at, duration in parts:
        data = hi - lo + 1
        processed += data
        duration_sum += duration
        if at > last_at:
            last_at = at
        elif at < first_at:
            first_at = at
        w = workers.get(worker)
        if w is None:
            workers[worker] = [1, duration, data]
        else:
            w[0] += 1
            w[1] += duration
            w[2] += data
        r_no = pid // range_width
        r = ranges.get(r_no)
        if r is None:
            ranges[r_no] = [1, data, duration, lo, hi, at, at]
        else:
            r[0] += 1
            r[1] += data
            r[2] += duration
            if lo < r[3]:
                r[3] = lo
            if hi > r[4]:
                r[4] = hi
            if at < r[5]:
                r[5] = at
            if at > r[6]:
                r[6] = at
        rw = range_workers.get((r_no, worker))
        if rw is None:
            range_workers[(r_no, worker)] = [1, duration, data]
        else:
            rw[0] += 1
            rw[1] += duration
            rw[2] += data
        hour = at // 3600
        hours[hour] += 1
        day_workers[(hour // 24, worker)] += 1
    g = keys.stats_global
    builder.add(g, "completed", len(parts))
    builder.add(g, "processed", processed)
    builder.add(g, "duration", duration_sum)
    builder.keep_max(g, "last_completed_at", last_at)
    builder.keep_min(g, "first_completed_at", first_at)
    for worker, (c, d, p) in workers.items():
        builder.add(keys.stats_workers, f"{worker}:c", c)
        builder.add(keys.stats_workers, f"{worker}:d", d)
        builder.add(keys.stats_workers, f"{worker}:p", p)
    for (r_no, worker), (c, d, p) in range_workers.items():
        key = keys.stats_range(r_no)
        builder.add(key, f"{worker}:c", c)
        builder.add(key, f"{worker}:d", d)
        builder.add(key, f"{worker}:p", p)
    for r_no, (count, data, duration, lo, hi, first, last) in ranges.items():
        key = keys.stats_range(r_no)
        builder.add(key, "count", count)
        builder.add(key, "data", data)
        builder.add(key, "duration", duration)
        builder.keep_min(key, "min_id", lo)
        builder.keep_max(key, "max_id", hi)
        builder.keep_min(key, "first_at", first)
        builder.keep_max(key, "last_at", last)
    for hour, n in hours.items():
        builder.add(keys.stats_day(_day_name(hour // 24)), f"h{hour % 24:02d}", n)
    for (day, worker), n in day_workers.items():
        builder.add(keys.stats_day(_day_name(day)), f"w:{worker}", n)


@lru_cache(maxsize=4096)
def _day_name(day: int) -> str:
    return day_of(day * 86400)


def rollup_ops(
    parts: Sequence[ArchivedPartition], keys: KeySchema, range_width: int, now: int
) -> tuple[list[str], list[Op]]:
    if not parts:
        return [], []
    builder = RollupBuilder()
    add_partitions(builder, parts, keys, range_width)
    builder.keep_max(keys.stats_global, "last_updated", now)
    return builder.build()

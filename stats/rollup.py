"""Turning archived partitions into statistics updates, and the statistics' part of the archive's commit.

The updates are ``(key position, op, field, value)`` with op '+' (add), '<' (keep the
smaller) or '>' (keep the larger); the commit script applies them to the keys listed
beside them. Aggregating here first is what keeps a flush to one round trip.

The commit (`layers.archive.commit`) counts partitions, acknowledges their entries and applies their
statistics in one script call; which hashes those statistics touch and by how much is this
layer's business. `CommitRollups` computes it for every call the commit builds (again for a commit
sent again without the partitions found counted), and holds the namespace to one range width;
`committer` and `commit_buffer` wire the commit with it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import groupby
from operator import sub

import redis

from codec import ArchivedPartition, ValidationError, WorkerNumbering
from codec.page import Columns
from layers import ArchiveLayer, KeySchema
from layers.archive.commit import DEFAULT_FLUSH_COUNT, DEFAULT_FLUSH_INTERVAL_S, CommitBuffer, Committer
from layers.plumbing.settings import stored_int
from stats.fields import id_names, numbered_names
from stats.progress import MINUTES_KEPT

Op = tuple[int, str, str, int]
#: Partitions per statistics range, unless the namespace stores another (``stats_meta.range_width``).
DEFAULT_RANGE_WIDTH = 1000


def day_of(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d")


class RollupBuilder:
    """Collects updates per key and field; `build` returns the key list and the ops, `segments`
    the same as the commit script takes them (grouped by key)."""

    def __init__(self) -> None:
        self._adds: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._mins: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._maxs: defaultdict[str, dict[str, int]] = defaultdict(dict)

    def add(self, key: str, field: str, value: int) -> None:
        self._adds[key][field] += value

    def keep_min(self, key: str, field: str, value: int) -> None:
        kept = self._mins[key]
        current = kept.get(field)
        if current is None or value < current:
            kept[field] = value

    def keep_max(self, key: str, field: str, value: int) -> None:
        kept = self._maxs[key]
        current = kept.get(field)
        if current is None or value > current:
            kept[field] = value

    def _keys(self) -> list[str]:
        return list(dict.fromkeys([*self._adds, *self._mins, *self._maxs]))

    def build(self, first: int = 0) -> tuple[list[str], list[Op]]:
        """The keys touched and the ops, each naming its key by position in that list plus ``first``
        (a script's KEYS index when the keys follow ``first - 1`` others)."""
        keys = self._keys()
        positions = {key: i + first for i, key in enumerate(keys)}
        ops: list[Op] = []
        for op, table in (("+", self._adds), ("<", self._mins), (">", self._maxs)):
            for key, fields in table.items():
                ops += [(positions[key], op, field, value) for field, value in fields.items()]
        return keys, ops

    def segments(self, first: int = 0) -> tuple[list[str], list[str | int]]:
        """The keys touched, and for each one segment: its position (as in `build`), how many
        fields it adds to, keeps the minimum of and keeps the maximum of, those fields' names in
        that order, then their values (``commit.lua``'s statistics arguments)."""
        keys = self._keys()
        out: list[str | int] = []
        empty: dict[str, int] = {}
        for i, key in enumerate(keys):
            adds, mins, maxs = self._adds.get(key, empty), self._mins.get(key, empty), self._maxs.get(key, empty)
            out += [i + first, len(adds), len(mins), len(maxs), *adds, *mins, *maxs]
            out += [*adds.values(), *mins.values(), *maxs.values()]
        return keys, out


def add_partitions(
    builder: RollupBuilder,
    parts: Sequence[ArchivedPartition] | Columns,
    keys: KeySchema,
    range_width: int,
    numbers: WorkerNumbering | None,
    minutes_from: int = 0,
) -> None:
    """Add every rollup update that ``parts`` imply (global, worker, range, day, and minute for
    those completed at ``minutes_from`` or later: older minutes would be dropped at once).

    A day's hash counts completions per hour (``h00``..``h23``), sums their durations per hour
    (``s00``..``s23``, seconds) and counts them per worker (``w:{worker_id}``); the minutes' hash
    counts them per minute (the last ones are kept: the dashboard's chart of the last hour).

    The per-worker rollup names its fields ``{worker_id}:c`` (count), ``:d`` (duration), ``:p``
    (processed data), read back with ``rpartition(":")``, so a worker ID holding ``:`` is still
    unambiguous. A range names them by the worker's number in ``numbers``, which must hold
    every worker of ``parts`` (`stats.fields`); with None by ID, as the consistency check
    compares them.

    This runs for every archived partition, so it works on columns: sums, minima, maxima and
    counts are taken by builtins over each run of partitions in one statistics range (one run
    per range when the ids come sorted), and only the per-(range, worker) sums are a loop.
    """
    if not len(parts):
        return
    pids: Sequence[int]
    los: Sequence[int]
    his: Sequence[int]
    workers: Sequence[str]
    ats: Sequence[int]
    durations: Sequence[int]
    if isinstance(parts, Columns):
        pids, los, his, workers, ats, durations = (
            parts.pids,
            parts.min_ids,
            parts.max_ids,
            parts.workers,
            parts.completed_at,
            parts.durations,
        )
    else:
        pids, los, his, workers, ats, durations = zip(*parts, strict=True)
    spans = list(map(sub, his, los))  # processed data is span + 1 per partition
    r_nos = [pid // range_width for pid in pids]
    ranges: dict[int, list[int]] = {}
    at = 0
    for r_no, run in groupby(r_nos):
        end = at + len(list(run))
        stats = [
            end - at,
            sum(spans[at:end]),
            sum(durations[at:end]),
            min(los[at:end]),
            max(his[at:end]),
            min(ats[at:end]),
            max(ats[at:end]),
        ]
        known = ranges.get(r_no)
        if known is None:
            ranges[r_no] = stats
        else:  # the ids were not sorted: the range had a run before
            known[:3] = [a + b for a, b in zip(known[:3], stats[:3], strict=True)]
            known[3:] = [
                min(known[3], stats[3]),
                max(known[4], stats[4]),
                min(known[5], stats[5]),
                max(known[6], stats[6]),
            ]
        at = end
    range_workers: dict[tuple[int, str], list[int]] = {}
    for rw_key, duration, span in zip(zip(r_nos, workers, strict=True), durations, spans, strict=True):
        rw = range_workers.get(rw_key)
        if rw is None:
            range_workers[rw_key] = [1, duration, span]
        else:
            rw[0] += 1
            rw[1] += duration
            rw[2] += span
    names = _range_field_names({worker for _, worker in range_workers}, numbers)
    workers_total: dict[str, list[int]] = {}
    for (r_no, worker), (c, d, p) in range_workers.items():
        key = keys.stats_range(r_no)
        c_name, d_name, p_name = names[worker]
        builder.add(key, c_name, c)
        builder.add(key, d_name, d)
        builder.add(key, p_name, p + c)
        total = workers_total.setdefault(worker, [0, 0, 0])
        total[0] += c
        total[1] += d
        total[2] += p + c
    g = keys.stats_global
    builder.add(g, "completed", len(parts))
    builder.add(g, "processed", sum(spans) + len(parts))
    builder.add(g, "duration", sum(durations))
    builder.keep_max(g, "last_completed_at", max(ats))
    builder.keep_min(g, "first_completed_at", min(ats))
    for worker, (c, d, p) in workers_total.items():
        c_name, d_name, p_name = id_names(worker)
        builder.add(keys.stats_workers, c_name, c)
        builder.add(keys.stats_workers, d_name, d)
        builder.add(keys.stats_workers, p_name, p)
    for r_no, (count, span, duration, lo, hi, first, last) in ranges.items():
        key = keys.stats_range(r_no)
        builder.add(key, "count", count)
        builder.add(key, "data", span + count)
        builder.add(key, "duration", duration)
        builder.keep_min(key, "min_id", lo)
        builder.keep_max(key, "max_id", hi)
        builder.keep_min(key, "first_at", first)
        builder.keep_max(key, "last_at", last)
    for minute, n in Counter([t // 60 for t in ats if t >= minutes_from]).items():
        builder.add(keys.stats_minutes, str(minute), n)
    hours = [t // 3600 for t in ats]
    for hour, n in Counter(hours).items():
        builder.add(keys.stats_day(_day_name(hour // 24)), f"h{hour % 24:02d}", n)
    seconds: dict[int, int] = defaultdict(int)
    for hour, duration in zip(hours, durations, strict=True):
        seconds[hour] += duration
    for hour, summed in seconds.items():
        builder.add(keys.stats_day(_day_name(hour // 24)), f"s{hour % 24:02d}", summed)
    for (day, worker), n in Counter(zip([h // 24 for h in hours], workers, strict=True)).items():
        builder.add(keys.stats_day(_day_name(day)), f"w:{worker}", n)


def _range_field_names(worker_ids: set[str], numbers: WorkerNumbering | None) -> dict[str, tuple[str, str, str]]:
    if numbers is None:
        return {w: id_names(w) for w in worker_ids}
    names = {}
    for w in worker_ids:
        short = numbers.known_short_id(w)
        if short is None:
            raise ValidationError(f"worker {w!r} has no registry number: register it before its statistics")
        names[w] = numbered_names(short)
    return names


@lru_cache(maxsize=4096)
def _day_name(day: int) -> str:
    return day_of(day * 86400)


def rollup_segments(
    parts: Sequence[ArchivedPartition] | Columns,
    keys: KeySchema,
    range_width: int,
    now: int,
    numbers: WorkerNumbering,
    first_key: int = 0,
) -> tuple[list[str], list[str | int]]:
    """The commit's statistics keys and segments for ``parts``; ``numbers`` (the registry's)
    numbers every worker among them; segments name their keys by position from ``first_key``
    (`RollupBuilder.segments`)."""
    if not len(parts):
        return [], []
    builder = RollupBuilder()
    add_partitions(builder, parts, keys, range_width, numbers, (now // 60 - MINUTES_KEPT) * 60)
    builder.keep_max(keys.stats_global, "last_updated", now)
    return builder.segments(first_key)


class CommitRollups:
    """`CommitStatistics` for one namespace: its rollups, per ``range_width`` partitions."""

    def __init__(self, client: redis.Redis, keys: KeySchema, range_width: int = DEFAULT_RANGE_WIDTH) -> None:
        if range_width < 1:
            raise ValidationError("range_width must be positive")
        self.redis = client
        self.keys = keys
        self.range_width = range_width

    def check(self) -> None:
        """Record the range width on first use; refuse a different one (it would split ranges)."""
        meta = self.keys.stats_meta
        self.redis.hsetnx(meta, "range_width", self.range_width)
        stored = stored_int(meta, "range_width", self.redis.hget(meta, "range_width"), default=0, minimum=1)
        if stored != self.range_width:
            raise ValidationError(
                f"namespace {self.keys.namespace} keeps statistics per {stored} partitions, "
                f"not {self.range_width}: set PARTARCHIVE_STATS_RANGE_WIDTH={stored}"
            )

    def segments(
        self, cols: Columns, workers: WorkerNumbering, now: int, first_key: int
    ) -> tuple[list[str], list[str | int]]:
        return rollup_segments(cols, self.keys, self.range_width, now, workers, first_key)


def committer(
    archive: ArchiveLayer, range_width: int = DEFAULT_RANGE_WIDTH, clock: Callable[[], float] = time.time
) -> Committer:
    """The archive's commit with this namespace's statistics."""
    return Committer(archive, CommitRollups(archive.redis, archive.keys, range_width), clock)


def commit_buffer(
    archive: ArchiveLayer,
    *,
    flush_count: int = DEFAULT_FLUSH_COUNT,
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    range_width: int = DEFAULT_RANGE_WIDTH,
    clock: Callable[[], float] = time.monotonic,
) -> CommitBuffer:
    """Entries waiting for the archive's commit with this namespace's statistics."""
    return CommitBuffer(
        committer(archive, range_width), flush_count=flush_count, flush_interval_s=flush_interval_s, clock=clock
    )

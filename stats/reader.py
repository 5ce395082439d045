"""Reading the statistics: the merged view, range summaries, time series."""

from __future__ import annotations

from typing import Any, NamedTuple

import redis

from codec import DecodeError
from layers import KeySchema
from layers.active.reads import COUNTED, add_counts
from layers.archive.scan import Command, command
from layers.archive.tiers import stored_tier
from layers.plumbing.key_types import is_wrong_type, wrong_type_error
from layers.plumbing.replies import as_text
from layers.plumbing.roundtrip import RoundTrip
from layers.plumbing.runners import SyncIO
from layers.plumbing.settings import stored_int
from layers.plumbing.steps import Batch, Steps, one
from stats.compaction import COARSE, coarse_of, merge_fields
from stats.fields import KINDS, by_worker_id, per_worker, worker_ids
from stats.rollup import DEFAULT_RANGE_WIDTH


def _ints(raw: dict[Any, Any]) -> dict[str, int]:
    try:
        return {as_text(k): int(v) for k, v in raw.items()}
    except ValueError as exc:
        raise DecodeError(f"a statistics field is not a number: {exc}") from None


def _avg(total: int, count: int) -> float:
    return round(total / count, 3) if count else 0.0


def rollup_reads(pipe: Any, keys: KeySchema) -> None:
    """Add the reads of the completed rollups (global and per worker) to a pipeline; their two
    replies are `rollup_view`'s."""
    pipe.hgetall(keys.stats_global)
    pipe.hgetall(keys.stats_workers)


def _checked(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def rollup_view(active: dict[str, int], global_raw: Any, workers_raw: Any) -> dict[str, Any]:
    """The statistics view (`StatsReader.stats`) from the active counts and the replies to
    `rollup_reads`; raises `DecodeError`, or the Redis error a reply is."""
    g = _ints(_checked(global_raw))
    completed = g.get("completed", 0)
    active_total = sum(active.values())
    return {
        "active": active,
        "active_total": active_total,
        "completed": {
            "total_completed": completed,
            "total_processed_data": g.get("processed", 0),
            "total_duration": g.get("duration", 0),
            "avg_duration": _avg(g.get("duration", 0), completed),
            "last_updated": g.get("last_updated", 0),
            "last_completed_at": g.get("last_completed_at", 0),
        },
        "workers": RangeSummaries.worker_totals(_ints(_checked(workers_raw))),
        "total_partitions": active_total + completed,
        "degraded": False,
    }


def degraded_view(active: dict[str, int], exc: Exception) -> dict[str, Any]:
    """The statistics view when the rollups cannot be read: the active part, and why."""
    return {
        "active": active,
        "active_total": sum(active.values()),
        "completed": None,
        "workers": None,
        "archive": None,
        "degraded": True,
        "error": f"statistics unavailable: {exc}",
    }


class RangeSummaries:
    """The statistics of one ID range, read as steps (`layers.plumbing.steps`): the query router's fallback
    on either kind of client."""

    def __init__(self, keys: KeySchema) -> None:
        self.keys = keys

    def range_width_steps(self) -> Steps[int]:
        raw = yield one().hget(self.keys.stats_meta, "range_width")
        return stored_int(self.keys.stats_meta, "range_width", raw, default=DEFAULT_RANGE_WIDTH, minimum=1)

    def range_summary_steps(self, pid: int) -> Steps[dict[str, Any] | None]:
        """The statistics of the ID range holding partition ``pid`` (the router's fallback)."""
        width = yield from self.range_width_steps()
        return (yield from self.range_stats_steps(pid // width, width))

    def range_stats_steps(self, range_no: int, width: int | None = None) -> Steps[dict[str, Any] | None]:
        """One range's rollup; for a range merged into its coarse range (statistics retention),
        the coarse range's, with ``level`` saying which."""
        width = width or (yield from self.range_width_steps())
        batch = Batch()
        batch.hgetall(self.keys.stats_range(range_no))
        batch.hget(self.keys.stats_meta, "compact_range")
        batch.hgetall(self.keys.workers_by_short)
        raw, merged_below, registry = yield batch
        if range_no < int(merged_below or 0):
            return (yield from self._coarse_stats(coarse_of(range_no), width, range_no))
        if not raw:
            return None
        fields = by_worker_id(_ints(raw), worker_ids(registry))
        return self._summary(fields, range_no, [range_no * width, range_no * width + width - 1], "range")

    def _coarse_stats(self, coarse_no: int, width: int, range_no: int) -> Steps[dict[str, Any] | None]:
        batch = Batch()
        batch.hgetall(self.keys.stats_coarse(coarse_no))
        for r in range(coarse_no * COARSE, (coarse_no + 1) * COARSE):
            batch.hgetall(self.keys.stats_range(r))  # completions that arrived after their range was merged
        batch.hgetall(self.keys.workers_by_short)
        *replies, registry = yield batch
        names = worker_ids(registry)
        parts = [by_worker_id(_ints(x), names) for x in replies if x]
        if not parts:
            return None
        first = coarse_no * COARSE * width
        summary = self._summary(merge_fields(parts), range_no, [first, first + COARSE * width - 1], "coarse")
        summary["coarse_range"] = coarse_no
        return summary

    @staticmethod
    def worker_totals(fields: dict[str, int]) -> dict[str, dict[str, Any]]:
        """worker -> totals, from ID-named worker fields (a range's after `by_worker_id`)."""
        out: dict[str, dict[str, Any]] = {}
        for worker, kinds in per_worker(fields).items():
            count, duration, data = (kinds[k] for k in KINDS)
            out[worker] = {
                "count": count,
                "total_duration": duration,
                "data_processed": data,
                "avg_duration": _avg(duration, count),
            }
        return dict(sorted(out.items()))

    def _summary(self, f: dict[str, int], range_no: int, partitions: list[int], level: str) -> dict[str, Any]:
        return {
            "range": range_no,
            "level": level,
            "partitions": partitions,
            "partition_count": f.get("count", 0),
            "data_range": {"min": f.get("min_id"), "max": f.get("max_id")},
            "processed_data": f.get("data", 0),
            "worker_distribution": self.worker_totals(f),
            "completed_time_range": {"start": f.get("first_at"), "end": f.get("last_at")},
            "total_duration": f.get("duration", 0),
            "avg_duration": _avg(f.get("duration", 0), f.get("count", 0)),
        }


class StatsReader(RangeSummaries):
    def __init__(self, redis_client: redis.Redis, namespace: str | KeySchema = "elk", *, cluster: bool = False) -> None:
        super().__init__(KeySchema.of(namespace, cluster, client=redis_client))
        self.redis = redis_client
        self._io = SyncIO(redis_client)

    def range_width(self) -> int:
        return self._io.run(self.range_width_steps())

    def stats(self) -> dict[str, Any]:
        """Live active counts merged with the completed rollups, in one round trip.

        If the statistics cannot be read the active part is still returned, with
        ``degraded`` set and the reason in ``error``.
        """
        k = self.keys
        trip = RoundTrip.on(self.redis)
        counts, pipe = add_counts(trip, k), trip.commands
        rollup_reads(pipe, k)
        pipe.hmget(k.archive_meta, ["total", "tier"])
        replies = pipe.execute(raise_on_error=False)
        counted, replies = replies[: len(COUNTED)], replies[len(COUNTED) :]
        for reply in counted:
            if is_wrong_type(reply):
                raise wrong_type_error(self.redis, k)
            if isinstance(reply, Exception):
                raise reply
        trip.hand(counted)
        active = counts.value
        try:
            meta = _checked(replies[2])
            archive = {
                "archived_total": stored_int(k.archive_meta, "total", meta[0], default=0),
                "stored_tier": stored_tier(k.archive_meta, meta[1]).value,
            }
            return rollup_view(active, replies[0], replies[1]) | {"archive": archive}
        except (redis.RedisError, DecodeError) as exc:
            return degraded_view(active, exc)

    def range_summary(self, pid: int) -> dict[str, Any] | None:
        """The statistics of the ID range holding partition ``pid``."""
        return self._io.run(self.range_summary_steps(pid))

    def range_stats(self, range_no: int, width: int | None = None) -> dict[str, Any] | None:
        """One range's rollup (the coarse range's for a merged one, `level` says which)."""
        return self._io.run(self.range_stats_steps(range_no, width))

    def time_series(self, day: str) -> dict[str, Any]:
        """Completions per hour of one UTC day, and per worker that day."""
        f = _ints(self.redis.hgetall(self.keys.stats_day(day)))  # type: ignore[arg-type]
        workers = {name[2:]: n for name, n in f.items() if name.startswith("w:")}
        hourly = [f.get(f"h{h:02d}", 0) for h in range(24)]
        per_hour = [(f.get(f"s{h:02d}", 0), f.get(f"h{h:02d}", 0)) for h in range(24)]  # summed durations, count
        rolled = "d" in f  # hours older than the statistics retention were rolled into the day
        return {
            "day": day,
            "level": "daily" if rolled else "hourly",
            "hourly_completion": None if rolled else hourly,
            "hourly_avg_duration": None if rolled else [_avg(s, n) if n else None for s, n in per_hour],
            "worker_completions": dict(sorted(workers.items())),
            "total": f.get("d", 0) + sum(hourly),
        }


class RangeBounds(NamedTuple):
    """What a range's rollup (or its coarse range's, ``level``) says of a search: its completed
    count, its completion time bounds, and the completions of the searched worker (None: no worker
    searched)."""

    completed: int
    first_at: int | None
    last_at: int | None
    worker_count: int | None
    level: str  # "range" or "coarse"
    number: int  # the range's number, or the coarse range's


def range_bounds_commands(
    keys: KeySchema, ranges: list[int], worker_fields: list[str], merged_below: int
) -> tuple[list[Command], Any]:
    """One command (`layers.archive.scan.command`) per range, or per coarse range for those merged into one
    (below ``merged_below``): an HMGET of the count, the completion time bounds and
    ``worker_fields`` (a worker's count under each name a rollup may give it, `stats.fields`); and
    the function that turns their replies into range -> `RangeBounds` (None: no rollup)."""
    wanted = ["count", "first_at", "last_at", *worker_fields]
    coarse = sorted({coarse_of(r) for r in ranges if r < merged_below})
    fine = [r for r in ranges if r >= merged_below]
    commands = [command("hmget", keys.stats_coarse(c), wanted) for c in coarse]
    commands += [command("hmget", keys.stats_range(r), wanted) for r in fine]

    def parse(replies: list[Any]) -> dict[int, RangeBounds | None]:
        read: dict[tuple[str, int], RangeBounds | None] = {}
        for (level, number), values in zip([*(("coarse", c) for c in coarse), *(("range", r) for r in fine)], replies,
                                           strict=True):  # fmt: skip
            try:
                count, first, last, *workers = (None if v is None else int(v) for v in values)
            except ValueError as exc:
                raise DecodeError(f"a statistics field is not a number: {exc}") from None
            if count is None:
                read[(level, number)] = None
                continue
            worker = sum(w or 0 for w in workers) if worker_fields else None
            read[(level, number)] = RangeBounds(count, first, last, worker, level, number)
        return {r: read[("coarse", coarse_of(r))] if r < merged_below else read[("range", r)] for r in ranges}

    return commands, parse

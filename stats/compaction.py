"""Statistics keep their own retention: old hours become days, old ranges become coarse ranges.

Hourly series of days older than ``hourly_keep_days`` are rolled into one daily total per day
(the ``d`` field of the day hash); per-range rollups whose newest completion is older than
``range_keep_days`` are merged into coarse ranges of `COARSE` ranges each. Both walk with a
cursor in the statistics meta hash and one script per key (read and checked before it writes),
so a step is bounded, idempotent and resumable, and statistics memory grows with time and ids
at a bounded rate. A completion arriving later in a merged range lands in a fine range again;
readers and the consistency check add the two levels up.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from codec import DecodeError
from layers import KeySchema
from layers.plumbing.replies import script_error
from layers.plumbing.scripts import Scripts
from layers.plumbing.settings import stored_int

COARSE = 100
_DAYS_PER_STEP = 366
_RANGES_PER_STEP = 200
_LOOKBACK_DAYS = 400


def _refused(reply: Any, key: str, unchanged: str) -> None:
    """Raise a compaction script's refusal (`script_error`): ``corrupt_meta`` as `CorruptMetadata`
    naming ``key`` (or the coarse range's key the script names) and the field."""
    refusal = script_error(reply, meta_key=key, unchanged=unchanged)
    if refusal is not None:
        raise DecodeError(f"{key}: {refusal.code} {refusal.detail}")


def coarse_of(range_no: int) -> int:
    return range_no // COARSE


_MIN_FIELDS = frozenset({"min_id", "first_at"})
_MAX_FIELDS = frozenset({"max_id", "last_at"})


def merge_fields(rollups: list[dict[str, int]]) -> dict[str, int]:
    """Range rollups added up as the merge script adds them (sums; min/max kept)."""
    out: dict[str, int] = {}
    for fields in rollups:
        for name, value in fields.items():
            if name not in out:
                out[name] = value
            elif name in _MIN_FIELDS:
                out[name] = min(out[name], value)
            elif name in _MAX_FIELDS:
                out[name] = max(out[name], value)
            else:
                out[name] += value
    return out


class StatsCompactor:
    def __init__(
        self,
        client: redis.Redis,
        keys: KeySchema,
        *,
        range_width: int,
        hourly_keep_days: int = 30,
        range_keep_days: int = 30,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.range_width = range_width
        self.hourly_keep_days = hourly_keep_days
        self.range_keep_days = range_keep_days
        self._scripts = Scripts.of(client)

    def step(self, now: float | None = None) -> int:
        """One bounded step of day rolls and range merges; returns the keys compacted (0 = done)."""
        now = time.time() if now is None else now
        return self._roll_days(now) + self._merge_ranges(now)

    def _meta(self) -> dict[str, int]:
        raw: Any = self.redis.hmget(self.keys.stats_meta, ["compact_day", "compact_range"])
        g: Any = self.redis.hmget(self.keys.stats_global, ["first_completed_at", "last_completed_at"])
        first = int(g[0]) if g[0] else (int(g[1]) - _LOOKBACK_DAYS * 86400 if g[1] else 0)
        return {
            "day": int(raw[0]) if raw[0] else max(0, first // 86400),
            "range": int(raw[1] or 0),
            "have_stats": int(bool(g[1])),
            "last_day": int(g[1]) // 86400 if g[1] else -1,
        }

    def _roll_days(self, now: float) -> int:
        """Roll the next days (up to the newest completion's: later days hold no hours yet): which
        of them have a hash is read in one round trip, then one script per such day, all in one
        more. A long stretch without completions (a job resumed after months) costs a few EXISTS
        per step, not a script call per empty day."""
        meta = self._meta()
        if not meta["have_stats"]:
            return 0
        cutoff = int(now) // 86400 - self.hourly_keep_days
        day = meta["day"]
        last = min(cutoff, day + _DAYS_PER_STEP, meta["last_day"] + 1)
        if day >= last:
            return 0
        names = [time.strftime("%Y-%m-%d", time.gmtime(d * 86400)) for d in range(day, last)]
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.exists(self.keys.stats_day(name))
        names = [name for name, found in zip(names, pipe.execute(), strict=True) if found]
        replies = self._scripts.run_many([("stats_roll_day", [self.keys.stats_day(name)], []) for name in names])
        for name, reply in zip(names, replies, strict=True):
            _refused(reply, self.keys.stats_day(name), "nothing was rolled")
        self.redis.hset(self.keys.stats_meta, "compact_day", last)
        return max(sum(int(reply) > 0 for reply in replies), 1)

    def _merge_ranges(self, now: float) -> int:
        start = self._meta()["range"]
        meta = self.keys.archive_meta
        max_pid = stored_int(meta, "max_pid", self.redis.hget(meta, "max_pid"), default=0)
        last_range = max_pid // self.range_width
        if start > last_range:
            return 0
        cutoff = int(now) - self.range_keep_days * 86400
        first: Any = self.redis.hget(self.keys.stats_range(start), "last_at")
        if first is not None and int(first) >= cutoff:
            return 0  # the usual case while completions are young: nothing to merge yet
        numbers = list(range(start, min(last_range + 1, start + _RANGES_PER_STEP)))
        pipe = self.redis.pipeline(transaction=False)
        for r in numbers:
            pipe.hget(self.keys.stats_range(r), "last_at")
        newest = pipe.execute()
        old_after, seen = [False] * len(numbers), False  # whether a later range of the step is old enough
        for i in range(len(numbers) - 1, -1, -1):
            old_after[i] = seen
            seen = seen or (newest[i] is not None and int(newest[i]) < cutoff)
        merged = 0
        cursor = start
        for i, (r, last_at) in enumerate(zip(numbers, newest, strict=True)):
            if last_at is not None and int(last_at) >= cutoff:
                break  # a range still young: the cursor waits here
            if last_at is None and not old_after[i]:
                break  # no statistics yet and nothing older after it: not counted yet, not a gap
            if last_at is not None:
                reply = self._scripts(
                    "stats_merge_range", [self.keys.stats_range(r), self.keys.stats_coarse(coarse_of(r))], []
                )
                _refused(reply, self.keys.stats_range(r), "nothing was merged")
                merged += 1
            cursor = r + 1
        if cursor != start:
            self.redis.hset(self.keys.stats_meta, "compact_range", cursor)
        return merged + (cursor != start)

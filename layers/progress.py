"""Job progress: partitions total, done and failed, the completion rate over the last minutes and
hours, and an ETA for what is pending (the design's time-series statistics with trend analysis).

Done = archived + waiting in the archive queue + held by a pause (`layers.archival`): a partition
counts from the moment its worker completed it, whatever the archivers' backlog. The rates come
from samples of that count that the maintenance lock holder takes every ten seconds, kept one
per minute for a day (`KeySchema.progress`, about 1,500 small fields); the hourly trend of the
dashboard comes from the statistics' hourly series (`stats`).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from layers.keys import KeySchema
from layers.meta import stored_int
from layers.replies import as_text

SAMPLE_EVERY_S = 10.0
KEEP_MINUTES = 25 * 60
TREND_MINUTES = 60
#: Windows of the completion rate, in seconds; a rate needs samples covering half its window.
WINDOWS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600}
#: Windows whose rate the ETA uses, the first known one.
ETA_WINDOWS = ("5m", "15m", "1h", "1m", "6h", "24h")


@dataclass(frozen=True, slots=True)
class JobProgress:
    total: int
    done: int
    failed: int
    pending: int  # pending, claimed or running: what the ETA is for
    archived: int
    queued: int
    held: int
    percent_done: float | None
    rates: dict[str, float | None]  # completions per second over each window
    trend: list[dict[str, Any]]  # completions per minute, the last hour
    eta_s: float | None
    eta: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProgressLog:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(keys, client=redis_client)

    def _add_counts(self, pipe: Any) -> None:
        k = self.keys
        pipe.hget(k.archive_meta, "total")
        pipe.xlen(k.queue)
        pipe.zcard(k.archival_held)

    def _archived(self, raw: Any) -> int:
        return stored_int(self.keys.archive_meta, "total", raw, default=0)

    def sample(self, now: float | None = None) -> int:
        """Note how many partitions have completed so far, in this minute's field; returns it."""
        now = time.time() if now is None else now
        pipe = self.redis.pipeline(transaction=False)
        self._add_counts(pipe)
        pipe.hlen(self.keys.progress)
        total, queued, held, fields = pipe.execute()
        done = self._archived(total) + int(queued) + int(held)
        minute = int(now // 60)
        self.redis.hset(self.keys.progress, str(minute), f"{now:.3f},{done}")
        if int(fields) > KEEP_MINUTES + 60:
            names: Any = self.redis.hkeys(self.keys.progress)
            old = [n for n in names if not as_text(n).isdigit() or int(n) < minute - KEEP_MINUTES]
            if old:
                self.redis.hdel(self.keys.progress, *old)
        return done

    def read(self, by_status: dict[str, int], now: float | None = None) -> JobProgress:
        """The job's progress given the active layer's counts per status (`ActiveLayer.counts`)."""
        now = time.time() if now is None else now
        pipe = self.redis.pipeline(transaction=False)
        self._add_counts(pipe)
        pipe.hgetall(self.keys.progress)
        total, queued, held, raw = pipe.execute()
        archived, queued, held = self._archived(total), int(queued), int(held)
        return job_progress(by_status, archived, queued, held, parse_samples(raw), now)


def parse_samples(raw: dict[Any, Any]) -> list[tuple[float, int]]:
    """(time, completed so far) of each minute's sample, oldest first; unreadable fields skipped."""
    out = []
    for value in raw.values():
        try:
            at, done = as_text(value).split(",")
            out.append((float(at), int(done)))
        except ValueError:
            continue
    return sorted(out)


def job_progress(
    by_status: dict[str, int], archived: int, queued: int, held: int, samples: list[tuple[float, int]], now: float
) -> JobProgress:
    done = archived + queued + held
    failed = by_status.get("failed", 0)
    pending = sum(by_status.get(s, 0) for s in ("pending", "claimed", "running"))
    total = done + failed + pending
    rates = {name: _rate(samples, done, now, window) for name, window in WINDOWS.items()}
    rate = next((rates[w] for w in ETA_WINDOWS if rates[w]), None)
    if not done:
        eta_s, eta = None, "no completions yet"
    elif not pending:
        eta_s, eta = 0.0, "nothing pending"
    elif rate is None:
        eta_s, eta = None, "unknown: no completions measured lately"
    else:
        eta_s = round(pending / rate, 1)
        eta = f"{_duration(eta_s)} at {rate:,.1f}/s"
    return JobProgress(
        total=total,
        done=done,
        failed=failed,
        pending=pending,
        archived=archived,
        queued=queued,
        held=held,
        percent_done=round(100 * done / total, 2) if total else None,
        rates=rates,
        trend=_trend(samples, done, now),
        eta_s=eta_s,
        eta=eta,
    )


def _rate(samples: list[tuple[float, int]], done: int, now: float, window: float) -> float | None:
    """Completions per second since the newest sample at least ``window`` old (or the oldest, when
    the samples cover at least half the window); None without such a sample."""
    start = None
    for at, count in samples:
        if at <= now - window:
            start = (at, count)
        else:
            break
    if start is None and samples and now - samples[0][0] >= window / 2:
        start = samples[0]
    if start is None or now - start[0] <= 0:
        return None
    return round(max(0, done - start[1]) / (now - start[0]), 3)


def _trend(samples: list[tuple[float, int]], done: int, now: float) -> list[dict[str, Any]]:
    """Completions in each of the last `TREND_MINUTES` minutes (None where no sample tells)."""
    by_minute = {int(at // 60): count for at, count in samples}
    this = int(now // 60)
    out = []
    for minute in range(this - TREND_MINUTES + 1, this + 1):
        before, after = by_minute.get(minute - 1), done if minute == this else by_minute.get(minute)
        count = None if before is None or after is None else max(0, after - before)
        out.append({"minute": dt.datetime.fromtimestamp(minute * 60, dt.UTC).strftime("%H:%MZ"), "completed": count})
    return out


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"

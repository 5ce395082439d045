"""Job progress: partitions total, done and failed, the completion rate over the last minutes and
hours, and an ETA for what is pending (the design's time-series statistics with trend analysis).

Done = archived + waiting in the archive queue + held by a pause (`layers.control.switch`): a partition
counts from the moment its worker completed it, whatever the archivers' backlog. The rates come
from samples of that count that the maintenance lock holder takes every ten seconds, kept per
minute for a day (`KeySchema.progress`, about 1,500 small fields: each minute's last sample and its
first). Right after a job starts no sample covers half a window: a rate is then given over the
time the samples do cover (``rate_covers_s`` says how long).

The dashboard's charts of completions per minute and per hour are not drawn from these samples
but both from the statistics (`KeySchema.stats_minutes`, `KeySchema.stats_day`), counted by one
commit: samples know nothing of completions before the first of them, so a chart drawn from them
could be empty beside one that shows the same completions. The sampler drops the minutes' old
fields.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.settings import stored_int

SAMPLE_EVERY_S = 10.0
KEEP_MINUTES = 25 * 60
#: Minutes of `KeySchema.stats_minutes` kept (the dashboard shows the last hour).
MINUTES_KEPT = 3 * 60
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
    rate_covers_s: dict[str, float | None]  # seconds each rate covers: its window, or less just after the start
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
        minute = int(now // 60)
        pipe.hlen(self.keys.progress)
        pipe.hget(self.keys.progress, str(minute))
        pipe.hlen(self.keys.stats_minutes)
        total, queued, held, fields, before, minutes = pipe.execute()
        done = self._archived(total) + int(queued) + int(held)
        first = parse_samples({0: before})[:1] if before is not None else []
        first_at, first_done = first[0] if first else (now, done)  # the minute's first sample is kept
        self.redis.hset(self.keys.progress, str(minute), f"{now:.3f},{done},{first_at:.3f},{first_done}")
        if int(fields) > KEEP_MINUTES + 60:
            names: Any = self.redis.hkeys(self.keys.progress)
            old = [n for n in names if not as_text(n).isdigit() or int(n) < minute - KEEP_MINUTES]
            if old:
                self.redis.hdel(self.keys.progress, *old)
        if int(minutes) > MINUTES_KEPT + 60:
            self._drop_old_minutes(minute - MINUTES_KEPT)
        return done

    def _drop_old_minutes(self, before: int) -> None:
        names: Any = self.redis.hkeys(self.keys.stats_minutes)
        old = [n for n in names if not as_text(n).lstrip("-").isdigit() or int(n) < before]
        if old:
            self.redis.hdel(self.keys.stats_minutes, *old)

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
    """(time, completed so far) of each minute's first and last sample, oldest first; unreadable
    fields skipped (a field of an older version holds the last sample only)."""
    out = set()
    for value in raw.values():
        try:
            numbers = as_text(value).split(",")
            if len(numbers) not in (2, 4):
                continue
            for at, done in zip(numbers[::2], numbers[1::2], strict=True):
                out.add((float(at), int(done)))
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
    measured = {name: _rate(samples, done, now, window) for name, window in WINDOWS.items()}
    rates = {name: rate for name, (rate, _) in measured.items()}
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
        rate_covers_s={name: covers for name, (_, covers) in measured.items()},
        eta_s=eta_s,
        eta=eta,
    )


def _rate(samples: list[tuple[float, int]], done: int, now: float, window: float) -> tuple[float | None, float | None]:
    """Completions per second since the newest sample at least ``window`` old, else since the
    oldest sample if it is at least `SAMPLE_EVERY_S` old (just after the start: the rate over the
    time covered); with the seconds it covers. (None, None) without such a sample."""
    start = None
    for at, count in samples:
        if at <= now - window:
            start = (at, count)
        else:
            break
    if start is None and samples and now - samples[0][0] >= min(window / 2, SAMPLE_EVERY_S):
        start = samples[0]
    if start is None or now - start[0] <= 0:
        return None, None
    covers = now - start[0]
    return round(max(0, done - start[1]) / covers, 3), round(min(covers, window), 1)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"

"""What the dashboard shows for one namespace, read in a few round trips and never by scanning
the archive: counters, stream state, the liveness hash, the last two days' hourly rollups and the
last hour's per minute.

So the answer costs the same at 1,000 or 100 million archived partitions (`make bench
ARGS=dashboard` measures it at 1M).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from archiver.namespace import Namespace
from archiver.snapshot import ArchiveState
from archiver.status import status_report
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from stats.rollup import day_of

SERIES_HOURS = 48
SERIES_MINUTES = 60
DEAD_LETTERS_SHOWN = 5
NAMESPACES_TTL_S = 30.0
NAMESPACES_SCAN_LIMIT = 100_000  # keys looked at per refresh of the namespace list


class NamespaceList:
    """Namespaces on the server (those with an archive), found by SCAN and kept for 30 s."""

    def __init__(self, ns: Namespace) -> None:
        self._ns = ns
        self._found: list[str] = []
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self) -> list[str]:
        with self._lock:
            if time.monotonic() - self._at > NAMESPACES_TTL_S:
                self._found = self._scan()
                self._at = time.monotonic()
            return self._found

    def _scan(self) -> list[str]:
        found = {self._ns.config.namespace}
        pattern = KeySchema.ARCHIVE_META_PATTERN
        for seen, key in enumerate(self._ns.redis.scan_iter(match=pattern, count=1000)):
            name = KeySchema.namespace_of_archive_meta(as_text(key))
            if name:
                found.add(name)
            if seen >= NAMESPACES_SCAN_LIMIT:
                break
        return sorted(found)


def completion_series(ns: Namespace, now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The dashboard's two charts, read in one round trip from the statistics, whose commit counts
    each completion in its hour and its minute at once (so they agree): completions and mean
    duration per hour for the last 48 hours (UTC), and completions per minute for the last hour,
    each oldest first. Partitions completed but not archived yet (queued, held by a pause) are in
    neither, as in the rest of the statistics."""
    this_hour = int(now) // 3600
    hours = range(this_hour - SERIES_HOURS + 1, this_hour + 1)
    days = sorted({day_of(h * 3600) for h in hours})
    this_minute = int(now) // 60
    minutes = range(this_minute - SERIES_MINUTES + 1, this_minute + 1)
    pipe = ns.redis.pipeline(transaction=False)
    for day in days:
        pipe.hgetall(ns.keys.stats_day(day))
    pipe.hmget(ns.keys.stats_minutes, [str(m) for m in minutes])
    *replies, per_minute = pipe.execute()
    by_day = {day: {as_text(k): v for k, v in raw.items()} for day, raw in zip(days, replies, strict=True)}
    return _hourly(by_day, hours), [
        {"minute": _clock(m * 60, "%H:%MZ"), "completed": int(n or 0)} for m, n in zip(minutes, per_minute, strict=True)
    ]


def _clock(at: float, form: str) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime(form)


def _hourly(by_day: dict[str, dict[str, Any]], hours: range) -> list[dict[str, Any]]:
    out = []
    for h in hours:
        fields = by_day[day_of(h * 3600)]
        count = int(fields.get(f"h{h % 24:02d}", 0))
        seconds = int(fields.get(f"s{h % 24:02d}", 0))
        out.append(
            {
                "hour": _clock(h * 3600, "%Y-%m-%dT%H:00Z"),
                "completed": count,
                "avg_duration_s": round(seconds / count, 1) if count else None,
            }
        )
    return out


def tier_bytes(ns: Namespace, archive: ArchiveState) -> dict[str, Any]:
    """Bytes each part of the archive takes, and per archived partition."""
    pipe = ns.redis.pipeline(transaction=False)
    pipe.strlen(ns.keys.index)
    pipe.memory_usage(ns.keys.completed, samples=5)
    index, simple = pipe.execute()
    parts = {"batches": archive.sealed_blob_bytes, "index": int(index or 0), "simple_hash": int(simple or 0)}
    total = sum(parts.values())
    return {
        "bytes": parts,
        "total_bytes": total,
        "bytes_per_partition": round(total / archive.archived_total, 2) if archive.archived_total else None,
    }


def collect_overview(ns: Namespace, namespaces: NamespaceList) -> dict[str, Any]:
    """The dashboard's data: the namespace snapshot (`archiver.snapshot`, read once, shown under the
    names ``status`` uses), the charts, the archive's bytes and the latest dead letters."""
    snapshot = ns.snapshot()
    status = status_report(ns, snapshot)
    now = time.time()
    hourly, per_minute = completion_series(ns, now)
    letters = ns.queue.dead_letters(DEAD_LETTERS_SHOWN)
    return {
        "namespace": ns.config.namespace,
        "namespaces": namespaces.get(),
        "generated_at": round(now, 3),
        "active": status["active"],
        "progress": status["progress"],
        "pressure": status["pressure"],
        "archival": status["archival"],
        "queue": status["queue"],
        "archive": status["archive"] | tier_bytes(ns, snapshot.archive),
        "transition": status["transition"],
        "archivers": [
            {
                "consumer": h.consumer,
                "host": h.host,
                "pid": h.pid,
                "rate": round(h.rate, 1),
                "pending": h.uncommitted,
                "last_beat_age_s": round(max(0.0, now - h.last_beat), 1),
            }
            for h in snapshot.archivers
        ],
        "leader": status["leader"],
        "workers": status["workers"] | {
            "list": [
                {
                    "worker_id": w.worker_id,
                    "leads": w.worker_id == status["leader"]["leader"],
                    "host": w.host,
                    "pid": w.pid,
                    "window": w.window,
                    "in_hand": w.in_hand,
                    "processed": w.processed,
                    "failed": w.failed,
                    "last_beat_age_s": round(max(0.0, now - w.last_beat), 1),
                }
                for w in snapshot.workers
            ]
        },
        "dead_letters": {"count": status["queue"]["dead_letters"], "latest": letters},
        "series": hourly,
        "minutes": per_minute,
        "redis": status["redis"],
    }

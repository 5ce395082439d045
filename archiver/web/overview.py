"""What the dashboard shows for one namespace, read in a few round trips and never by scanning
the archive: counters, stream state, the liveness hash, the last two days' hourly rollups.

So the answer costs the same at 1,000 or 100 million archived partitions (`make bench
ARGS=dashboard` measures it at 1M).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from archiver.namespace import Namespace
from archiver.status import collect_status
from layers.keys import KeySchema
from layers.replies import as_text
from stats.rollup import day_of

SERIES_HOURS = 48
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


def hourly_series(ns: Namespace, now: float) -> list[dict[str, Any]]:
    """Completions and mean duration per hour for the last 48 hours (UTC), oldest first."""
    this_hour = int(now) // 3600
    hours = range(this_hour - SERIES_HOURS + 1, this_hour + 1)
    days = sorted({day_of(h * 3600) for h in hours})
    pipe = ns.redis.pipeline(transaction=False)
    for day in days:
        pipe.hgetall(ns.keys.stats_day(day))
    by_day = {day: {as_text(k): v for k, v in raw.items()} for day, raw in zip(days, pipe.execute(), strict=True)}
    out = []
    for h in hours:
        fields = by_day[day_of(h * 3600)]
        count = int(fields.get(f"h{h % 24:02d}", 0))
        seconds = int(fields.get(f"s{h % 24:02d}", 0))
        out.append(
            {
                "hour": dt.datetime.fromtimestamp(h * 3600, dt.UTC).strftime("%Y-%m-%dT%H:00Z"),
                "completed": count,
                "avg_duration_s": round(seconds / count, 1) if count else None,
            }
        )
    return out


def tier_bytes(ns: Namespace, archived_total: int) -> dict[str, Any]:
    """Bytes each part of the archive takes, and per archived partition."""
    k = ns.keys
    pipe = ns.redis.pipeline(transaction=False)
    pipe.hmget(k.archive_meta, ["sealed_blob_bytes", "sealed_json_bytes"])
    pipe.strlen(k.index)
    pipe.memory_usage(k.completed, samples=5)
    (blob, json_bytes), index, simple = pipe.execute()
    parts = {"batches": int(blob or 0), "index": int(index or 0), "simple_hash": int(simple or 0)}
    total = sum(parts.values())
    return {
        "bytes": parts,
        "total_bytes": total,
        "bytes_per_partition": round(total / archived_total, 2) if archived_total else None,
        "sealed_json_bytes": int(json_bytes or 0),
    }


def collect_overview(ns: Namespace, namespaces: NamespaceList) -> dict[str, Any]:
    now = time.time()
    archivers = ns.liveness.archivers()
    status = collect_status(ns.redis, ns.config, archivers=archivers)
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
        "archive": status["archive"] | tier_bytes(ns, status["archive"]["archived_total"]),
        "transition": status["transition"],
        "archivers": [
            {
                "consumer": h.consumer,
                "host": h.host,
                "pid": h.pid,
                "rate": round(h.rate, 1),
                "pending": h.pending,
                "last_beat_age_s": round(max(0.0, now - h.last_beat), 1),
            }
            for h in archivers
        ],
        "dead_letters": {"count": status["queue"]["dead_letters"], "latest": letters},
        "series": hourly_series(ns, now),
        "redis": status["redis"],
    }

"""``partarchive archival report``: the gray release's two cohorts side by side on live traffic
(`layers.control.switch`). The *archived* cohort is the completions `complete()` queued for the
archiver; the *held* one those it kept in the active hash (paused or outside the share),
released ones included, since they were held when they completed.

Counts come from the stored counters, as the metrics count them (held: the held zset and the
released counter; archived: the archive's total and the queue, less the released ones);
complete() latencies from the hash the worker SDKs hand theirs to (`layers.active.latencies`), as the
workers measured them; sizes and lookup times from a sample of each cohort, read and timed
here; ``all_active`` is timed once over the whole active hash, and without the held records it
is estimated in proportion to the records it would read (a held record costs what any other
does). The sample reads are the report's own traffic: small, but on the live server.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from archiver.namespace import Namespace
from archiver.router import QueryRouter
from archiver.snapshot import ArchiveState
from layers.active.latencies import COMPLETE_BUCKETS
from layers.control.switch import ArchivalState
from layers.plumbing.replies import as_text

SAMPLE = 50


@dataclass(frozen=True, slots=True)
class Cohort:
    completions: int
    complete_p50_ms: float | None  # the upper bound of the latency bucket holding it
    complete_p99_ms: float | None
    latency_count: int
    bytes_per_partition: float | None  # archive bytes (archived) or active-hash bytes (held)
    lookup_p50_ms: float | None
    lookup_p99_ms: float | None
    lookups_sampled: int


@dataclass(frozen=True, slots=True)
class CohortReport:
    share: int
    paused: bool
    held: int
    released: int
    archived: Cohort
    held_cohort: Cohort
    active_records: int
    all_active_s: float
    all_active_without_held_s: float  # estimated
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cohorts"] = {"archived": out.pop("archived"), "held": out.pop("held_cohort")}
        return out


def latency_quantile(counts: list[int], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding quantile ``q``; inf beyond the last bound."""
    total = sum(counts)
    if not total:
        return None
    running = 0
    for i, n in enumerate(counts):
        running += n
        if running >= q * total:
            return COMPLETE_BUCKETS[i] * 1000 if i < len(COMPLETE_BUCKETS) else float("inf")
    return float("inf")


def _counts(fields: dict[str, str], prefix: str) -> list[int]:
    out = []
    for i in range(len(COMPLETE_BUCKETS) + 1):
        raw = fields.get(f"{prefix}b{i}", "0")
        out.append(int(raw) if raw.isdigit() else 0)
    return out


def _percentiles(times: list[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    ordered = sorted(times)
    at = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.99)]
    return round(at[0] * 1000, 3), round(at[1] * 1000, 3)


def build_report(ns: Namespace, state: ArchivalState, *, sample: int = SAMPLE) -> CohortReport:
    r, k = ns.redis, ns.keys
    snap = ns.snapshot()  # the counts as status and /metrics show them
    archive, done_bytes = snap.archive, r.strlen(k.done)
    fields = {name: as_text(value) for name, value in snap.complete_latency.items()}
    held_total = state.held + state.released
    held_pids = [int(as_text(p)) for p in (r.zrandmember(k.archival_held, sample) or [])]
    archived_pids = _archived_sample(ns, int(done_bytes or 0), sample)
    router = QueryRouter(r, k)
    notes = []
    if not archived_pids:
        notes.append("no archived partition found to time lookups of")
    cohorts = []
    for prefix, completions, pids, size in (
        (
            "",
            max(0, archive.archived_total + snap.queue.length - state.released),
            archived_pids,
            _archive_bytes(ns, archive, sample),
        ),
        ("h", held_total, held_pids, _active_bytes(ns, held_pids)),
    ):
        counts = _counts(fields, prefix)
        timed = []
        for pid in pids:
            started = time.perf_counter()
            router.get(pid)
            timed.append(time.perf_counter() - started)
        p50, p99 = _percentiles(timed)
        cohorts.append(Cohort(completions, latency_quantile(counts, 0.5), latency_quantile(counts, 0.99),
                              sum(counts), size, p50, p99, len(timed)))  # fmt: skip
    started = time.perf_counter()
    ns.active.all_active()
    with_held = time.perf_counter() - started
    records = snap.active_size
    without = with_held * (records - state.held) / records if records else 0.0
    return CohortReport(state.effective_share, state.paused, state.held, state.released, cohorts[0], cohorts[1],
                        records, round(with_held, 6), round(without, 6), notes)  # fmt: skip


def _archived_sample(ns: Namespace, done_bytes: int, sample: int) -> list[int]:
    """Up to ``sample`` completed pids not held: the first set bit of the done bitmap after random places."""
    r, k = ns.redis, ns.keys
    found: set[int] = set()
    rng = random.Random()
    for _ in range(sample * 3 if done_bytes else 0):
        pid = r.bitpos(k.done, 1, rng.randrange(done_bytes))
        if pid is None or pid < 0 or pid in found:
            continue
        if r.zscore(k.archival_held, pid) is None and not r.hexists(k.active, pid):
            found.add(pid)
        if len(found) >= sample:
            break
    return sorted(found)


def _active_bytes(ns: Namespace, pids: list[int]) -> float | None:
    """A held partition's bytes in the active hash: its field and its record."""
    if not pids:
        return None
    return _mean_entry_bytes(ns, ns.keys.active, [str(pid) for pid in pids])


def _archive_bytes(ns: Namespace, archive: ArchiveState, sample: int) -> float | None:
    """An archived partition's bytes: a sealed blob's share when any were sealed, else a record
    of the simple hash (field and value)."""
    sealed = archive.archived_total - archive.simple_tier
    if sealed > 0 and archive.sealed_blob_bytes:
        return round(archive.sealed_blob_bytes / sealed, 1)
    fields = [as_text(f) for f in (ns.redis.hrandfield(ns.keys.completed, sample) or [])]
    if not fields:
        return None
    return _mean_entry_bytes(ns, ns.keys.completed, fields)


def _mean_entry_bytes(ns: Namespace, key: str, fields: list[str]) -> float:
    """The mean bytes of the entries ``fields`` of hash ``key``: field and value."""
    pipe = ns.redis.pipeline(transaction=False)
    for name in fields:
        pipe.hstrlen(key, name)
    sizes: list[int] = pipe.execute()
    return round(sum(n + len(f) for f, n in zip(fields, sizes, strict=True)) / len(fields), 1)

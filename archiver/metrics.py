"""Prometheus metrics of the daemon and the API. Every series carries a ``namespace`` label.

Process counters (router answers, decodes, statistics flushes) live in the default
registry: sum them by namespace. Layer state (active sizes, queue, archive, tiers,
compression, consistency check, the workers' completion latency) is the namespace snapshot
(`archiver.snapshot`) read at scrape time by `LayerStateCollector`, so every process that exposes
``/metrics`` reports the same, current numbers, as ``status`` and the dashboard show them:
combine those with ``max by (namespace)``, never sum them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from archiver.snapshot import NamespaceSnapshot, SnapshotReader
from codec import ACTIVE_STATUSES, PartArchiveError
from layers import ArchiveLayer, KeySchema, Tier
from layers.active.latencies import COMPLETE_BUCKETS
from layers.plumbing.settings import stored_int


def _log() -> Any:
    """The scrape's logger, structlog imported only then: the router's counters live here, and ``get``
    should not load the logging it never uses."""
    import structlog

    return structlog.get_logger("partarchive.metrics")


NS = ["namespace"]
ROUTER_ANSWERS = Counter("partarchive_router_answers", "Router answers by the layer that answered.", [*NS, "source"])
ROUTER_SECONDS = Histogram(
    "partarchive_router_seconds",
    "Router lookup latency.",
    NS,
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)
DECODES = Counter("partarchive_decode", "Archive blob decodes by result.", [*NS, "result"])
STATS_FLUSHES = Counter("partarchive_stats_flushes", "Statistics flushes (commit script calls).", NS)
GROUP_RECREATED = Counter(
    "partarchive_queue_group_recreated", "Times the archive queue's consumer group was gone and created again.", NS
)
CONSUMERS_REMOVED = Counter(
    "partarchive_queue_consumers_removed", "Consumers of dead archivers deleted from the queue's group.", NS
)


def start_series(namespace: str) -> None:
    """Create a namespace's counter series at zero, so they exist from the first scrape."""
    for result in ("success", "failure"):
        DECODES.labels(namespace=namespace, result=result)
    for counter in (STATS_FLUSHES, GROUP_RECREATED, CONSUMERS_REMOVED):
        counter.labels(namespace=namespace)
    ROUTER_SECONDS.labels(namespace=namespace)


class LayerStateCollector(Collector):
    """Exports one namespace snapshot (`archiver.snapshot`), read once per scrape.

    ``archive`` is the namespace's own archive layer (`archiver.namespace.Namespace.archive`):
    its tier policy is the configured one, so the target tier, the transition backlog, rate and
    ETA are measured against the tier the daemon moves to.
    """

    def __init__(self, archive: ArchiveLayer) -> None:
        self.keys: KeySchema = archive.keys
        self.namespace = archive.keys.namespace
        self.snapshots = SnapshotReader(archive.redis, archive.keys, archive.policy)

    def _gauge(self, name: str, text: str, value: float | None = None, labels: tuple[str, ...] = ()) -> Any:
        family = GaugeMetricFamily(name, text, labels=["namespace", *labels])
        if value is not None:
            family.add_metric([self.namespace], value)
        return family

    def collect(self) -> Iterator[Any]:
        up = self._gauge("partarchive_redis_up", "Whether the last scrape could read Redis.")
        damaged = self._gauge(
            "partarchive_namespace_damaged", "Whether the namespace holds data partarchive did not write (see the log)."
        )
        try:
            families = list(self.families(self.snapshots.read()))
        except PartArchiveError as exc:
            _log().warning("metrics scrape found damaged namespace data", error=str(exc))
            families = []
            damaged.add_metric([self.namespace], 1)
        except redis.RedisError as exc:
            _log().warning("metrics scrape could not read redis", error=str(exc))
            up.add_metric([self.namespace], 0)
            yield up
            return
        else:
            damaged.add_metric([self.namespace], 0)
        up.add_metric([self.namespace], 1)
        yield up
        yield damaged
        yield from families

    def families(self, snap: NamespaceSnapshot) -> Iterator[Any]:
        ns, gauge, q, ar = self.namespace, self._gauge, snap.queue, snap.archive
        active = gauge("partarchive_active_partitions", "Active partitions by status.", labels=("status",))
        for status in ACTIVE_STATUSES:
            active.add_metric([ns, status.value], snap.by_status.get(status.value, 0))
        yield active
        yield gauge(
            "partarchive_active_unreadable",
            "Active records no reader can read, set aside out of the claim indexes (dead-letters list).",
            snap.unreadable,
        )
        yield gauge("partarchive_queue_length", "Archive queue entries not yet archived.", q.length)
        yield gauge("partarchive_queue_pending", "Entries delivered and unacknowledged.", q.pending)
        yield gauge(
            "partarchive_queue_oldest_pending_age_seconds", "Age of the oldest unacknowledged entry.",
            q.oldest_pending_age_s,
        )  # fmt: skip
        yield gauge("partarchive_dead_letters", "Entries in the dead-letter stream.", q.dead_letters)
        total, simple = ar.archived_total, ar.simple_tier
        by_tier = gauge("partarchive_archived_partitions", "Archived partitions by storage.", labels=("storage",))
        by_tier.add_metric([ns, "simple"], min(simple, total) if total else simple)
        by_tier.add_metric([ns, "batched"], max(0, total - simple))
        yield by_tier
        for name, text, current in (
            ("archive_tier", "The stored tier, where the records are (stored_tier in status and /stats).",
             ar.stored_tier),
            ("archive_target_tier", "The tier the rule wants for the archived total, never below the stored one: "
             "where the daemon moves the records (target_tier in status and /stats).", ar.target_tier),
        ):  # fmt: skip
            tier = gauge(f"partarchive_{name}", f"{text} 1 for that tier.", labels=("tier",))
            for each in Tier:
                tier.add_metric([ns, each.value], 1 if each.value == current else 0)
            yield tier
        yield gauge(
            "partarchive_compression_ratio", "JSON bytes over sealed blobs' bytes, every seal so far.",
            ar.compression_ratio,
        )  # fmt: skip
        t = snap.transition
        for name, text, value in (
            ("transition_backlog", "Records still in the simple hash above the simple tier.", t.simple_left),
            ("transition_rate", "Records moved per second since the move started.", t.move_rate),
            ("transition_eta_seconds", "Estimated seconds until the move finishes (-1 unknown).",
             -1 if t.move_eta_s is None else t.move_eta_s),
            ("expired_share", "Share of archived partitions whose detail has expired.", t.expired_share),
            ("expiry_lag_seconds", "How far the expiry sweep is behind the retention policy.", t.expiry_lag_s),
            ("expiry_sweep_seconds", "Duration of the last expiry sweep step.", t.last_sweep_s),
            ("retention_seconds", "The stored retention policy of the summary tier.", t.retention_s),
            ("cold_files", "Files in the cold store (the summary tier's expired batches, as Parquet).",
             ar.cold.files),
            ("cold_bytes", "Bytes of the files in the cold store.", ar.cold.bytes),
            ("cold_partitions", "Partitions whose detail the cold store holds.", ar.cold.partitions),
        ):  # fmt: skip
            yield gauge(f"partarchive_{name}", text, value)
        yield gauge(
            "partarchive_archivers_alive",
            "Archivers whose health entry was refreshed within the staleness limit.",
            len(snap.archivers),
        )
        yield gauge(
            "partarchive_workers_alive",
            "Worker runtime processes whose presence entry was refreshed within its expiry.",
            len(snap.workers),
        )
        yield gauge(
            "partarchive_workers_in_hand",
            "Partitions the live worker runtime processes hold, as their last beats said.",
            sum(w.in_hand for w in snap.workers),
        )
        yield gauge(
            "partarchive_retries_waiting",
            "Failed partitions a retry policy sends back to pending once their back-off is over.",
            snap.retries_waiting,
        )
        lv = snap.leader
        for name, text, value in (
            ("leader_token", "The fencing token of the leader's lease (0: nobody leads; it grows at each change).",
             lv.lead.token if lv.lead is not None else 0),
            ("plan_partitions", "Partitions the leader's plan (and partarchive plan) created.", lv.plan.partitions),
            ("plan_holes", "Planned partitions the leader's check found neither active nor completed, or short.",
             lv.holes),
            ("plan_overlaps", "Partitions the leader's check found over IDs planned for others.", lv.overlaps),
            ("failed_for_good", "Failed partitions past their retry policy's last attempt, as the leader counted them.",
             lv.plan.failed_final),
        ):  # fmt: skip
            yield gauge(f"partarchive_{name}", text, value)
        yield gauge(
            "partarchive_stats_check_ok",
            "Result of the last statistics consistency check (1 ok, 0 failed, -1 never run).",
            snap.stats_check_ok,
        )
        yield gauge(
            "partarchive_stats_check_timestamp_seconds", "When the last consistency check ran.", snap.stats_check_at
        )
        yield from self._worker_latency(snap.complete_latency)
        yield from self._backlog_families(snap)

    def _backlog_families(self, snap: NamespaceSnapshot) -> Iterator[Any]:
        """The answers to a backlog (compression skipped, archival paused) and the job's progress."""
        gauge, p, state, job = self._gauge, snap.pressure, snap.archival, snap.progress
        yield gauge("partarchive_compression_skipped", "1 while archivers store records unsealed (a critical backlog).",
                    int(p.skipping))  # fmt: skip
        yield gauge(
            "partarchive_compression_skipped_seconds",
            "How long compression has been skipped (0 when it is not).",
            max(0.0, snap.read_at - p.since) if p.skipping and p.since else 0.0,
        )
        yield gauge("partarchive_unsealed_records", "Records of a batch tier waiting to be sealed.", p.unsealed_records)
        yield gauge("partarchive_unsealed_batches", "Batches stored unsealed, to seal.", p.unsealed_batches)
        yield gauge("partarchive_archival_paused", "1 while archival is paused.", int(state.paused))
        yield gauge("partarchive_archival_share", "Gray release: percent of partitions archived (0 while paused).",
                    state.effective_share)  # fmt: skip
        yield gauge("partarchive_archival_held", "Completions kept in the active hash (paused or outside the share).",
                    state.held)  # fmt: skip
        yield gauge("partarchive_archival_released", "Held completions sent to the archive queue so far.",
                    state.released)  # fmt: skip
        cohorts = gauge("partarchive_cohort_completions",
                        "Completions by gray-release cohort (held: kept in the active hash, released ones included).",
                        labels=("cohort",))  # fmt: skip
        cohorts.add_metric([self.namespace, "archived"], max(0, job.archived + job.queued - state.released))
        cohorts.add_metric([self.namespace, "held"], state.held + state.released)
        yield cohorts
        parts = gauge("partarchive_job_partitions", "The job's partitions by state.", labels=("state",))
        for name in ("total", "done", "failed", "pending"):
            parts.add_metric([self.namespace, name], getattr(job, name))
        yield parts
        rates = gauge(
            "partarchive_job_completion_rate", "Completions a second over a window (NaN: unknown).", labels=("window",)
        )
        for window, rate in job.rates.items():
            rates.add_metric([self.namespace, window], float("nan") if rate is None else rate)
        yield rates
        eta = -1 if job.eta_s is None else job.eta_s
        yield gauge("partarchive_job_eta_seconds", "Estimated seconds until nothing is pending (-1 unknown).", eta)

    def _worker_latency(self, fields: dict[str, Any]) -> Iterator[HistogramMetricFamily]:
        """The completion latency every worker SDK of the namespace reported (`layers.active.latencies`): in
        all, and per gray-release cohort (the fields of held completions start with ``h``)."""
        total = HistogramMetricFamily(
            "partarchive_worker_complete_seconds",
            "Latency of complete() as every worker SDK of the namespace measured it (kept in Redis).",
            labels=["namespace"],
        )
        by_cohort = HistogramMetricFamily(
            "partarchive_worker_complete_cohort_seconds",
            "Latency of complete() as the worker SDKs measured it, by gray-release cohort (archived or held).",
            labels=["namespace", "cohort"],
        )
        both = [self._latency_buckets(fields, prefix) for prefix in ("", "h")]
        for (cumulative, sum_s), cohort in zip(both, ("archived", "held"), strict=True):
            by_cohort.add_metric([self.namespace, cohort], cumulative, sum_value=sum_s)
        summed = [(bound, a + h) for (bound, a), (_, h) in zip(both[0][0], both[1][0], strict=True)]
        total.add_metric([self.namespace], summed, sum_value=both[0][1] + both[1][1])
        yield total
        yield by_cohort

    def _latency_buckets(self, fields: dict[str, Any], prefix: str) -> tuple[list[tuple[str, int]], float]:
        key = self.keys.complete_latency
        counts = [
            stored_int(key, f"{prefix}b{i}", fields.get(f"{prefix}b{i}"), default=0)
            for i in range(len(COMPLETE_BUCKETS) + 1)
        ]
        cumulative, running = [], 0
        for bound, n in zip([*map(str, COMPLETE_BUCKETS), "+Inf"], counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return cumulative, stored_int(key, f"{prefix}sum_us", fields.get(f"{prefix}sum_us"), default=0) / 1e6


def register_state_collector(archive: ArchiveLayer) -> LayerStateCollector:
    start_series(archive.keys.namespace)
    collector = LayerStateCollector(archive)
    REGISTRY.register(collector)
    return collector

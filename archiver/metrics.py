"""Prometheus metrics of the daemon and the API. Every series carries a ``namespace`` label.

Process counters (router answers, decodes, statistics flushes) live in the default
registry: sum them by namespace. Layer state (active sizes, queue, archive, tier,
compression, consistency check, the workers' completion latency) is read from Redis at
scrape time by `LayerStateCollector`, so every process that exposes ``/metrics`` reports the
same, current numbers: combine those with ``max by (namespace)``, never sum them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis
import structlog
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from codec import ACTIVE_STATUSES, PartArchiveError
from layers import ArchiveLayer, KeySchema, Tier
from layers.active.latencies import COMPLETE_BUCKETS
from layers.active.reads import COUNTED, counts_from, queue_counts
from layers.archive.queue import oldest_pending_age
from layers.archive.transitions import transition_state
from layers.control.liveness import Liveness
from layers.control.pressure import SKIP
from layers.control.switch import parse_state
from layers.plumbing.meta import stored_int, typed_errors
from layers.plumbing.replies import as_text
from stats.progress import job_progress, parse_samples

log = structlog.get_logger("partarchive.metrics")

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
    """Reads the layers' state from Redis in one round trip per scrape.

    ``archive`` is the namespace's own archive layer (`archiver.namespace.Namespace.archive`):
    its tier policy is the configured one, so the transition backlog, rate and ETA are measured
    against the tier the daemon moves to.
    """

    def __init__(self, archive: ArchiveLayer, group: str = "archivers") -> None:
        self.archive = archive
        self.redis = archive.redis
        self.keys: KeySchema = archive.keys
        self.group = group
        self.namespace = archive.keys.namespace

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
            with typed_errors(self.redis, self.keys):
                families = list(self._families())
        except PartArchiveError as exc:
            log.warning("metrics scrape found damaged namespace data", error=str(exc))
            families = []
            damaged.add_metric([self.namespace], 1)
        except redis.RedisError as exc:
            log.warning("metrics scrape could not read redis", error=str(exc))
            up.add_metric([self.namespace], 0)
            yield up
            return
        else:
            damaged.add_metric([self.namespace], 0)
        up.add_metric([self.namespace], 1)
        yield up
        yield damaged
        yield from families

    def _families(self) -> Iterator[Any]:
        k, ns, gauge = self.keys, self.namespace, self._gauge
        pipe = self.redis.pipeline(transaction=False)
        queue_counts(pipe, k)
        pipe.xlen(k.queue)
        pipe.xpending(k.queue, self.group)
        pipe.xlen(k.dead_letter)
        pipe.hgetall(k.archive_meta)
        pipe.hlen(k.completed)
        pipe.hgetall(k.stats_meta)
        pipe.hgetall(k.complete_latency)
        pipe.hgetall(k.pressure)
        pipe.zcard(k.unsealed)
        pipe.get(k.archival_paused)
        pipe.zcard(k.archival_held)
        pipe.get(k.archival_released)
        pipe.hgetall(k.progress)
        replies = pipe.execute(raise_on_error=False)
        counted = [0 if isinstance(r, redis.ResponseError) else r for r in replies[: len(COUNTED)]]
        counts = counts_from(counted)
        length, pending, dead, meta, simple, stats_meta, latency, *backlog = (
            ({} if isinstance(r, redis.ResponseError) else r) for r in replies[len(COUNTED) :]
        )
        active = gauge("partarchive_active_partitions", "Active partitions by status.", labels=("status",))
        for status in ACTIVE_STATUSES:
            active.add_metric([ns, status.value], counts.get(status.value, 0))
        yield active
        yield gauge("partarchive_queue_length", "Archive queue entries not yet archived.", length or 0)
        pending_count = int(pending.get("pending", 0)) if isinstance(pending, dict) else 0
        yield gauge("partarchive_queue_pending", "Entries delivered but not acknowledged.", pending_count)
        yield gauge(
            "partarchive_queue_oldest_pending_age_seconds",
            "Age of the oldest unacknowledged entry.",
            oldest_pending_age(pending),
        )
        yield gauge("partarchive_dead_letters", "Entries in the dead-letter stream.", dead or 0)
        meta = {as_text(a): as_text(b) for a, b in meta.items()}
        total = stored_int(k.archive_meta, "total", meta.get("total"), default=0)
        simple_count = int(simple or 0)
        by_tier = gauge("partarchive_archived_partitions", "Archived partitions by storage.", labels=("storage",))
        by_tier.add_metric([ns, "simple"], min(simple_count, total) if total else simple_count)
        by_tier.add_metric([ns, "batched"], max(0, total - simple_count))
        yield by_tier
        tier = gauge("partarchive_archive_tier", "Current archive tier (1 for the current one).", labels=("tier",))
        current = meta.get("tier", Tier.SIMPLE.value)
        for t in Tier:
            tier.add_metric([ns, t.value], 1 if t.value == current else 0)
        yield tier
        blob_bytes = stored_int(k.archive_meta, "sealed_blob_bytes", meta.get("sealed_blob_bytes"), default=0)
        json_bytes = stored_int(k.archive_meta, "sealed_json_bytes", meta.get("sealed_json_bytes"), default=0)
        ratio = json_bytes / blob_bytes if blob_bytes else 0.0
        yield gauge("partarchive_compression_ratio", "JSON bytes over sealed blobs' bytes, every seal so far.", ratio)
        state = transition_state(self.archive)
        eta = -1 if state.move_eta_s is None else state.move_eta_s
        for name, text, value in (
            ("transition_backlog", "Records still in the simple hash above the simple tier.", state.simple_left),
            ("transition_rate", "Records moved per second since the move started.", state.move_rate),
            ("transition_eta_seconds", "Estimated seconds until the move finishes (-1 unknown).", eta),
            ("expired_share", "Share of archived partitions whose detail has expired.", state.expired_share),
            ("expiry_lag_seconds", "How far the expiry sweep is behind the retention policy.", state.expiry_lag_s),
            ("expiry_sweep_seconds", "Duration of the last expiry sweep step.", state.last_sweep_s),
            ("retention_seconds", "The stored retention policy of the summary tier.", state.retention_s),
        ):
            yield gauge(f"partarchive_{name}", text, value)
        yield gauge(
            "partarchive_archivers_alive",
            "Archivers whose health entry was refreshed within the staleness limit.",
            len(Liveness(self.redis, self.keys).archivers()),
        )
        stats_meta = {as_text(a): as_text(b) for a, b in stats_meta.items()}
        yield gauge(
            "partarchive_stats_check_ok",
            "Result of the last statistics consistency check (1 ok, 0 failed, -1 never run).",
            stored_int(k.stats_meta, "last_check_ok", stats_meta.get("last_check_ok"), default=-1, minimum=-1),
        )
        yield gauge(
            "partarchive_stats_check_timestamp_seconds",
            "When the last consistency check ran.",
            stored_int(k.stats_meta, "last_check_at", stats_meta.get("last_check_at"), default=0),
        )
        yield from self._worker_latency({as_text(a): b for a, b in latency.items()})
        unsealed = simple_count if meta.get("tier", Tier.SIMPLE.value) != Tier.SIMPLE.value else 0
        yield from self._backlog_families(counts, total, int(length or 0), unsealed, *backlog)

    def _backlog_families(
        self, counts: dict[str, int], archived: int, queued: int, unsealed: int, *replies: Any
    ) -> Iterator[Any]:
        """The answers to a backlog (compression skipped, archival paused) and the job's progress."""
        pressure, unsealed_batches, paused, held, released, samples = replies
        gauge = self._gauge
        fields = {as_text(a): as_text(b) for a, b in pressure.items()}
        skipping = fields.get("mode") == SKIP
        since = float(fields.get("changed_at") or 0) if skipping else 0.0
        yield gauge("partarchive_compression_skipped", "1 while archivers store records unsealed (a critical backlog).",
                    int(skipping))  # fmt: skip
        yield gauge(
            "partarchive_compression_skipped_seconds",
            "How long compression has been skipped (0 when it is not).",
            max(0.0, time.time() - since) if since else 0.0,
        )
        yield gauge("partarchive_unsealed_records", "Records of a batch tier waiting to be sealed.", unsealed)
        yield gauge("partarchive_unsealed_batches", "Batches stored unsealed, to seal.", int(unsealed_batches or 0))
        state = parse_state(paused or None, held, released or None)
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
        cohorts.add_metric([self.namespace, "archived"], max(0, archived + queued - state.released))
        cohorts.add_metric([self.namespace, "held"], state.held + state.released)
        yield cohorts
        job = job_progress(counts, archived, queued, state.held, parse_samples(samples), time.time())
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

"""Prometheus metrics of the daemon and the API.

Process counters (router answers, decodes, statistics flushes) live in the default
registry. Layer state (active sizes, queue, archive, tier, compression, consistency check)
is read from Redis at scrape time by `LayerStateCollector`, so every process that exposes
``/metrics`` reports the same, current numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
import structlog
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from codec import ACTIVE_STATUSES, PartArchiveError
from layers import ArchiveLayer, KeySchema, Tier
from layers.liveness import Liveness
from layers.meta import stored_int, typed_errors
from layers.metrics import sdk_complete_seconds
from layers.queue import oldest_pending_age
from layers.replies import as_text
from layers.transitions import transition_state

log = structlog.get_logger("partarchive.metrics")

ROUTER_ANSWERS = Counter("partarchive_router_answers", "Router answers by the layer that answered.", ["source"])
ROUTER_SECONDS = Histogram(
    "partarchive_router_seconds",
    "Router lookup latency.",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)
DECODES = Counter("partarchive_decode", "Archive blob decodes by result.", ["result"])
STATS_FLUSHES = Counter("partarchive_stats_flushes", "Statistics flushes (commit script calls).")
SDK_COMPLETE_SECONDS = sdk_complete_seconds()  # the worker SDK's histogram, exposed by our processes too
GROUP_RECREATED = Counter(
    "partarchive_queue_group_recreated", "Times the archive queue's consumer group was gone and created again."
)
CONSUMERS_REMOVED = Counter(
    "partarchive_queue_consumers_removed", "Consumers of dead archivers deleted from the queue's group."
)

for _result in ("success", "failure"):
    DECODES.labels(result=_result)


class LayerStateCollector(Collector):
    """Reads the layers' state from Redis in one round trip per scrape."""

    def __init__(self, redis_client: redis.Redis, keys: KeySchema, group: str = "archivers") -> None:
        self.redis = redis_client
        self.keys = keys
        self.group = group

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("partarchive_redis_up", "Whether the last scrape could read Redis.")
        damaged = GaugeMetricFamily(
            "partarchive_namespace_damaged", "Whether the namespace holds data partarchive did not write (see the log)."
        )
        try:
            with typed_errors(self.redis, self.keys):
                families = list(self._families())
        except PartArchiveError as exc:
            log.warning("metrics scrape found damaged namespace data", error=str(exc))
            families = []
            damaged.add_metric([], 1)
        except redis.RedisError as exc:
            log.warning("metrics scrape could not read redis", error=str(exc))
            up.add_metric([], 0)
            yield up
            return
        else:
            damaged.add_metric([], 0)
        up.add_metric([], 1)
        yield up
        yield damaged
        yield from families

    def _families(self) -> Iterator[GaugeMetricFamily]:
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(k.counts)
        pipe.xlen(k.queue)
        pipe.xpending(k.queue, self.group)
        pipe.xlen(k.dead_letter)
        pipe.hgetall(k.archive_meta)
        pipe.hlen(k.completed)
        pipe.hgetall(k.stats_meta)
        replies = pipe.execute(raise_on_error=False)
        counts, length, pending, dead, meta, simple, stats_meta = (
            ({} if isinstance(r, redis.ResponseError) else r) for r in replies
        )
        counts = {as_text(a): stored_int(k.counts, as_text(a), b, default=0) for a, b in counts.items()}
        active = GaugeMetricFamily("partarchive_active_partitions", "Active partitions by status.", labels=["status"])
        for status in ACTIVE_STATUSES:
            active.add_metric([status.value], counts.get(status.value, 0))
        yield active
        yield GaugeMetricFamily(
            "partarchive_queue_length", "Archive queue entries not yet archived.", value=length or 0
        )
        pending_count = int(pending.get("pending", 0)) if isinstance(pending, dict) else 0
        age = oldest_pending_age(pending)
        yield GaugeMetricFamily(
            "partarchive_queue_pending", "Entries delivered but not acknowledged.", value=pending_count
        )
        yield GaugeMetricFamily(
            "partarchive_queue_oldest_pending_age_seconds", "Age of the oldest unacknowledged entry.", value=age
        )
        yield GaugeMetricFamily("partarchive_dead_letters", "Entries in the dead-letter stream.", value=dead or 0)
        meta = {as_text(a): as_text(b) for a, b in meta.items()}
        total = stored_int(k.archive_meta, "total", meta.get("total"), default=0)
        simple_count = int(simple or 0)
        by_tier = GaugeMetricFamily(
            "partarchive_archived_partitions", "Archived partitions by storage.", labels=["storage"]
        )
        by_tier.add_metric(["simple"], min(simple_count, total) if total else simple_count)
        by_tier.add_metric(["batched"], max(0, total - simple_count))
        yield by_tier
        tier = GaugeMetricFamily(
            "partarchive_archive_tier", "Current archive tier (1 for the current one).", labels=["tier"]
        )
        current = meta.get("tier", Tier.SIMPLE.value)
        for t in Tier:
            tier.add_metric([t.value], 1 if t.value == current else 0)
        yield tier
        blob_bytes = stored_int(k.archive_meta, "sealed_blob_bytes", meta.get("sealed_blob_bytes"), default=0)
        json_bytes = stored_int(k.archive_meta, "sealed_json_bytes", meta.get("sealed_json_bytes"), default=0)
        ratio = json_bytes / blob_bytes if blob_bytes else 0.0
        yield GaugeMetricFamily(
            "partarchive_compression_ratio", "JSON bytes over sealed blob bytes, over every seal so far.", value=ratio
        )
        state = transition_state(ArchiveLayer(self.redis, self.keys))
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
            yield GaugeMetricFamily(f"partarchive_{name}", text, value=value)
        yield GaugeMetricFamily(
            "partarchive_archivers_alive",
            "Archivers whose health entry was refreshed within the staleness limit.",
            value=len(Liveness(self.redis, self.keys).archivers()),
        )
        stats_meta = {as_text(a): as_text(b) for a, b in stats_meta.items()}
        yield GaugeMetricFamily(
            "partarchive_stats_check_ok",
            "Result of the last statistics consistency check (1 ok, 0 failed, -1 never run).",
            value=stored_int(k.stats_meta, "last_check_ok", stats_meta.get("last_check_ok"), default=-1, minimum=-1),
        )
        yield GaugeMetricFamily(
            "partarchive_stats_check_timestamp_seconds",
            "When the last consistency check ran.",
            value=stored_int(k.stats_meta, "last_check_at", stats_meta.get("last_check_at"), default=0),
        )


def register_state_collector(redis_client: redis.Redis, keys: KeySchema) -> LayerStateCollector:
    collector = LayerStateCollector(redis_client, keys)
    REGISTRY.register(collector)
    return collector

"""The worker runtime's Prometheus metrics, by namespace, in the process's default registry (served by
``partarchive worker --metrics-port``; with ``--processes N`` the supervisor adds up its children's).

Counters add up across processes (``sum by (namespace)``); ``partarchive_runtime_in_hand`` is the
partitions a process has in hand now (in a supervisor's group: the children's, added up)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

NS = ["namespace"]
PROCESSED = Counter("partarchive_runtime_partitions_processed", "Partitions the runtime's process() completed.", NS)
ITEMS = Counter(
    "partarchive_runtime_items_processed",
    "Items process() said it processed (a partition's ID count when it returned None).",
    NS,
)
PROCESS_SECONDS = Histogram(
    "partarchive_runtime_process_seconds",
    "Time process() took for a partition, completed or failed.",
    NS,
    buckets=(0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0),
)
FAILURES = Counter("partarchive_runtime_failures", "Partitions whose process() raised (each attempt).", NS)
RETRIES = Counter(
    "partarchive_runtime_retries", "Failures the retry policy sends back to pending after their back-off.", NS
)
LEASES_LOST = Counter(
    "partarchive_runtime_leases_lost",
    "Leases found lost while process() ran (taken over, not this worker's, the partition gone): not completed here.",
    NS,
)
HANDED_BACK = Counter(
    "partarchive_runtime_handed_back", "Partitions handed back to pending unfinished when the worker stopped.", NS
)
BREAKER_TRIPS = Counter(
    "partarchive_runtime_breaker_trips", "Times the circuit breaker stopped claims for a cool-down.", NS
)
IN_HAND = Gauge(
    "partarchive_runtime_in_hand", "Partitions the worker process has in hand, as its last beat counted them.", NS,
    multiprocess_mode="livesum",
)
LEADER = Gauge(
    "partarchive_runtime_leader", "1 while the process leads its namespace (the leader's lease is its).", NS,
    multiprocess_mode="livesum",
)
LEADER_TERMS = Counter("partarchive_runtime_leader_terms", "Leases the process took (each a change of leader).", NS)
PLANNED = Counter("partarchive_runtime_planned_partitions", "Partitions the leader created from its planner.", NS)
PLANNER_ERRORS = Counter(
    "partarchive_runtime_planner_errors", "Calls of the planner that raised or gave no ID (asked again later).", NS
)


#: Every series of the runtime, by the name its core counts it under.
SERIES: dict[str, Any] = {
    "processed": PROCESSED,
    "items": ITEMS,
    "process_seconds": PROCESS_SECONDS,
    "failures": FAILURES,
    "retries": RETRIES,
    "leases_lost": LEASES_LOST,
    "handed_back": HANDED_BACK,
    "breaker_trips": BREAKER_TRIPS,
    "in_hand": IN_HAND,
}
#: The leader's series (`archiver.runtime.leader`), by the name it counts them under.
LEADER_SERIES: dict[str, Any] = {
    "leader": LEADER,
    "terms": LEADER_TERMS,
    "planned": PLANNED,
    "planner_errors": PLANNER_ERRORS,
}


def start_series(namespace: str) -> None:
    """A namespace's series at zero, so they exist from the first scrape."""
    for metric in (*SERIES.values(), *LEADER_SERIES.values()):
        metric.labels(namespace=namespace)

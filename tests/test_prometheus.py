"""Prometheus that adds up: a namespace label on every series, the workers' completion latency
kept in Redis, and alert rules and Grafana queries that never sum what every process exports."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import redis
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from archiver import Config
from archiver.web import create_app
from layers import ActiveLayer, ArchiveLayer, KeySchema
from layers.active.latencies import COMPLETE_BUCKETS, HAND_EVERY_S
from tests.test_transitions import fill_simple_tier, records

ROOT = Path(__file__).resolve().parent.parent
RULES = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())["groups"][0]["rules"]
GRAFANA = json.loads((ROOT / "deploy/grafana/partarchive.json").read_text())
QUERIES = [t["expr"] for panel in GRAFANA["panels"] for t in panel["targets"]]


def _scrape(client: redis.Redis, namespace: str) -> str:
    with TestClient(create_app(client, Config(namespace=namespace))) as http:
        return http.get("/metrics").text


def _shared_gauges(text: str) -> set[str]:
    """The series every process exports alike: the layer state read from Redis."""
    return {
        family.name
        for family in text_string_to_metric_families(text)
        if family.name.startswith("partarchive_") and family.type in ("gauge", "histogram")
        and family.name not in ("partarchive_router_seconds",)
    }  # fmt: skip


#: Series a process has only once something happened to a namespace that this test does not do.
#: Series a process has only for what happened in it: a slot move ridden out, a worker runtime run (for its
#: namespaces).
_ONLY_WHEN_IT_HAPPENED = ("partarchive_slot_move_retries", "partarchive_runtime_")


def test_every_series_has_the_namespace(real_redis: redis.Redis, namespace: str) -> None:
    """Whatever earlier tests of this process did (their namespaces' series stay in its registry)."""
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 2000, 1000)
    part = layer.claim("w")
    assert part is not None
    layer.complete(part.partition_id, "w")
    text = _scrape(real_redis, namespace)
    families = [f for f in text_string_to_metric_families(text) if f.name.startswith("partarchive_")]
    assert len(families) > 20
    for family in families:  # the process counters also hold earlier tests' namespaces
        for sample in family.samples:
            assert sample.labels.get("namespace"), (family.name, sample)
        if not family.name.startswith(_ONLY_WHEN_IT_HAPPENED):
            assert namespace in {sample.labels["namespace"] for sample in family.samples}, family.name


def test_the_workers_completion_latency_is_kept_in_redis(real_redis: redis.Redis, namespace: str) -> None:
    """A completion hands the SDK's earlier latencies to Redis in the same call, at most once a
    second: two workers' completions add up in the exported histogram; a tampered hash is
    skipped, not an error."""
    first, second = ActiveLayer(real_redis, namespace), ActiveLayer(real_redis, namespace)
    first.create_partitions(1, 13_000, 1000)

    def complete(layer: ActiveLayer, worker: str) -> bool:
        part = layer.claim(worker)
        assert part is not None
        return not layer.complete(part.partition_id, worker).already_completed

    for layer, worker, count in ((first, "w1", 6), (second, "w2", 4)):
        for _ in range(count):
            complete(layer, worker)
    key = KeySchema.of(namespace, client=real_redis).complete_latency

    def handed() -> int:
        return sum(int(v) for k, v in real_redis.hgetall(key).items() if k.startswith(b"b"))

    assert handed() == 2  # each SDK's first latency, handed by its second completion; the rest wait a second
    time.sleep(HAND_EVERY_S + 0.05)
    complete(first, "w1")
    complete(second, "w2")

    def histogram() -> dict[str, float]:
        text = _scrape(real_redis, namespace)
        families = text_string_to_metric_families(text)
        family = next(f for f in families if f.name == "partarchive_worker_complete_seconds")
        return {s.name.rsplit("_", 1)[1] + s.labels.get("le", ""): s.value for s in family.samples}

    got = histogram()
    assert got["count"] == 6 + 4  # each SDK's last latency waits for a later completion
    assert got["bucket+Inf"] == got["count"] and 0 < got["sum"] < got["count"] * 1.0
    assert [got[f"bucket{b}"] for b in COMPLETE_BUCKETS] == sorted(got[f"bucket{b}"] for b in COMPLETE_BUCKETS)
    real_redis.hset(key, "sum_us", "not a number")
    time.sleep(HAND_EVERY_S + 0.05)
    assert complete(first, "w1")  # the completion itself goes through
    assert real_redis.hget(key, "sum_us") == b"not a number"
    assert handed() == 10  # skipped, not an error


def test_the_transition_gauges_follow_the_configured_tier_policy(real_redis: redis.Redis, namespace: str) -> None:
    """1,500 records in the simple hash: past a configured compressed tier from 1,000 they are the
    move's backlog (under the default 100,000 they would be none)."""
    fill_simple_tier(real_redis, KeySchema(namespace), records(1, 1500))
    config = Config(namespace=namespace, compressed_from=1000)
    with TestClient(create_app(real_redis, config)) as http:
        text = http.get("/metrics").text
    gauges = {
        f.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("namespace") == namespace
    }
    assert gauges["partarchive_transition_backlog"] == 1500
    assert gauges["partarchive_transition_eta_seconds"] == -1  # no move has started: the rate is unknown


def _aggregations(expr: str) -> list[tuple[str, str]]:
    """(aggregation, metric) for every metric an expression reads, the innermost aggregation first."""
    out = []
    for m in re.finditer(r"partarchive_\w+", expr):
        before = expr[: m.start()]
        found = re.findall(
            r"\b(sum|max|min|avg|count)\s*(?:by\s*\([^)]*\)\s*)?\(\s*(?:rate\(|delta\(|increase\(|max_over_time\()?\s*$",
            before,
        )
        out.append((found[-1] if found else "", re.sub(r"_(bucket|total)$", "", m.group())))
    return out


def test_queries_never_sum_what_every_process_exports(real_redis: redis.Redis, namespace: str) -> None:
    shared = _shared_gauges(_scrape(real_redis, namespace))
    assert {"partarchive_queue_length", "partarchive_active_partitions", "partarchive_worker_complete_seconds"} < shared
    for expr in [r["expr"] for r in RULES] + QUERIES:
        for aggregation, metric in _aggregations(expr):
            if metric in shared:
                assert aggregation in ("max", "min"), (expr, metric)
            else:
                assert aggregation == "sum", (expr, metric)  # counters of each process add up


def test_one_alert_per_namespace() -> None:
    for rule in RULES:
        clauses = re.findall(r"\bby \(([^)]*)\)", rule["expr"])
        assert clauses and all("namespace" in clause for clause in clauses), rule["alert"]
        assert "{{ $labels.namespace }}" in rule["annotations"]["summary"], rule["alert"]


def test_the_grafana_dashboard_filters_by_namespace() -> None:
    names = [v["name"] for v in GRAFANA["templating"]["list"]]
    assert names == ["datasource", "namespace"]
    for expr in QUERIES:
        for m in re.finditer(r"partarchive_\w+(\{[^}]*\})?", expr):
            assert m.group(1) and 'namespace="$namespace"' in m.group(1), expr


def test_a_child_caught_creating_its_metrics_file_does_not_fail_the_groups_scrape(
    real_redis: redis.Redis, namespace: str
) -> None:
    """``run --processes``: a child's counter file exists at 0 bytes until prometheus_client sizes it. A
    scrape then (or ever after, if the child was killed right then) answers, with the other children's counts."""
    from prometheus_client import generate_latest
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from archiver.daemon.group_metrics import GroupMetrics

    group = GroupMetrics([ArchiveLayer(real_redis, KeySchema(namespace))])
    try:
        name = "partarchive_stats_flushes"
        counted = MmapedDict(str(Path(group.directory) / "counter_101.db"))
        counted.write_value(mmap_key(name, f"{name}_total", ["namespace"], [namespace], "flushes"), 3.0, 0.0)
        counted.close()
        (Path(group.directory) / "counter_102.db").touch()  # created, not yet sized
        text = generate_latest(group.registry).decode()
    finally:
        group.close()
    assert f'{name}_total{{namespace="{namespace}"}} 3.0' in text
    assert f'partarchive_redis_up{{namespace="{namespace}"}} 1.0' in text

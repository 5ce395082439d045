"""The dashboard: its data endpoint on each engine, and the page itself in headless Chromium."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.web import create_app
from codec import ArchivedPartition
from layers import ActiveLayer, KeySchema
from layers.control.switch import ArchivalSwitch
from layers.keys import ARCHIVER_GROUP
from tests.browser import CHROMIUM_ARGS, chromium_path, screenshot_path
from tests.conftest import delete_namespace
from tests.helpers import free_port, http_get, start_server, wait_for


def _populate(client: redis.Redis, namespace: str, created: int = 30, claimed: int = 25, completed: int = 20) -> None:
    """``created`` partitions: ``completed`` archived, the rest claimed or pending; one dead letter."""
    config = Config(namespace=namespace, block_ms=10)
    active = ActiveLayer(client, namespace)
    active.create_partitions(1, created * 100, 100)
    for i in range(claimed):
        part = active.claim(f"worker-{i % 3}")
        assert part is not None
        if i < completed:
            active.complete(part.partition_id, f"worker-{i % 3}")
    client.xadd(KeySchema.of(namespace, client=client).queue, {"p": b"{not json"})
    drain(ArchiverDaemon(client, config, consumer="dash"))


def test_the_overview_adds_up(server_redis: redis.Redis, namespace: str) -> None:
    _populate(server_redis, namespace)
    with TestClient(create_app(server_redis, Config(namespace=namespace))) as http:
        o = http.get("/dashboard/overview").json()
    assert o["namespace"] == namespace and namespace in o["namespaces"]
    assert o["active"]["size"] == 10
    assert o["active"]["by_status"]["pending"] == 5
    assert o["active"]["by_status"]["claimed"] + o["active"]["by_status"].get("running", 0) == 5
    assert o["archive"]["archived_total"] == 20
    assert o["archive"]["stored_tier"] == o["archive"]["target_tier"] == "simple"
    assert o["archive"]["bytes"]["index"] > 0 and o["archive"]["bytes"]["simple_hash"] > 0
    assert o["archive"]["bytes_per_partition"] > 0
    assert len(o["series"]) == 48
    assert sum(p["completed"] for p in o["series"]) == 20  # completed just now: the last hours hold them all
    assert all(p["avg_duration_s"] is not None for p in o["series"] if p["completed"])
    assert o["queue"]["backlog"] == 0 and o["dead_letters"]["count"] == 1
    assert o["dead_letters"]["latest"][0]["reason"]
    p = o["progress"]
    assert (p["total"], p["done"], p["failed"], p["pending"], p["archived"]) == (30, 20, 0, 10, 20)
    assert p["percent_done"] == 66.67 and set(p["rates"]) >= {"1m", "1h", "24h"}
    assert len(o["minutes"]) == 60 and sum(m["completed"] for m in o["minutes"]) == 20  # the same completions
    assert not o["pressure"]["skipping"] and not o["archival"]["paused"]
    mode = "cluster" if isinstance(server_redis, redis.RedisCluster) else "single"
    assert (o["redis"]["mode"], o["redis"]["role"]) == (mode, "master") and o["redis"]["node"].startswith("127.0.0.1:")


def test_right_after_a_job_both_charts_show_its_completions(server_redis: redis.Redis, namespace: str) -> None:
    """3,000 partitions completed within the last minute, archived by an archiver started after
    the job (its first progress sample already counts them all: samples cannot tell when they
    completed). The chart per minute and the chart per hour come from the same statistics and
    agree, minute by minute and hour by hour."""
    keys = KeySchema.of(namespace, client=server_redis)
    now = int(time.time())
    server_redis.xgroup_create(keys.queue, ARCHIVER_GROUP, id="0", mkstream=True)
    pipe = server_redis.pipeline(transaction=False)
    for pid in range(1, 3001):
        part = ArchivedPartition(pid, (pid - 1) * 10 + 1, pid * 10, f"worker-{pid % 4}", now - pid % 50, 20)
        pipe.xadd(keys.queue, {"p": part.to_json()})
    pipe.execute()
    drain(ArchiverDaemon(server_redis, Config(namespace=namespace, block_ms=10), consumer="late"))
    with TestClient(create_app(server_redis, Config(namespace=namespace))) as http:
        o = http.get("/dashboard/overview").json()
    assert o["progress"]["done"] == 3000
    at = int(o["generated_at"])
    minutes = {at // 60 - 59 + i: m["completed"] for i, m in enumerate(o["minutes"])}
    assert sum(minutes.values()) == 3000
    by_minute = Counter((now - pid % 50) // 60 for pid in range(1, 3001))
    assert {m: n for m, n in minutes.items() if n} == dict(by_minute)
    hours = {at // 3600 - 47 + i: h["completed"] for i, h in enumerate(o["series"])}
    for hour in {m // 60 for m in minutes}:
        assert hours[hour] == sum(n for m, n in minutes.items() if m // 60 == hour), hour


def test_the_page_and_its_assets_are_served_from_the_package(real_redis: redis.Redis, namespace: str) -> None:
    with TestClient(create_app(real_redis, Config(namespace=namespace))) as http:
        page = http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
        assert len(assets) == 2
        for path in assets:
            assert http.get(path).status_code == 200
        assert "//" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', page.text)).replace("data:,", "")
        for path in ("/docs", "/redoc"):
            html = http.get(path).text
            urls = re.findall(r'(?:src|href|url)\s*[=:]\s*["\']([^"\']+)["\']', html)
            assert urls and not [u for u in urls if u.startswith(("http:", "https:", "//"))], urls
            assert all(http.get(u).status_code == 200 for u in urls if u.startswith("/static/"))


@pytest.fixture
def served(engine_url: str, namespace: str) -> Iterator[tuple[str, redis.Redis]]:
    client = redis.Redis.from_url(engine_url)
    _populate(client, namespace)
    port = free_port()
    proc = start_server(engine_url, namespace, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(f"{base}/healthz").status_code == 200, what="serve to answer")
        yield base, client
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
        delete_namespace(client, namespace)
        client.close()


@pytest.mark.browser
def test_the_dashboard_in_chromium(served: tuple[str, redis.Redis], request: pytest.FixtureRequest) -> None:
    """Headless Chromium (Debian's, driven by Playwright): the page loads offline with no console
    error, shows the engine's numbers, looks a partition up; a screenshot is kept."""
    from playwright.sync_api import sync_playwright

    base, client = served
    namespace = request.getfixturevalue("namespace")
    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route(re.compile(r"^(?!http://127\.0\.0\.1:).*"), lambda r: (outside.append(r.request.url), r.abort()))
            page.goto(base + "/")
            page.wait_for_function("document.getElementById('archived-total').textContent === '20'")
            assert page.text_content("#active-total") == "10"
            assert page.text_content("#dead-count") == "1"
            assert page.text_content("#stored-tier") == page.text_content("#target-tier") == "simple"
            port, replicas = client.connection_pool.connection_kwargs["port"], client.info("replication")
            assert page.text_content("#redis-node").endswith(f":{port} (single, master)")
            assert page.text_content("#redis-replicas").endswith(f" of {replicas['connected_slaves']}")
            assert page.locator("#chart svg rect.bar").count() == 48
            assert page.locator("#chart svg circle.duration-point").count() >= 1
            assert page.locator("#archivers tr").count() == 2  # the header and the daemon that drained
            assert page.text_content("#archivers tr:nth-child(2) td") == "dash"
            assert page.text_content("#progress-text").startswith("20 of 30 done (66.67%)")
            assert page.locator("#trend svg rect.bar").count() == 60
            tips = page.locator("#trend svg rect title").all_text_contents()
            drawn = [int(t.split(": ")[1].split()[0].replace(",", "")) for t in tips]
            assert sum(drawn) == 20  # the per-minute chart shows what the hourly chart counts
            assert page.locator("#trend svg rect[height='0']").count() == 60 - sum(1 for n in drawn if n)
            assert page.get_attribute("#progress-bar", "aria-valuenow") == "67"
            assert page.locator("#modes").is_hidden() and page.text_content("#archival-mode") == "running"
            ArchivalSwitch(client, KeySchema(namespace)).pause("tester")
            page.wait_for_function("!document.getElementById('modes').hidden", timeout=15_000)
            assert "Archival is paused" in page.text_content("#modes")
            assert page.text_content("#archival-mode") == "paused (share 100% on resume); 0 held, 0 released"
            switch = ArchivalSwitch(client, KeySchema(namespace))
            switch.resume()
            switch.rollout(40)  # a gray release: the mode says the share and both cohorts' counts
            mode = "document.getElementById('archival-mode').textContent"
            page.wait_for_function(f"{mode}.startsWith('gray')", timeout=15_000)
            gray = "gray release: 40% of completions archived; 0 held, 0 released"
            assert page.text_content("#archival-mode") == gray
            assert "partarchive archival report" in page.text_content("#modes")
            switch.rollout(100)
            page.fill("#pid", "3")
            page.click("#lookup button[type=submit]")
            page.wait_for_function("document.getElementById('lookup-answer').textContent.includes('archive')")
            assert '"partition_id":3' in page.text_content("#lookup-record")
            page.fill("#pid", "29")
            page.click("#lookup button[type=submit]")
            page.wait_for_function("document.getElementById('lookup-answer').textContent.includes('active')")
            page.fill("#f-ids", "2-6")
            page.select_option("#f-status", "completed")
            page.click("#search-go")
            page.wait_for_function("document.getElementById('search-summary').textContent.includes('searched')")
            cells = page.locator("#search-results tr td:first-child").all_text_contents()
            assert cells == ["2", "3", "4", "5", "6"], cells
            assert page.text_content("#search-summary").startswith("5 partitions; searched: archive:simple")
            assert page.locator("#search-more").is_hidden()
            page.screenshot(path=str(screenshot_path(request.config, "dashboard.png")), full_page=True)
            for path, ready in (("/docs", ".swagger-ui .opblock"), ("/redoc", "redoc-wrap, .redoc-wrap")):
                page.goto(base + path)
                page.wait_for_selector(ready, timeout=15_000)
        finally:
            browser.close()
    assert not errors, (errors, outside)
    assert not outside, outside

"""Dashboard section: how long the dashboard's data takes for a namespace of 1M archived partitions.

The namespace is the compressed tier with its statistics, completions shifted so the last 48
hours are full (the chart's rollups), plus 1,000 active partitions and 1,000 queued entries.
Server time is `collect_overview` in process; HTTP adds the request through the ASGI app
(`/dashboard/overview`, and `/` for the page). "first" includes the SCAN that lists the
namespaces, which is then kept for 30 s. ``BENCH_DASHBOARD_SIZE`` changes the size.
"""

from __future__ import annotations

import os
import time

from archiver.config import Config
from archiver.namespace import Namespace
from bench.engine import bench_engine, drop
from bench.populate import write_compressed, write_stats
from bench.report import median, p99, sample_us, table
from bench.workload import standard_workload
from layers import ActiveLayer

TARGET_MS = 100.0
NS = "benchdash"
RUNS = 200


def _populate(ns: Namespace, n: int) -> None:
    parts = list(standard_workload(n))
    shift = int(time.time()) - parts[-1].completed_at
    parts = [p._replace(completed_at=p.completed_at + shift) for p in parts]
    write_compressed(ns.redis, ns.keys, parts, ns.policy)
    write_stats(ns.redis, ns.keys, parts, ns.policy)
    active = ActiveLayer(ns.redis, ns.keys)
    active.create_partitions(n * 1000 + 1, n * 1000 + 2_000_000, 1000)
    for _ in range(1000):
        part = active.claim("bench-worker")
        assert part is not None
        active.complete(part.partition_id, "bench-worker")


def run() -> tuple[str, bool]:
    from fastapi.testclient import TestClient  # only this section needs the web face

    from archiver.web import create_app
    from archiver.web.overview import NamespaceList, collect_overview

    n = int(os.environ.get("BENCH_DASHBOARD_SIZE", "1000000"))
    with bench_engine() as (client, engine):
        drop(client, NS)
        config = Config(namespace=NS)
        ns = Namespace(client, config)
        _populate(ns, n)
        namespaces = NamespaceList(ns)
        started = time.perf_counter()
        first = collect_overview(ns, namespaces)
        first_ms = (time.perf_counter() - started) * 1000
        assert first["archive"]["archived_total"] == n and first["queue"]["backlog"] == 1000
        server = sample_us(lambda: collect_overview(ns, namespaces), RUNS)
        with TestClient(create_app(client, config)) as http:
            http.get("/dashboard/overview")  # the app's own namespace list, filled once
            over_http = sample_us(lambda: http.get("/dashboard/overview").raise_for_status(), RUNS)
            page = sample_us(lambda: http.get("/").raise_for_status(), RUNS)
        drop(client, NS)
    rows = [
        ("overview data (server time)", round(first_ms, 1), median(server) / 1000, p99(server) / 1000),
        ("GET /dashboard/overview", "", median(over_http) / 1000, p99(over_http) / 1000),
        ("GET / (the page)", "", median(page) / 1000, p99(page) / 1000),
    ]
    ok = max(first_ms, p99(server) / 1000) <= TARGET_MS
    out = table(
        f"dashboard: {n:,} archived partitions (compressed tier), 1,000 active, 1,000 queued, {engine}",
        ["request", "first ms", "median ms", "p99 ms"],
        [(name, f, round(m, 2), round(p, 2)) for name, f, m, p in rows],
    )
    out += f"{RUNS} requests each. target: server time <= {TARGET_MS:.0f} ms: " + ("met" if ok else "MISSED") + "\n"
    return out, ok

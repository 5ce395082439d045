"""Latency section: router lookups and get_all_active() with 1M archived partitions."""

from __future__ import annotations

import gc
import os
import random
import socket
import time

import redis

from archiver.router import QueryRouter, Source
from bench.engine import bench_engine_url, drop
from bench.populate import write_compressed, write_simple
from bench.report import median, p99, sample_us, table
from bench.workload import standard_workload
from layers import ActiveLayer, ArchiveLayer, KeySchema, TierPolicy

LOOKUPS = 10_000
TARGET_LOOKUP_P99_US = 500.0
TARGET_ALL_ACTIVE_US = 5000.0
TARGET_HTTP_ABOVE_ROUTER_US = 1000.0
TEN_YEARS = 10 * 365 * 86400
HTTP_REQUESTS = 3000
HTTP_RUNS = 3


class KeepAliveClient:
    """The least an HTTP/1.1 client can do, as load generators such as wrk do: one keep-alive
    socket, a request written in one send, the answer read by its Content-Length. What it measures
    is the server; the standard library's client adds its own header parsing (shown beside)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.extra = b""

    def get(self, path: str) -> tuple[bytes, bytes]:
        self.sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode())
        data = self.extra
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += self._recv()
        self.extra = body[length:]
        return head.split(b"\r\n", 1)[0], body[:length]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def http_against_router(
    url: str, namespace: str, router: QueryRouter, pids: list[int], runs: int = 3, requests: int = 3000
) -> list[list[list[float]]]:
    """GET /partitions/{id} over loopback from a `partarchive serve` process, each request beside
    an in-process router lookup of the same id, so all see the same moment of a noisy machine.
    Per run: [router us, HTTP us (minimal client), HTTP us (http.client)]."""
    import http.client
    import signal

    from tests.helpers import free_port, start_server

    port = free_port()
    server = start_server(url, namespace, port)
    minimal = KeepAliveClient(port)
    stdlib = http.client.HTTPConnection("127.0.0.1", port)

    def fetch_minimal(pid: int) -> None:
        status, body = minimal.get(f"/partitions/{pid}")
        assert status == b"HTTP/1.1 200 OK" and b'"source":"archive:batch"' in body, (status, body[:200])

    def fetch_stdlib(pid: int) -> None:
        stdlib.request("GET", f"/partitions/{pid}")
        reply = stdlib.getresponse()
        body = reply.read()
        assert reply.status == 200 and b'"source":"archive:batch"' in body, body[:200]

    measured = []
    try:
        for pid in pids[:200]:
            fetch_minimal(pid)
            fetch_stdlib(pid)
        for run in range(runs):
            samples: list[list[float]] = [[], [], []]
            for pid in pids[run * requests : (run + 1) * requests]:
                for i, call in enumerate((router.get, fetch_minimal, fetch_stdlib)):
                    t0 = time.perf_counter_ns()
                    call(pid)
                    samples[i].append((time.perf_counter_ns() - t0) / 1000)
            measured.append(samples)
    finally:
        minimal.close()
        stdlib.close()
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=15)
    return measured


def _lookups(router: QueryRouter, pids: list[int], expect: Source) -> list[float]:
    answer = router.get(pids[0])
    assert answer.source is expect, (answer, expect)
    it = iter(pids)
    return sample_us(lambda: router.get(next(it)), len(pids))


def _all_active(client: redis.Redis, namespace: str, first_pid: int) -> list[float]:
    keys = KeySchema(namespace)
    client.hset(keys.meta, "last_pid", first_pid - 1)
    active = ActiveLayer(client, namespace)
    active.create_partitions(1, 1_000_000, 1000)
    for i in range(300):
        active.claim(f"worker{i % 32 + 1}")
    assert len(active.get_all_active()) == 1000
    sample_us(active.get_all_active, 20)  # warm-up
    return sample_us(active.get_all_active, 200)


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_ARCHIVED", "1000000"))
    rng = random.Random(1)
    pids = [rng.randint(1, n) for _ in range(LOOKUPS)]
    rows: list[tuple[str, str, float, float]] = []
    with bench_engine_url() as (client, engine, url):
        empty_ns, simple_ns, comp_ns, summ_ns = "benchlat0", "benchlats", "benchlatc", "benchlatz"
        for ns in (empty_ns, simple_ns, comp_ns, summ_ns):
            drop(client, ns)
        write_simple(client, KeySchema(simple_ns), standard_workload(n))
        client.hset(KeySchema(simple_ns).archive_meta, mapping={"total": n, "tier": "simple"})
        write_compressed(client, KeySchema(comp_ns), standard_workload(n), TierPolicy(summary_above=10**9))
        summary = TierPolicy(compressed_from=0, summary_above=0, retention_s=TEN_YEARS)
        write_compressed(client, KeySchema(summ_ns), standard_workload(n), summary, expire=True)

        gc.collect()
        gc.freeze()  # as a long-running service does after start-up: full collections skip the set-up's objects
        samples = {
            "all_active, 0 archived": _all_active(client, empty_ns, 1),
            f"all_active, {n:,} archived": _all_active(client, comp_ns, n + 1),
        }
        active_router = QueryRouter(client, comp_ns)
        samples["lookup: active"] = _lookups(active_router, [n + 1 + p % 1000 for p in pids], Source.ACTIVE)
        samples["lookup: archive:simple"] = _lookups(QueryRouter(client, simple_ns), pids, Source.SIMPLE)
        samples["lookup: archive:batch (compressed)"] = _lookups(active_router, pids, Source.BATCH)
        samples["lookup: archive:batch (summary)"] = _lookups(QueryRouter(client, summ_ns), pids, Source.BATCH)
        staging = ArchiveLayer(client, KeySchema(comp_ns))
        staged = list(standard_workload(50, first=n + 2001))
        staging.stage(staged)
        samples["lookup: archive:staging"] = _lookups(
            active_router, [staged[i % 50].partition_id for i in range(LOOKUPS)], Source.STAGING
        )
        http_runs = http_against_router(url, comp_ns, active_router, pids, HTTP_RUNS, HTTP_REQUESTS)
        for ns in (empty_ns, simple_ns, comp_ns, summ_ns):
            drop(client, ns)
        gc.unfreeze()
    ok = True
    for name, values in samples.items():
        target = TARGET_ALL_ACTIVE_US if name.startswith("all_active") else TARGET_LOOKUP_P99_US
        met = (median(values) if name.startswith("all_active") else p99(values)) < target
        ok = ok and met
        rows.append((name, f"{len(values):,}", median(values), p99(values)))
    out = table(f"latency through the Python API, {engine}", ["operation", "samples", "median us", "p99 us"], rows)
    http_rows = []
    for i, (router_us, http_us, stdlib_us) in enumerate(http_runs):
        above = p99(http_us) - p99(router_us)
        ok = ok and above <= TARGET_HTTP_ABOVE_ROUTER_US
        http_rows.append(
            (f"run {i + 1}", f"{len(http_us):,}", median(router_us), p99(router_us), median(http_us), p99(http_us),
             above, "met" if above <= TARGET_HTTP_ABOVE_ROUTER_US else "MISSED", median(stdlib_us), p99(stdlib_us))
        )  # fmt: skip
    out += "\n" + table(
        "HTTP GET /partitions/{id} (archive:batch, compressed) beside the in-process router, request by request",
        ["run", "requests", "router median us", "router p99 us", "HTTP median us", "HTTP p99 us", "p99 above",
         "result", "http.client median us", "http.client p99 us"],
        http_rows,
    )  # fmt: skip
    out += (
        f"targets: archived lookup p99 < {TARGET_LOOKUP_P99_US:.0f} us; get_all_active() with 1,000 active "
        f"< {TARGET_ALL_ACTIVE_US:.0f} us (median), the same with 0 or {n:,} archived; HTTP GET p99 at most "
        f"{TARGET_HTTP_ABOVE_ROUTER_US:.0f} us above the router's in every run: {'met' if ok else 'MISSED'}\n"
        "gc.freeze() after set-up: without it, full collections of the set-up's millions of objects add "
        "~15 ms to a few all_active calls (p99), not to the median.\n"
    )
    return out, ok

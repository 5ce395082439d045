"""HTTP section: ``GET /partitions/{id}`` under 1, 16 and 64 concurrent clients, for each way the
server can run the lookup, in the same run: the blocking router on the event loop (the short path
before the asyncio router), the blocking router in the thread pool, and the asyncio router (what
``partarchive serve`` does now). Lookups per second and latency percentiles, per client count.

Each client is one keep-alive connection sending its next request when the answer to the previous
one has arrived, as wrk does; all of them run in one load process of their own (asyncio, raw
sockets), so the server process has its core to itself as far as this machine allows. Sizes:
``BENCH_HTTP_ARCHIVED`` partitions archived (compressed tier, default 100,000),
``BENCH_HTTP_SECONDS`` measured per client count (default 3, after a warm-up of a second),
``BENCH_HTTP_CLIENTS`` (default ``1,16,64``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

from bench.engine import bench_engine_url, drop
from bench.populate import write_compressed
from bench.report import median, p99, table
from bench.workload import standard_workload
from layers import KeySchema, TierPolicy

NS = "benchhttp"
PATHS = {
    "blocking": "blocking router on the event loop (before)",
    "threadpool": "blocking router in the thread pool",
    "asyncio": "asyncio router (now)",
}


async def _client(port: int, pids: list[int], until: float, warm_until: float, out: list[float], seed: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rng = random.Random(seed)
    try:
        while (started := time.perf_counter()) < until:
            writer.write(b"GET /partitions/%d HTTP/1.1\r\nHost: bench\r\n\r\n" % rng.choice(pids))
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200") or b'"source":"archive:batch"' not in body:
                raise AssertionError((head[:40], body[:120]))
            if started >= warm_until:
                out.append((time.perf_counter() - started) * 1e6)
    finally:
        writer.close()


def _load(port: int, clients: int, seconds: float, pids: list[int], results: Any) -> None:
    """In a process of its own: ``clients`` connections for a second of warm-up and ``seconds``
    measured; puts the latencies (us) and the measured time."""

    async def main() -> list[float]:
        warm_until = time.perf_counter() + 1.0
        until = warm_until + seconds
        samples: list[list[float]] = [[] for _ in range(clients)]
        await asyncio.gather(*(_client(port, pids, until, warm_until, samples[i], i) for i in range(clients)))
        return [s for each in samples for s in each]

    results.put((asyncio.run(main()), seconds))


def _serve(url: str, path: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.http_server", url, NS, str(port), path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {path} server exited: {proc.communicate()[1].decode()[-500:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {path} server did not come up")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_HTTP_ARCHIVED", "100000"))
    seconds = float(os.environ.get("BENCH_HTTP_SECONDS", "3"))
    levels = [int(c) for c in os.environ.get("BENCH_HTTP_CLIENTS", "1,16,64").split(",")]
    pids = random.Random(7).sample(range(1, n + 1), min(n, 20_000))
    ctx = multiprocessing.get_context("spawn")
    rows = []
    with bench_engine_url() as (client, engine, url):
        drop(client, NS)
        write_compressed(client, KeySchema(NS), standard_workload(n), TierPolicy(summary_above=10**9))
        for path, label in PATHS.items():
            port = _free_port()
            server = _serve(url, path, port)
            try:
                for clients in levels:
                    results = ctx.Queue()
                    load = ctx.Process(target=_load, args=(port, clients, seconds, pids, results))
                    load.start()
                    latencies, measured_s = results.get(timeout=seconds + 120)
                    load.join(30)
                    rate = len(latencies) / measured_s
                    rows.append((label, clients, f"{rate:,.0f}", median(latencies), p99(latencies)))
            finally:
                server.terminate()
                server.wait(15)
        drop(client, NS)
    out = table(
        f"HTTP GET /partitions/{{id}} under concurrent clients, archive:batch (compressed), {n:,} archived, {engine}",
        ["lookup runs as", "clients", "lookups/s", "median us", "p99 us"],
        rows,
    )
    out += (
        f"{seconds:g} s measured per client count after 1 s of warm-up; one keep-alive connection per client, "
        "the next request sent when the answer arrived; the load runs in one process of its own.\n"
    )
    return out, True

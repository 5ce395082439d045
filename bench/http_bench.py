"""HTTP section: ``GET /partitions/{id}`` of ``partarchive serve`` against the endpoint a user writes by
hand (`bench.http_yardstick`: FastAPI, one route, ``HGET`` of the original scheme's hash of JSON records),
in the same run, on the same engine, at 1, 16 and 64 connections.

The partitions are archived twice: in the compressed tier for ``serve`` (what it answers: record,
layer, degraded flag), and as elk_coordinator's JSON records in one hash for the yardstick. Load:
``wrk -t1`` (Debian package ``wrk``: ``apt-get install wrk``) for ``BENCH_HTTP_SECONDS`` (5) per
connection count after a second of warm-up, random ids; without wrk the section's own load generator
(one asyncio process, one keep-alive connection per client, the next request sent when the answer has
arrived, as wrk does). ``BENCH_HTTP_ROUNDS`` (3) rounds, each measuring both servers at each count,
alternately first; the table gives the medians and each round's ratio, so a noisy moment shows.
Sizes: ``BENCH_HTTP_ARCHIVED`` (100,000), ``BENCH_HTTP_CLIENTS`` (``1,16,64``).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import redis

from bench.engine import bench_engine_url, drop
from bench.populate import write_compressed
from bench.report import median, p99, table
from bench.workload import standard_workload
from codec.elk import archived_as_elk, encode_elk
from layers import KeySchema, TierPolicy
from layers.keys import ElkKeys

NS = "benchhttp"
YARDSTICK_HASH = ElkKeys(f"{NS}:").archived
WRK_SCRIPT = """
local n = %d
request = function()
  return wrk.format("GET", "/partitions/" .. math.random(1, n))
end
done = function(summary, latency, requests)
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.status + e.timeout
  io.write(string.format('{"requests":%%d,"us":%%d,"p50":%%d,"p99":%%d,"errors":%%d}\\n', summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(99), errors))
end
"""


class Measured(NamedTuple):
    rate: float  # requests a second
    p50_us: float
    p99_us: float


def _client(port: int, n: int, until: float, warm_until: float, out: list[float], seed: int) -> Any:
    async def run() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rng = random.Random(seed)
        try:
            while (started := time.perf_counter()) < until:
                writer.write(b"GET /partitions/%d HTTP/1.1\r\nHost: bench\r\n\r\n" % rng.randint(1, n))
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise AssertionError(head[:60])
                if started >= warm_until:
                    out.append((time.perf_counter() - started) * 1e6)
        finally:
            writer.close()

    return run()


def _own_load(port: int, clients: int, seconds: float, n: int, results: Any) -> None:
    """In a process of its own: ``clients`` connections, a second of warm-up, ``seconds`` measured."""

    async def main() -> list[float]:
        warm_until = time.perf_counter() + 1.0
        until = warm_until + seconds
        samples: list[list[float]] = [[] for _ in range(clients)]
        await asyncio.gather(*(_client(port, n, until, warm_until, samples[i], i) for i in range(clients)))
        return [s for each in samples for s in each]

    latencies = asyncio.run(main())
    results.put(Measured(len(latencies) / seconds, median(latencies), p99(latencies)))


def _wrk(script: Path, port: int, clients: int, seconds: float) -> Measured:
    def once(duration: float) -> dict[str, Any]:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{clients}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(script),
             f"http://127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=duration + 60, check=True,
        )  # fmt: skip
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        if result["errors"]:
            raise RuntimeError(f"wrk saw {result['errors']} errors or non-2xx answers on port {port}")
        return result

    once(1)  # warm-up
    result = once(seconds)
    return Measured(result["requests"] / (result["us"] / 1e6), float(result["p50"]), float(result["p99"]))


def _measure(port: int, clients: int, seconds: float, n: int, script: Path | None) -> Measured:
    if script is not None:
        return _wrk(script, port, clients, seconds)
    results = multiprocessing.get_context("spawn").Queue()
    load = multiprocessing.get_context("spawn").Process(target=_own_load, args=(port, clients, seconds, n, results))
    load.start()
    measured: Measured = results.get(timeout=seconds + 120)
    load.join(30)
    return Measured(*measured)


def _start(argv: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[2]} exited: {proc.communicate()[1].decode()[-500:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/partitions/1", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{argv[2]} did not come up")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _populate(client: redis.Redis, n: int) -> None:
    drop(client, NS)
    client.delete(YARDSTICK_HASH)
    write_compressed(client, KeySchema(NS), standard_workload(n), TierPolicy(summary_above=10**9))
    pipe = client.pipeline(transaction=False)
    for part in standard_workload(n):
        pipe.hset(YARDSTICK_HASH, str(part.partition_id), encode_elk(archived_as_elk(part)))
        if len(pipe) >= 5000:
            pipe.execute()
    pipe.execute()


def _check_answers(serve_port: int, yard_port: int, n: int) -> None:
    pid = n // 2
    ours = httpx.get(f"http://127.0.0.1:{serve_port}/partitions/{pid}").json()
    theirs = httpx.get(f"http://127.0.0.1:{yard_port}/partitions/{pid}").json()
    assert ours["source"] == "archive:batch" and ours["degraded"] is False, ours
    assert ours["partition"]["partition_id"] == theirs["partition_id"] == pid, (ours, theirs)


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_HTTP_ARCHIVED", "100000"))
    seconds = float(os.environ.get("BENCH_HTTP_SECONDS", "5"))
    rounds = int(os.environ.get("BENCH_HTTP_ROUNDS", "3"))
    levels = [int(c) for c in os.environ.get("BENCH_HTTP_CLIENTS", "1,16,64").split(",")]
    with bench_engine_url() as (client, engine, url), tempfile.TemporaryDirectory() as tmp:
        script = None
        if shutil.which("wrk"):
            script = Path(tmp) / "lookups.lua"
            script.write_text(WRK_SCRIPT % n)
        _populate(client, n)
        env = dict(os.environ, REDIS_URL=url, PARTARCHIVE_NAMESPACE=NS)
        serve_port, yard_port = _free_port(), _free_port()
        servers = [
            _start([sys.executable, "-m", "bench.http_yardstick", url, YARDSTICK_HASH, str(yard_port)], yard_port, env),
            _start([sys.executable, "-m", "archiver", "serve", "--port", str(serve_port), "--log-level", "warning"],
                   serve_port, env),
        ]  # fmt: skip
        results: dict[tuple[str, int], list[Measured]] = {}
        try:
            _check_answers(serve_port, yard_port, n)
            for r in range(rounds):
                for clients in levels:
                    order = [("yardstick", yard_port), ("serve", serve_port)]
                    for name, port in order if r % 2 == 0 else order[::-1]:
                        results.setdefault((name, clients), []).append(_measure(port, clients, seconds, n, script))
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(15)
            drop(client, NS)
            client.delete(YARDSTICK_HASH)
    return _report(results, levels, n, seconds, rounds, engine, "wrk -t1" if script else "own load generator")


def _report(
    results: dict[tuple[str, int], list[Measured]], levels: list[int], n: int, seconds: float, rounds: int,
    engine: str, load: str,
) -> tuple[str, bool]:  # fmt: skip
    """The table, and whether every row meets the target: at least the hand-written rate, a p99 no worse."""
    rows = []
    all_met = True
    for clients in levels:
        yard, ours = results[("yardstick", clients)], results[("serve", clients)]
        yard_rate, our_rate = median([m.rate for m in yard]), median([m.rate for m in ours])
        yard_p99, our_p99 = median([m.p99_us for m in yard]), median([m.p99_us for m in ours])
        per_round = " ".join(f"{o.rate / y.rate:.2f}" for y, o in zip(yard, ours, strict=True))
        met = our_rate >= yard_rate and our_p99 <= yard_p99
        all_met &= met
        rows.append((
            clients, f"{yard_rate:,.0f}", f"{our_rate:,.0f}", f"{our_rate / yard_rate:.2f}x", per_round,
            f"{yard_p99 / 1000:.2f}", f"{our_p99 / 1000:.2f}",
            f"{median([m.p50_us for m in yard]) / 1000:.2f}", f"{median([m.p50_us for m in ours]) / 1000:.2f}",
            "met" if met else "MISSED",
        ))  # fmt: skip
    out = table(
        f"HTTP GET /partitions/{{id}}: partarchive serve (archive:batch, compressed tier) against a hand-written "
        f"FastAPI HGET endpoint, {n:,} archived, {engine}",
        ["connections", "hand-written req/s", "serve req/s", "ratio", "ratio by round", "hand p99 ms", "serve p99 ms",
         "hand p50 ms", "serve p50 ms", "result"],
        rows,
    )  # fmt: skip
    return out + (
        f"{load}, {seconds:g} s per connection count after 1 s of warm-up, random ids; medians of {rounds} rounds, "
        "each measuring both servers at each count (alternately first).\n"
        "target: serve at least the hand-written rate, its p99 no worse, at each connection count.\n"
    ), all_met

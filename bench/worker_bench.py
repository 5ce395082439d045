"""Worker section: the SDK's complete() against a plain HSET, from 8 worker processes at once.

Each process claims a partition, then times two calls on its own connection: ``complete()``
and, as the yardstick, the HSET a hand-written worker would do to mark the partition done (the
same record into a scratch hash). The order of the two alternates so neither always runs second.
Between iterations a worker "works" for each of ``BENCH_WORKER_THINK_MS`` (default 2 and 10 ms),
as real workers do; with no pause at all, eight Python processes on a small machine measure the
scheduler, not Redis. Round trips are counted on the client's connections (one per command or
pipeline sent). Three runs, medians of each run's p99.

Then throughput, in the same run: 8 processes claim, start and complete as fast as they can, each
with one blocking loop (`ActiveLayer`) or 50 asyncio tasks (`AsyncActiveLayer`, one client per
process), beside a plain HSET per completion written the same two ways: completions per second
and complete()'s (or the HSET's) median and p99. ``BENCH_WORKER_THROUGHPUT`` completions per
process (default 2,000).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from typing import Any

import redis
import redis.asyncio

from bench.engine import CountingConnection, bench_engine_url, drop
from bench.report import median, p99, table
from layers import ActiveLayer, AsyncActiveLayer

PROCESSES = 8
RUNS = 3
TARGET_RATIO = 3.0
NS = "benchwork"


def _worker(url: str, namespace: str, worker: str, count: int, think_s: float, start: Any, out: Any) -> None:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    sdk = ActiveLayer(client, namespace)
    scratch = f"{namespace}_scratch"
    complete_us: list[float] = []
    hset_us: list[float] = []
    trips: list[int] = []
    start.wait()
    for i in range(count):
        part = sdk.claim(worker)
        if part is None:
            break
        payload = part.to_json()
        for step in (0, 1) if i % 2 else (1, 0):
            if step == 0:
                before = CountingConnection.sent
                t0 = time.perf_counter_ns()
                sdk.complete(part.partition_id, worker)
                complete_us.append((time.perf_counter_ns() - t0) / 1000)
                trips.append(CountingConnection.sent - before)
            else:
                t0 = time.perf_counter_ns()
                client.hset(scratch, str(part.partition_id), payload)
                hset_us.append((time.perf_counter_ns() - t0) / 1000)
        time.sleep(think_s)
    out.put((complete_us[1:], hset_us[1:], trips[1:]))  # the first call loads the script
    client.close()


def one_run(
    url: str, per_process: int, think_s: float, namespace: str = NS
) -> tuple[list[float], list[float], list[int]]:
    """complete() and HSET microseconds and round trips per completion, from `PROCESSES` workers."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, namespace, f"w{i}", per_process, think_s, start, out))
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # every process imported and connected
    start.set()
    complete_us: list[float] = []
    hset_us: list[float] = []
    trips: list[int] = []
    for _ in procs:
        c, h, t = out.get(timeout=600)
        complete_us += c
        hset_us += h
        trips += t
    for proc in procs:
        proc.join(30)
    return complete_us, hset_us, trips


ASYNC_TASKS = 50
THROUGHPUT_NS = "benchworkrate"
PAYLOAD = b'{"partition_id":1,"min_id":1,"max_id":10,"worker_id":"w","completed_at":1,"duration":1}'


def _blocking(url: str, namespace: str, worker: str, count: int, sdk_calls: bool, start: Any, out: Any) -> None:
    """One loop: claim, start, complete (or one HSET) ``count`` times; the latencies of complete/HSET."""
    client = redis.Redis.from_url(url)
    sdk = ActiveLayer(client, namespace)
    client.ping()
    sdk.get(1)  # the clock synced and the connection open before the start
    latencies: list[float] = []
    start.wait()
    began = time.time()
    done = 0
    for i in range(count):
        if sdk_calls:
            part = sdk.claim(worker)
            if part is None:
                break
            sdk.start(part.partition_id, worker)
            t0 = time.perf_counter_ns()
            sdk.complete(part.partition_id, worker)
        else:
            t0 = time.perf_counter_ns()
            client.hset(f"{namespace}_scratch", f"{worker}:{i}", PAYLOAD)
        latencies.append((time.perf_counter_ns() - t0) / 1000)
        done += 1
    out.put((began, time.time(), done, latencies[1:]))  # the first call loads the script
    client.close()


def _asyncio(url: str, namespace: str, worker: str, count: int, sdk_calls: bool, start: Any, out: Any) -> None:
    """`ASYNC_TASKS` tasks sharing one client (and SDK), ``count`` completions (or HSETs) in all."""

    async def main() -> tuple[float, float, int, list[float]]:
        client = redis.asyncio.Redis.from_url(url, max_connections=ASYNC_TASKS)
        sdk = AsyncActiveLayer(client, namespace)
        await sdk.get(1)
        left = count
        latencies: list[float] = []

        async def task(name: str) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                if sdk_calls:
                    part = await sdk.claim(name)
                    if part is None:
                        return
                    await sdk.start(part.partition_id, name)
                    t0 = time.perf_counter_ns()
                    await sdk.complete(part.partition_id, name)
                else:
                    t0 = time.perf_counter_ns()
                    await client.hset(f"{namespace}_scratch", f"{name}:{left}", PAYLOAD)
                latencies.append((time.perf_counter_ns() - t0) / 1000)

        left = ASYNC_TASKS
        await asyncio.gather(*(task(f"{worker}-{t}") for t in range(ASYNC_TASKS)))  # connections opened
        left = count
        latencies.clear()
        await asyncio.to_thread(start.wait)
        began = time.time()
        await asyncio.gather(*(task(f"{worker}-{t}") for t in range(ASYNC_TASKS)))
        ended = time.time()
        await client.aclose()
        return began, ended, len(latencies), latencies

    out.put(asyncio.run(main()))


def _throughput_run(url: str, target: Any, per_process: int, sdk_calls: bool) -> tuple[int, float, list[float]]:
    """Operations done, their rate over the whole run (first start to last end), their latencies."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(url, THROUGHPUT_NS, f"w{i}", per_process, sdk_calls, start, out))
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # every process imported, connected and warmed up
    start.set()
    spans, latencies, done = [], [], 0
    for _ in procs:
        began, ended, count, got = out.get(timeout=600)
        spans.append((began, ended))
        done += count
        latencies += got
    for proc in procs:
        proc.join(30)
    elapsed = max(e for _, e in spans) - min(b for b, _ in spans)
    return done, done / elapsed, latencies


def throughput(client: redis.Redis, engine: str, url: str) -> str:
    per_process = int(os.environ.get("BENCH_WORKER_THROUGHPUT", "2000"))
    cases = [
        ("SDK claim/start/complete", "blocking loop", 1, _blocking, True),
        ("SDK claim/start/complete", "asyncio tasks", ASYNC_TASKS, _asyncio, True),
        ("plain HSET", "blocking loop", 1, _blocking, False),
        ("plain HSET", "asyncio tasks", ASYNC_TASKS, _asyncio, False),
    ]
    rows = []
    for what, how, concurrency, target, sdk_calls in cases:
        drop(client, THROUGHPUT_NS)
        warm_up = PROCESSES * ASYNC_TASKS
        ActiveLayer(client, THROUGHPUT_NS).create_partitions(1, (PROCESSES * per_process + warm_up) * 10, 10)
        done, rate, latencies = _throughput_run(url, target, per_process, sdk_calls)
        shape = f"{PROCESSES} x {concurrency}"
        rows.append((what, how, shape, done, f"{rate:,.0f}", median(latencies), p99(latencies)))
    drop(client, THROUGHPUT_NS)
    out = table(
        f"worker throughput: {PROCESSES} processes, {per_process:,} completions each, no pause between, {engine}",
        ["calls", "written as", "processes x concurrent", "completions", "per second", "median us", "p99 us"],
        rows,
    )
    return out + (
        "per second: completions (or HSETs) of all processes from the first start to the last end; median and "
        "p99 of complete() (or the HSET) alone.\n"
    )


def run() -> tuple[str, bool]:
    per_process = int(os.environ.get("BENCH_WORKER_COMPLETIONS", "600"))
    thinks_ms = [float(t) for t in os.environ.get("BENCH_WORKER_THINK_MS", "2,10").split(",")]
    rows = []
    ok = True
    with bench_engine_url() as (client, engine, url):
        for think_ms in thinks_ms:
            ratios, trips_seen = [], []
            for r in range(RUNS):
                drop(client, NS)
                ActiveLayer(client, NS).create_partitions(1, PROCESSES * per_process * 10, 10)
                complete_us, hset_us, trips = one_run(url, per_process, think_ms / 1000)
                ratios.append(p99(complete_us) / p99(hset_us))
                trips_seen += trips
                rows.append(
                    (f"{think_ms:g} ms", f"run {r + 1}", len(complete_us), median(hset_us), p99(hset_us),
                     median(complete_us), p99(complete_us), f"{ratios[-1]:.2f}x", f"{sum(trips) / len(trips):.2f}")
                )  # fmt: skip
            met = median(ratios) <= TARGET_RATIO
            ok = ok and met
            rows.append(
                (f"{think_ms:g} ms", "median", "", "", "", "", "", f"{median(ratios):.2f}x",
                 f"{sum(trips_seen) / len(trips_seen):.2f} {'met' if met else 'MISSED'}")
            )  # fmt: skip
        drop(client, NS)
        rates = throughput(client, engine, url)
    out = table(
        f"worker: complete() against HSET, {PROCESSES} worker processes, {per_process} completions each, {engine}",
        ["work between calls", "run", "completions", "HSET median us", "HSET p99 us", "complete median us",
         "complete p99 us", "p99 ratio", "round trips/complete"],
        rows,
    )  # fmt: skip
    out += (
        f"target: complete() p99 at most {TARGET_RATIO:g}x a plain HSET's p99 in the same run (median of {RUNS} "
        f"runs): {'met' if ok else 'MISSED'}. After a pause, both calls pay the idle server's and client's wake-up;\n"
        "with 2 ms of work, eight processes keep this machine's cores busy.\n"
    )
    return out + "\n" + rates, ok

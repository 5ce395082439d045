"""The worker section's load: `PROCESSES` processes take partitions through their whole life as
fast as they can, each with one blocking loop (`ActiveLayer`) or `ASYNC_TASKS` asyncio tasks on
one client (`AsyncActiveLayer`), beside the original scheme's four HSETs per partition written
the same two ways (`bench.worker_yardstick.original_steps`). Each process reports when it began and
ended, how many lifecycles it did and its complete() (or completed-record HSET) latencies."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio

from bench.engine import drop
from bench.report import median, p99
from bench.worker_yardstick import original_steps
from layers import ActiveLayer, AsyncActiveLayer

PROCESSES = 8
ASYNC_TASKS = 50
NS = "benchworkload"


@dataclass(frozen=True)
class Load:
    rate: float  # lifecycles per second, from the first process's start to the last one's end
    complete_p50: float
    complete_p99: float


def _blocking(url: str, worker: str, count: int, sdk_calls: bool, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    sdk = ActiveLayer(client, NS)
    sdk.get(1)  # the clock synced and the connection open before the start
    if sdk_calls:
        part = sdk.claim(worker)
        assert part is not None
        sdk.complete(part.partition_id, worker)  # the scripts loaded
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
            sdk.heartbeat(part.partition_id, worker)
            t0 = time.perf_counter_ns()
            sdk.complete(part.partition_id, worker)
        else:
            *first, (_, complete) = original_steps(client, f"{NS}_original", hash((worker, i)) % 2**31, worker)
            for _, write in first:
                write()
            t0 = time.perf_counter_ns()
            complete()
        latencies.append((time.perf_counter_ns() - t0) / 1000)
        done += 1
    out.put((began, time.time(), done, latencies))
    client.close()


def _asyncio(url: str, worker: str, count: int, sdk_calls: bool, start: Any, out: Any) -> None:
    async def main() -> tuple[float, float, int, list[float]]:
        pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=ASYNC_TASKS)
        client = redis.asyncio.Redis(connection_pool=pool)
        sdk = AsyncActiveLayer(client, NS)
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
                    await sdk.heartbeat(part.partition_id, name)
                    t0 = time.perf_counter_ns()
                    await sdk.complete(part.partition_id, name)
                else:
                    *first, (_, complete) = original_steps(client, f"{NS}_original", hash((name, left)) % 2**31, name)
                    for _, write in first:
                        await write()
                    t0 = time.perf_counter_ns()
                    await complete()
                latencies.append((time.perf_counter_ns() - t0) / 1000)

        left = ASYNC_TASKS  # every task's connection opened and the scripts loaded
        await asyncio.gather(*(task(f"{worker}-{t}") for t in range(ASYNC_TASKS)))
        left = count
        latencies.clear()
        await asyncio.to_thread(start.wait)
        began = time.time()
        await asyncio.gather(*(task(f"{worker}-{t}") for t in range(ASYNC_TASKS)))
        ended = time.time()
        await client.aclose()
        return began, ended, len(latencies), latencies

    out.put(asyncio.run(main()))


def _one(url: str, target: Any, per_process: int, sdk_calls: bool) -> Load:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(url, f"w{i}", per_process, sdk_calls, start, out)) for i in range(PROCESSES)
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
    return Load(done / elapsed, median(latencies), p99(latencies))


def run_load(client: redis.Redis, url: str, per_process: int) -> dict[str, Load]:
    """One run of each load: ``{blocking,asyncio}_{sdk,original}``."""
    out = {}
    for name, target in (("blocking", _blocking), ("asyncio", _asyncio)):
        for side, sdk_calls in (("sdk", True), ("original", False)):
            drop(client, NS)
            if sdk_calls:
                spare = PROCESSES * (ASYNC_TASKS * 2 + 2)
                ActiveLayer(client, NS).create_partitions(1, (PROCESSES * per_process + spare) * 10, 10)
            out[f"{name}_{side}"] = _one(url, target, per_process, sdk_calls)
    drop(client, NS)
    return out


def _paired(url: str, namespace: str, worker: str, count: int, think_s: float, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    sdk = ActiveLayer(client, namespace)
    complete_us: list[float] = []
    hset_us: list[float] = []
    start.wait()
    for i in range(count):
        part = sdk.claim(worker)
        if part is None:
            break
        for step in (0, 1) if i % 2 else (1, 0):  # neither always second
            t0 = time.perf_counter_ns()
            if step == 0:
                sdk.complete(part.partition_id, worker)
                complete_us.append((time.perf_counter_ns() - t0) / 1000)
            else:
                client.hset(f"{namespace}_scratch", str(part.partition_id), part.to_json())
                hset_us.append((time.perf_counter_ns() - t0) / 1000)
        time.sleep(think_s)
    out.put((complete_us[1:], hset_us[1:]))  # the first call loads the script
    client.close()


def complete_beside_hset(url: str, namespace: str, per_process: int, think_s: float) -> tuple[list[float], list[float]]:
    """complete() and a plain HSET of the record, timed in turn by `PROCESSES` workers that
    pause ``think_s`` between partitions (the growth section's check that completions stay cheap)."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_paired, args=(url, namespace, f"w{i}", per_process, think_s, start, out))
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    time.sleep(1.0)
    start.set()
    complete_us: list[float] = []
    hset_us: list[float] = []
    for _ in procs:
        c, h = out.get(timeout=600)
        complete_us += c
        hset_us += h
    for proc in procs:
        proc.join(30)
    return complete_us, hset_us

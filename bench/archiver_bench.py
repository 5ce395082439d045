"""Archiver section: our archiver against the consumer a user writes by hand, on the same server.

The yardstick is what a competent user writes: XREADGROUP, 500 entries a page, then one pipeline
per page with an HSET of each payload under its pid (taken from ``json.loads`` of the payload),
one XACK naming all the page's ids and one XDEL naming all of them. It keeps no statistics,
index, dedupe or compression. Ours runs with the defaults (statistics committed every 100
updates or 30 s) and drains the same entries in each tier, with statistics exact afterwards
(`stats verify`). The completions are recent, as in a live queue: their expiry (summary tier,
after the retention) and statistics compaction (after 30 days) come later, paced, and are not
part of this drain; the sweep's own rate is measured after each summary drain.

Beside each rate: the client's CPU per partition (the process's own CPU time), the server's CPU
per partition (``INFO cpu``), and round trips per page of 500 (counted on the connections). Three
runs each, the yardstick just before ours in each run; the ratio is the median of the runs'
ratios. ``BENCH_ARCHIVER_SIZE`` changes the size (default 200,000).

The burst part queues ``BENCH_BURST_SIZE`` completions at once (default 1,000,000: a whole job
finishing together) and times ``partarchive run --processes 2`` draining them in the compressed
tier against two yardstick consumers (same group, two processes) on the same server, in each of
three runs; the speed is the median of the runs' (yardstick time / ours), the times medians.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from bench.engine import CountingConnection, bench_engine_url, counting_client, drop, redis_cpu_us
from bench.populate import _chunks
from bench.report import median, table
from bench.workload import standard_workload
from layers import ArchiveLayer, KeySchema
from layers.archive.transitions import sweep_expired
from layers.keys import ARCHIVER_GROUP
from stats import StatsChecker

RUNS = 3
PAGE = 500
TARGETS = {"simple": 1.0, "compressed": 0.9, "summary": 0.9}
NS = "bencharch"
RETAIN_S = 30 * 86400


def fill_queue(client: redis.Redis, keys: KeySchema, n: int, first: int = 1) -> None:
    """The standard workload, completed over the last ``3 n`` seconds, as a live queue holds it."""
    client.xgroup_create(keys.queue, ARCHIVER_GROUP, id="0", mkstream=True)
    for chunk in _chunks(standard_workload(n, first, base_time=int(time.time()) - 3 * (first + n) - 10), 5000):
        pipe = client.pipeline(transaction=False)
        for part in chunk:
            pipe.xadd(keys.queue, {"p": part.to_json()})
        pipe.execute()


def naive_drain(client: redis.Redis, keys: KeySchema, consumer: str = "naive") -> int:
    """The hand-written archiver: read a page, store each payload under its pid, then acknowledge
    and delete the whole page, all in one pipeline."""
    done = 0
    while True:
        got: Any = client.xreadgroup(ARCHIVER_GROUP, consumer, {keys.queue: ">"}, count=PAGE)
        if not got:
            return done
        entries = got[0][1]
        ids = [entry_id for entry_id, _ in entries]
        pipe = client.pipeline(transaction=False)
        for _, fields in entries:
            payload = fields[b"p"]
            pipe.hset(keys.completed, json.loads(payload)["partition_id"], payload)
        pipe.xack(keys.queue, ARCHIVER_GROUP, *ids)
        pipe.xdel(keys.queue, *ids)
        pipe.execute()
        done += len(entries)


@dataclass(frozen=True, slots=True)
class Drained:
    rate: float  # entries a second
    client_us: float  # the process's CPU per entry
    redis_us: float  # the server's CPU per entry
    trips: float  # round trips per page of `PAGE`


def measure(client: redis.Redis, n: int, run: Callable[[], object]) -> Drained:
    usec, sent, cpu = redis_cpu_us(client), CountingConnection.sent, time.process_time()
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    return Drained(
        n / elapsed,
        (time.process_time() - cpu) * 1e6 / n,
        (redis_cpu_us(client) - usec) / n,
        (CountingConnection.sent - sent) / (n / PAGE),
    )


def _config(tier: str) -> Config:
    """The tier from the first entry; defaults otherwise (statistics every 100 or 30 s); a retention
    longer than the workload's span (3 s an entry), so that, as in a live queue, nothing is past it
    while the queue drains."""
    thresholds = {"simple": (10**12, 10**12), "compressed": (0, 10**12), "summary": (0, 0)}[tier]
    return Config(
        namespace=NS, compressed_from=thresholds[0], summary_above=thresholds[1], block_ms=10, retention_s=RETAIN_S
    )


def _sweep_rate(client: redis.Redis, config: Config) -> float:
    """Partitions a second the expiry sweep deletes once the retention has passed for all."""
    archive = ArchiveLayer(client, config.keys, config.policy)
    later = time.time() + RETAIN_S + 86400
    expired, started = 0, time.perf_counter()
    while swept := sweep_expired(archive, now=later):
        expired += swept
    return expired / (time.perf_counter() - started)


def _fmt(d: Drained) -> tuple[int, float, float, float]:
    return round(d.rate), round(d.client_us, 2), round(d.redis_us, 2), round(d.trips, 1)


def _medians(runs: list[Drained]) -> Drained:
    return Drained(*(median([getattr(r, f) for r in runs]) for f in ("rate", "client_us", "redis_us", "trips")))


def _tiers(client: redis.Redis, n: int) -> tuple[list[tuple[Any, ...]], bool, list[float]]:
    keys = KeySchema(NS)
    rows, ok, sweeps = [], True, []
    for tier in TARGETS:
        naive: list[Drained] = []
        ours: list[Drained] = []
        exact = True
        for _ in range(RUNS):
            drop(client, NS)
            fill_queue(client, keys, n)
            naive.append(measure(client, n, lambda: naive_drain(client, keys)))
            drop(client, NS)
            fill_queue(client, keys, n)
            config = _config(tier)
            ours.append(measure(client, n, lambda config=config: drain(ArchiverDaemon(client, config, "bench"))))  # type: ignore[misc]
            exact = exact and StatsChecker(client, config.keys).check().ok
            if tier == "summary":
                sweeps.append(_sweep_rate(client, config))
        ratios = [o.rate / y.rate for o, y in zip(ours, naive, strict=True)]
        ratio = median(ratios)
        met = exact and ratio >= TARGETS[tier]
        ok = ok and met
        rows.append(
            (tier, *_fmt(_medians(naive)), *_fmt(_medians(ours)), " ".join(f"{r:.2f}" for r in ratios),
             f"{ratio:.2f}x", f"{TARGETS[tier]}x", "yes" if exact else "NO", "met" if met else "MISSED")
        )  # fmt: skip
    drop(client, NS)
    return rows, ok, sweeps


def _naive_process(url: str, consumer: str) -> None:
    client = redis.Redis.from_url(url)
    naive_drain(client, KeySchema(NS), consumer)
    client.close()


def _queue_empty(client: redis.Redis, keys: KeySchema) -> bool:
    return int(client.xlen(keys.queue)) == 0  # type: ignore[arg-type]


def _burst_run(client: redis.Redis, url: str, n: int) -> tuple[float, float, int, bool]:
    """One run of the burst: two yardstick processes, then ``run --processes 2`` (compressed
    tier), on ``n`` entries queued at once; their times, the peak queue memory, statistics exact."""
    keys = KeySchema(NS)
    drop(client, NS)
    fill_queue(client, keys, n)
    peak = int(client.memory_usage(keys.queue) or 0)  # type: ignore[arg-type]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_naive_process, args=(url, f"naive{i}")) for i in range(2)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    naive_s = time.perf_counter() - started
    drop(client, NS)
    fill_queue(client, keys, n)
    env = dict(os.environ, REDIS_URL=url, PARTARCHIVE_NAMESPACE=NS, PARTARCHIVE_COMPRESSED_FROM="0",
               PARTARCHIVE_SUMMARY_ABOVE=str(10**12), PARTARCHIVE_RETENTION_S=str(RETAIN_S))  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "archiver", "run", "--processes", "2", "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not _queue_empty(client, keys):
            time.sleep(0.05)
        ours_s = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(60)
    exact = StatsChecker(client, keys).check().ok
    drop(client, NS)
    return naive_s, ours_s, peak, exact


def _burst(client: redis.Redis, url: str, n: int) -> tuple[list[tuple[Any, ...]], bool]:
    """`RUNS` runs of the burst; the speed is the median of the runs' (yardstick time / ours)."""
    runs = [_burst_run(client, url, n) for _ in range(RUNS)]
    speeds = [naive_s / ours_s for naive_s, ours_s, _, _ in runs]
    speed = median(speeds)
    exact = all(run[3] for run in runs)
    met = exact and speed >= 1.0
    row = (f"{n:,}", round(median([r[0] for r in runs]), 1), round(median([r[1] for r in runs]), 1),
           " ".join(f"{s:.2f}" for s in speeds), f"{speed:.2f}x", f"{max(r[2] for r in runs) / 2**20:,.1f} MiB",
           "yes" if exact else "NO", "met" if met else "MISSED")  # fmt: skip
    return [row], met


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_ARCHIVER_SIZE", "200000"))
    burst_n = int(os.environ.get("BENCH_BURST_SIZE", "1000000"))
    with bench_engine_url() as (_, engine, url):
        client = counting_client(url)
        rows, ok, sweeps = _tiers(client, n)
        burst_rows, burst_ok = _burst(client, url, burst_n) if burst_n else ([], True)
        client.close()
    out = table(
        f"archiver: {n:,} queued completions, ours (defaults) against a hand-written consumer, medians of {RUNS} "
        f"runs, {engine}",
        ["tier", "yardstick /s", "client us/p", "Redis us/p", "trips/page", "ours /s", "client us/p", "Redis us/p",
         "trips/page", "ratio by run", "ratio", "target", "stats exact", "result"],
        rows,
    )  # fmt: skip
    out += (
        "yardstick = XREADGROUP 500, then one pipeline per page: HSET pid payload per entry (pid from json.loads),\n"
        "one XACK and one XDEL naming the page's ids; run just before ours on the same entries in each run.\n"
        "client us/p = the process's CPU time per entry; Redis us/p = the server's CPU time (INFO cpu) per entry;\n"
        "trips/page = round trips per 500 entries, counted on the connections. ratio = the median of the runs'\n"
        "ratios. Summary tier: the completions are within the retention while the queue drains; their expiry\n"
        f"afterwards: {round(median(sweeps)) if sweeps else 0:,} partitions/s swept (median).\n"
    )
    if burst_rows:
        out += "\n" + table(
            "burst: completions queued at once, drained by two processes (compressed tier), same server",
            ["queued", "2 yardstick processes s", "run --processes 2 s", "speed by run", "speed",
             "peak queue memory", "stats exact", "result"],
            burst_rows,
        )  # fmt: skip
    return out, ok and burst_ok

"""Archiver section: our archiver against the one a user would write by hand, on the same server.

The yardstick reads the queue with XREADGROUP, 500 entries a page, and writes each page in one
pipeline: HSET archive pid payload, XACK, XDEL per entry. It keeps no statistics, index,
dedupe or compression. Ours drains the same number of entries in each tier, with statistics
exact afterwards (`stats verify`). The completions are recent, as in a live queue: their
expiry (summary tier, after the retention) and statistics compaction (after 30 days) come later,
paced to at most a sixth of an archiver's time, and are not part of this drain (the summary
tier keeps them 30 days here; the sweep's own rate is measured after each drain). Rates are
entries per second from a full queue; Redis time is the server's CPU microseconds per entry
(``INFO cpu``). Three runs each, medians; the ratio is the median of the runs' ratios.
``BENCH_ARCHIVER_SIZE`` changes the size (default 200,000).
"""

from __future__ import annotations

import os
import time

import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from bench.engine import bench_engine, drop
from bench.populate import _chunks
from bench.report import median, table
from bench.workload import standard_workload
from layers import ArchiveLayer, KeySchema
from layers.keys import ARCHIVER_GROUP
from layers.transitions import sweep_expired
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


def _redis_usec(client: redis.Redis) -> float:
    """The server's CPU time so far (user + system, all its threads), in microseconds. Unlike
    ``INFO commandstats``, which counts a script's commands twice (in EVALSHA and in themselves)
    and leaves out reading and writing sockets, this is what the server spent."""
    cpu: dict[str, float] = client.info("cpu")  # type: ignore[assignment]
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def _naive(client: redis.Redis, keys: KeySchema) -> int:
    """The hand-written archiver: read a page, store each payload, acknowledge and delete."""
    done = 0
    while True:
        got = client.xreadgroup(ARCHIVER_GROUP, "naive", {keys.queue: ">"}, count=PAGE)
        if not got:
            return done
        entries = got[0][1]  # type: ignore[index]
        pipe = client.pipeline(transaction=False)
        for entry_id, fields in entries:
            payload = fields[b"p"]
            pid = payload[16 : payload.index(b",")]  # {"partition_id":N,...
            pipe.hset(keys.completed, pid, payload)
            pipe.xack(keys.queue, ARCHIVER_GROUP, entry_id)
            pipe.xdel(keys.queue, entry_id)
        pipe.execute()
        done += len(entries)


def _ours(client: redis.Redis, config: Config) -> int:
    return drain(ArchiverDaemon(client, config, consumer="bench"))


def _measure(client: redis.Redis, n: int, run: object, *args: object) -> tuple[float, float]:
    usec = _redis_usec(client)
    started = time.perf_counter()
    run(client, *args)  # type: ignore[operator]
    elapsed = time.perf_counter() - started
    return n / elapsed, (_redis_usec(client) - usec) / n


def _config(tier: str) -> Config:
    """The tier from the first entry; a retention longer than the workload's span (3 s an entry),
    so that, as in a live queue, nothing is past it while the queue drains."""
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


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_ARCHIVER_SIZE", "200000"))
    rows = []
    ok = True
    sweeps: list[float] = []
    with bench_engine() as (client, engine):
        keys = KeySchema(NS)
        for tier in TARGETS:
            naive_rates, naive_us, our_rates, our_us, exact = [], [], [], [], True
            for _ in range(RUNS):
                drop(client, NS)
                fill_queue(client, keys, n)
                rate, us = _measure(client, n, _naive, keys)
                naive_rates.append(rate)
                naive_us.append(us)
                drop(client, NS)
                fill_queue(client, keys, n)
                config = _config(tier)
                rate, us = _measure(client, n, _ours, config)
                our_rates.append(rate)
                our_us.append(us)
                exact = exact and StatsChecker(client, config.keys).check().ok
                if tier == "summary":
                    sweeps.append(_sweep_rate(client, config))
            ratios = [ours / naive for ours, naive in zip(our_rates, naive_rates, strict=True)]
            ratio = median(ratios)
            met = exact and ratio >= TARGETS[tier]
            ok = ok and met
            rows.append(
                (tier, round(median(naive_rates)), round(median(naive_us), 2), round(median(our_rates)),
                 round(median(our_us), 2), " ".join(f"{r:.2f}" for r in ratios), f"{ratio:.2f}x",
                 f"{TARGETS[tier]}x", "yes" if exact else "NO", "met" if met else "MISSED")
            )  # fmt: skip
        drop(client, NS)
    out = table(
        f"archiver: {n:,} queued completions, ours against a hand-written archiver, medians of {RUNS} runs, {engine}",
        ["tier", "naive /s", "naive Redis CPU us/p", "ours /s", "ours Redis CPU us/p", "ratio by run", "ratio",
         "target", "stats exact", "result"],
        rows,
    )  # fmt: skip
    out += (
        "naive = XREADGROUP 500 + one pipeline of HSET, XACK, XDEL per entry (no statistics, index, dedupe or\n"
        "compression), run just before ours on the same entries in each run; ratio = the median of the runs'\n"
        "ratios (a yardstick beside each measurement: the machine's speed drifts between runs). Redis CPU\n"
        "us/p = the server's CPU time (INFO cpu, user + system) per entry. Summary tier: the completions\n"
        f"are within the retention while the queue drains; their expiry afterwards: {round(median(sweeps)):,}\n"
        "partitions/s swept (median; paced to at most a sixth of an archiver's time while entries flow).\n"
    )
    return out, ok

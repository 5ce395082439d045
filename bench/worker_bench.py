"""Worker section: a partition's life (claim, start, one heartbeat, complete) through the SDK,
against the original scheme's four HSETs of the whole record (claimed, running, heartbeat,
completed), as elk_coordinator's workers write them.

1. Server time per step, from ``INFO commandstats``: the microseconds of every command the SDK
   sends (FCALL or EVALSHA, and the clock's TIME, a bound namespace's HSCAN and MULTI/EXEC),
   per call, in a native namespace and in one bound to an elk_coordinator deployment (Go's
   records). Steps run in blocks of `BLOCK` partitions, each block's steps one after the other,
   so a step's time is read alone and the leases stay few, as a worker's are.
2. The worker's side, one process and no pause: each step's time as the worker sees it, the
   lifecycles per second, and complete() against a plain HSET of the completed record (p50, p99).
3. Load: `PROCESSES` processes with one blocking loop each, and as many with `ASYNC_TASKS`
   asyncio tasks each, against the same HSETs written the same way.

The yardstick's record is Go's PartitionInfo JSON (about 300 bytes), its members changed and
the whole record encoded with orjson before each HSET, as a worker keeping its record would.
Every figure is the median of `RUNS` runs; a run's SDK and yardstick parts alternate.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from bench.engine import bench_engine_url, drop, redis_cpu_us
from bench.report import median, p99, table
from bench.worker_load import ASYNC_TASKS, PROCESSES, Load, run_load
from bench.worker_yardstick import original_steps
from layers import ActiveLayer

RUNS = 3
BLOCK = 50
NS = "benchwork"
ELK_PREFIX = "{benchwork}:"
STEPS = ("claim", "start", "heartbeat", "complete")
#: Commands the SDK sends itself (those its scripts call are counted apart by the server too).
SENT = ("fcall", "evalsha", "eval", "time", "hscan", "exec", "multi")
TARGETS = {"server_native": 30.0, "server_elk": 60.0, "rate_1": 0.8, "complete_1": 1.3, "rate_8": 0.6,
           "complete_8": 1.6, "rate_async": 0.8}  # fmt: skip


def _sent_usec(client: redis.Redis) -> float:
    stats: dict[str, dict[str, float]] = client.info("commandstats")  # type: ignore[assignment]
    return sum(v["usec"] for k, v in stats.items() if k.removeprefix("cmdstat_") in SENT)


def server_us(client: redis.Redis, elk_prefix: str | None, lifecycles: int) -> dict[str, float]:
    """Server microseconds per call of each step (and of the lifecycle), `BLOCK` partitions at a time."""
    drop(client, NS)
    sdk = ActiveLayer(client, NS, elk_prefix=elk_prefix)
    sdk.create_partitions(1, (lifecycles + BLOCK) * 10, 10)
    for part in [sdk.claim("w1") for _ in range(BLOCK)]:  # scripts loaded, clock synced
        sdk.complete(part.partition_id, "w1")  # type: ignore[union-attr]
    total = dict.fromkeys(STEPS, 0.0)
    cpu = redis_cpu_us(client)
    for _ in range(lifecycles // BLOCK):
        parts: list[Any] = []
        for step in STEPS:
            client.config_resetstat()
            if step == "claim":
                parts = [sdk.claim("w1") for _ in range(BLOCK)]
            else:
                for part in parts:
                    getattr(sdk, step)(part.partition_id, "w1")
            total[step] += _sent_usec(client)
    cpu = redis_cpu_us(client) - cpu
    out = {step: us / (lifecycles // BLOCK * BLOCK) for step, us in total.items()}
    out["lifecycle"] = sum(out.values())
    out["cpu"] = cpu / (lifecycles // BLOCK * BLOCK)
    drop(client, NS)
    if elk_prefix:
        for key in client.scan_iter(f"elk:{elk_prefix}*"):
            client.delete(key)
    return out


def original_server_us(client: redis.Redis, lifecycles: int) -> dict[str, float]:
    """The server's microseconds per HSET of the original scheme, per step and per lifecycle."""
    key = f"{NS}_original"
    total = dict.fromkeys(STEPS, 0.0)
    cpu = redis_cpu_us(client)
    for first in range(1, lifecycles + 1, BLOCK):
        writes = [original_steps(client, key, pid, "w1") for pid in range(first, first + BLOCK)]
        for n, step in enumerate(STEPS):
            client.config_resetstat()
            for steps in writes:
                steps[n][1]()
            stats: dict[str, dict[str, float]] = client.info("commandstats")  # type: ignore[assignment]
            total[step] += stats["cmdstat_hset"]["usec"]
    cpu = redis_cpu_us(client) - cpu
    client.delete(key)
    out = {step: us / (lifecycles // BLOCK * BLOCK) for step, us in total.items()}
    out["lifecycle"] = sum(out.values())
    out["cpu"] = cpu / (lifecycles // BLOCK * BLOCK)
    return out


def one_process(client: redis.Redis, lifecycles: int) -> dict[str, Any]:
    """The worker's own view, one process, no pause: microseconds per step (SDK and yardstick),
    lifecycles per second, complete() and the completed record's HSET latencies."""
    drop(client, NS)
    sdk = ActiveLayer(client, NS)
    sdk.create_partitions(1, (lifecycles + 100) * 10, 10)
    for _ in range(50):  # warm: scripts loaded, clock synced
        part = sdk.claim("w1")
        assert part is not None
        sdk.start(part.partition_id, "w1")
        sdk.heartbeat(part.partition_id, "w1")
        sdk.complete(part.partition_id, "w1")
    ours: dict[str, list[float]] = {s: [] for s in STEPS}
    theirs: dict[str, list[float]] = {s: [] for s in STEPS}
    spent = {"ours": 0.0, "theirs": 0.0}
    key = f"{NS}_original"
    for i in range(lifecycles):
        for side in ("ours", "theirs") if i % 2 else ("theirs", "ours"):
            began = time.perf_counter_ns()
            if side == "ours":
                t0 = time.perf_counter_ns()
                part = sdk.claim("w1")
                ours["claim"].append((time.perf_counter_ns() - t0) / 1000)
                assert part is not None
                for step in STEPS[1:]:
                    t0 = time.perf_counter_ns()
                    getattr(sdk, step)(part.partition_id, "w1")
                    ours[step].append((time.perf_counter_ns() - t0) / 1000)
            else:
                for step, write in original_steps(client, key, i + 1, "w1"):
                    t0 = time.perf_counter_ns()
                    write()
                    theirs[step].append((time.perf_counter_ns() - t0) / 1000)
            spent[side] += (time.perf_counter_ns() - began) / 1e9
    drop(client, NS)
    return {"ours": ours, "theirs": theirs, "rate_ours": lifecycles / spent["ours"],
            "rate_theirs": lifecycles / spent["theirs"]}  # fmt: skip


def run() -> tuple[str, bool]:
    lifecycles = int(os.environ.get("BENCH_WORKER_LIFECYCLES", "2000"))
    per_process = int(os.environ.get("BENCH_WORKER_THROUGHPUT", "2000"))
    with bench_engine_url() as (client, engine, url):
        servers: dict[str, list[dict[str, float]]] = {"native": [], "elk": [], "original": []}
        singles, loads = [], []
        for _ in range(RUNS):
            servers["native"].append(server_us(client, None, lifecycles))
            servers["elk"].append(server_us(client, ELK_PREFIX, lifecycles))
            servers["original"].append(original_server_us(client, lifecycles))
            singles.append(one_process(client, lifecycles))
            loads.append(run_load(client, url, per_process))
    return report(engine, servers, singles, loads, lifecycles, per_process)


def report(
    engine: str,
    servers: dict[str, list[dict[str, float]]],
    singles: list[dict[str, Any]],
    loads: list[dict[str, Load]],
    lifecycles: int,
    per_process: int,
) -> tuple[str, bool]:
    def med(values: list[float]) -> float:
        return median(values)

    rows = []
    for step in (*STEPS, "lifecycle"):
        native = med([s[step] for s in servers["native"]])
        elk = med([s[step] for s in servers["elk"]])
        original = med([s[step] for s in servers["original"]])
        if step == "lifecycle":
            ours = med([sum(median(r["ours"][s]) for s in STEPS) for r in singles])
            theirs = med([sum(median(r["theirs"][s]) for s in STEPS) for r in singles])
        else:
            ours = med([median(r["ours"][step]) for r in singles])
            theirs = med([median(r["theirs"][step]) for r in singles])
        rows.append((step, native, elk, original, ours, theirs, f"{ours / theirs:.2f}x"))
    met_native = med([s["lifecycle"] for s in servers["native"]]) <= TARGETS["server_native"]
    met_elk = med([s["lifecycle"] for s in servers["elk"]]) <= TARGETS["server_elk"]
    out = table(
        f"worker steps: server time (INFO commandstats, medians of {RUNS} runs of {lifecycles:,}) and the "
        f"worker's time (one process, no pause), {engine}",
        ["step", "server us native", "server us elk-bound", "server us original", "SDK us p50",
         "original us p50", "SDK / original"],
        rows,
    )
    out += (
        f"server time per lifecycle: native {'met' if met_native else 'MISSED'} (target <= "
        f"{TARGETS['server_native']:g} us), elk-bound {'met' if met_elk else 'MISSED'} (target <= "
        f"{TARGETS['server_elk']:g} us).\nRedis's whole CPU per lifecycle (INFO cpu: sockets, parsing and the "
        "INFO and CONFIG RESETSTAT of the measurement included): native "
        f"{med([s['cpu'] for s in servers['native']]):.1f} us, elk-bound {med([s['cpu'] for s in servers['elk']]):.1f} "
        f"us, original {med([s['cpu'] for s in servers['original']]):.1f} us.\n\n"
    )
    rate_rows, ok = [], met_native and met_elk
    single_rate = med([r["rate_ours"] / r["rate_theirs"] for r in singles])
    c50 = med([median(r["ours"]["complete"]) / median(r["theirs"]["complete"]) for r in singles])
    c99 = med([p99(r["ours"]["complete"]) / p99(r["theirs"]["complete"]) for r in singles])
    rates = med([r["rate_ours"] for r in singles]), med([r["rate_theirs"] for r in singles])
    rate_rows.append(_rate_row("blocking, 1 process", single_rate, c50, c99, "rate_1", "complete_1", *rates))
    for name, shape, rate_key, complete_key in (
        ("blocking", f"{PROCESSES} processes", "rate_8", "complete_8"),
        ("asyncio", f"{PROCESSES} x {ASYNC_TASKS} tasks", "rate_async", None),
    ):
        ours = [load[f"{name}_sdk"] for load in loads]
        theirs = [load[f"{name}_original"] for load in loads]
        ratio = med([a.rate / b.rate for a, b in zip(ours, theirs, strict=True)])
        r50 = med([a.complete_p50 / b.complete_p50 for a, b in zip(ours, theirs, strict=True)])
        r99 = med([a.complete_p99 / b.complete_p99 for a, b in zip(ours, theirs, strict=True)])
        rate_rows.append(_rate_row(f"{name}, {shape}", ratio, r50, r99, rate_key, complete_key,
                                   med([a.rate for a in ours]), med([b.rate for b in theirs])))  # fmt: skip
    for row in rate_rows:
        ok = ok and "MISSED" not in row[-1]
    out += table(
        f"worker throughput: lifecycles per second against the original's four HSETs (one process: "
        f"{lifecycles:,}; loads: {per_process:,} per process), medians of {RUNS} runs, {engine}",
        ["written as", "SDK /s", "original /s", "rate ratio", "complete p50 / HSET", "complete p99 / HSET", "targets"],
        rate_rows,
    )
    return out, ok


def _rate_row(
    what: str, ratio: float, r50: float, r99: float, rate_key: str, complete_key: str | None, ours: float, theirs: float
) -> tuple[Any, ...]:
    rate_ok = ratio >= TARGETS[rate_key]
    verdict = [f"rate >= {TARGETS[rate_key]:g}x {'met' if rate_ok else 'MISSED'}"]
    if complete_key:
        complete_ok = r50 <= TARGETS[complete_key] and r99 <= TARGETS[complete_key]
        verdict.append(f"complete <= {TARGETS[complete_key]:g}x {'met' if complete_ok else 'MISSED'}")
    return (what, f"{ours:,.0f}", f"{theirs:,.0f}", f"{ratio:.2f}x", f"{r50:.2f}x", f"{r99:.2f}x", "; ".join(verdict))

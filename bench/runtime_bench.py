"""Runtime section (``make bench ARGS=runtime``): the worker runtime (`archiver.runtime`) against the
original scheme's four HSETs of the whole record a partition (claimed, running, heartbeat, completed,
`bench.worker_yardstick.original_steps`), in the same run.

1. Rate, one process, an empty ``process``: the blocking `Worker` at window 1 against the four HSETs
   written one after the other (target: at least 1.5x), and the asyncio `AsyncWorker` at window 64
   against the blocking worker at window 1 (target: at least 2x).
2. Redis time a partition (``INFO commandstats``, every command the runtime sends: the finish-and-claim
   FCALL, the clock's TIME, the beat's and the stop's EVALSHA, a bound namespace's HSCAN and
   MULTI/EXEC), the beat at its steady-state share (its server time a call, spread over the
   partitions one beat interval holds at the measured rate), in a native namespace (target <= 30 us)
   and in one bound to an elk_coordinator deployment, Go's records (target <= 60 us); and where it
   goes: the commands the finish script calls, each a partition, the rest being Lua's own work.

Every figure is the median of `RUNS` runs. The machine's other load moves the rates (not the
server times much): the table says which engine and how many partitions.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis
import redis.asyncio

from archiver.engine import async_twin
from archiver.runtime import AsyncWorker, Lease, RetryPolicy, Worker
from bench.engine import bench_engine_url, drop, redis_cpu_us
from bench.report import median, table
from bench.worker_yardstick import original_steps
from codec import PartitionInfo
from layers import ActiveLayer

RUNS = 3
NS = "benchruntime"
ELK_PREFIX = "{benchruntime}:"
TARGETS = {"rate_1": 1.5, "async_64": 2.0, "server_native": 30.0, "server_elk": 60.0}
#: The commands the runtime sends itself (its scripts' own commands are counted apart by the server too).
SENT = ("fcall", "evalsha", "eval", "time", "hscan", "exec", "multi", "zcard", "zcount", "hgetall")
HEARTBEAT_S = 10.0  # the runtime's default beat (its presence; its leases at least every third of one)
BEAT_WINDOW = 3  # leases a beat renews in the measurement of its cost (the default window)


def _empty(part: PartitionInfo, lease: Lease) -> None:
    return None


async def _aempty(part: PartitionInfo, lease: Lease) -> None:
    return None


def _worker(client: redis.Redis, elk_prefix: str | None, window: int) -> Worker:
    return Worker(client, NS, _empty, window=window, elk_prefix=elk_prefix, heartbeat_s=HEARTBEAT_S,
                  retry=RetryPolicy(1), breaker_failures=0)  # fmt: skip


def _fresh(client: redis.Redis, count: int, elk_prefix: str | None = None) -> ActiveLayer:
    drop(client, NS)
    if elk_prefix:
        for key in client.scan_iter(f"elk:{elk_prefix}*"):
            client.delete(key)
    sdk = ActiveLayer(client, NS, elk_prefix=elk_prefix)
    sdk.create_partitions(1, count * 10, 10)
    return sdk


def blocking_rate(client: redis.Redis, count: int) -> float:
    """Partitions a second of a `Worker` at window 1 with an empty ``process``, from start to empty."""
    _fresh(client, count)
    worker = _worker(client, None, 1)
    began = time.perf_counter()
    report = worker.run(until_empty=True, install_signals=False)
    elapsed = time.perf_counter() - began
    assert report.processed == count, report
    return count / elapsed


def async_rate(client: redis.Redis, count: int, window: int) -> tuple[float, float, float]:
    """Partitions a second of an `AsyncWorker` at ``window`` with an empty ``process``, and the CPU a
    partition of the worker's process and of Redis (microseconds): what bounds the rate when each has a
    core of its own."""
    _fresh(client, count)

    async def main() -> tuple[float, float, float]:
        twin = async_twin(client)
        try:
            worker = AsyncWorker(twin, NS, _aempty, window=window, heartbeat_s=HEARTBEAT_S, retry=RetryPolicy(1),
                                 breaker_failures=0)  # fmt: skip
            cpu, server = time.process_time(), redis_cpu_us(client)
            began = time.perf_counter()
            report = await worker.run(until_empty=True, install_signals=False)
            elapsed = time.perf_counter() - began
            cpu, server = time.process_time() - cpu, redis_cpu_us(client) - server
            assert report.processed == count, report
            return count / elapsed, cpu / count * 1e6, server / count
        finally:
            await twin.aclose()

    return asyncio.run(main())


def original_rate(client: redis.Redis, count: int) -> float:
    """Partitions a second of the original scheme: four HSETs of the whole record each, one after the other."""
    key = f"{NS}_original"
    client.delete(key)
    began = time.perf_counter()
    for pid in range(1, count + 1):
        for _, write in original_steps(client, key, pid, "w1"):
            write()
    elapsed = time.perf_counter() - began
    client.delete(key)
    return count / elapsed


def _commandstats(client: redis.Redis) -> dict[str, dict[str, float]]:
    stats: dict[str, dict[str, float]] = client.info("commandstats")  # type: ignore[assignment]
    return {k.removeprefix("cmdstat_"): v for k, v in stats.items()}


def server_us(client: redis.Redis, elk_prefix: str | None, count: int) -> dict[str, Any]:
    """Redis time a partition of a `Worker` at window 1: every command it sends, and the beat's share."""
    sdk = _fresh(client, count, elk_prefix)
    warm = _worker(client, elk_prefix, 1)  # the library loaded, the clock synced
    part = warm.sdk.claim_and_start("warm")
    assert part is not None
    warm.sdk.complete_and_claim(part.partition_id, "warm", claim=False)
    worker = _worker(client, elk_prefix, 1)
    client.config_resetstat()
    began = time.perf_counter()
    report = worker.run(until_empty=True, install_signals=False)
    elapsed = time.perf_counter() - began
    stats = _commandstats(client)
    done = report.processed
    sent = sum(v["usec"] for k, v in stats.items() if k in SENT) / done
    skipped = (*SENT, "info", "config|resetstat")
    by_command = {k: v["usec"] / done for k, v in stats.items() if k not in skipped}
    beat = beat_us(client, sdk, elk_prefix)
    empty = empty_call_us(client, sdk)
    share = beat * (elapsed / done) / HEARTBEAT_S  # one beat every HEARTBEAT_S, spread over its partitions
    return {"sent": sent, "beat_call": beat, "beat_share": share, "total": sent + share, "empty": empty,
            "commands": by_command, "finish_calls": stats.get("fcall", {}).get("calls", 0) / done}  # fmt: skip


def empty_call_us(client: redis.Redis, sdk: ActiveLayer) -> float:
    """Server time of a finish that finishes and claims nothing: what the call costs before its work
    (its keys and arguments read, the function found and called)."""
    calls = 200
    client.config_resetstat()
    for _ in range(calls):
        sdk._io.run(sdk._ready("bench"))
    return float(_commandstats(client).get("fcall", {}).get("usec", 0.0)) / calls


def beat_us(client: redis.Redis, sdk: ActiveLayer, elk_prefix: str | None) -> float:
    """Server time of one beat renewing `BEAT_WINDOW` leases (and the presence entry)."""
    sdk.create_partitions(1, BEAT_WINDOW * 10, 10)
    pids = [p.partition_id for p in (sdk.claim_and_start("beater") for _ in range(BEAT_WINDOW)) if p is not None]
    entry = '{"host":"bench","pid":1,"window":3,"in_hand":3,"processed":0,"failed":0,"started":0,"last_beat":0}'
    sdk.beat("beater", pids, presence=entry)  # loaded
    client.config_resetstat()
    calls = 50
    for _ in range(calls):
        sdk.beat("beater", pids, presence=entry)
    stats = _commandstats(client)
    return sum(v["usec"] for k, v in stats.items() if k in SENT) / calls


def run() -> tuple[str, bool]:
    count = int(os.environ.get("BENCH_RUNTIME_PARTITIONS", "20000"))
    with bench_engine_url() as (client, engine, _url):
        rates: dict[str, list[float]] = {"blocking_1": [], "original": [], "async_64": [], "client_us": [],
                                         "redis_us": []}  # fmt: skip
        servers: dict[str, list[dict[str, Any]]] = {"native": [], "elk": []}
        for run_no in range(RUNS):
            sides = ("original", "blocking_1") if run_no % 2 else ("blocking_1", "original")
            for side in sides:
                rate = blocking_rate(client, count) if side == "blocking_1" else original_rate(client, count)
                rates[side].append(rate)
            rate, client_us, redis_us = async_rate(client, count, 64)
            rates["async_64"].append(rate)
            rates["client_us"].append(client_us)
            rates["redis_us"].append(redis_us)
            servers["native"].append(server_us(client, None, count))
            servers["elk"].append(server_us(client, ELK_PREFIX, count))
        drop(client, NS)
        for key in client.scan_iter(f"elk:{ELK_PREFIX}*"):
            client.delete(key)
    return report(engine, count, rates, servers)


def report(
    engine: str, count: int, rates: dict[str, list[float]], servers: dict[str, list[dict[str, Any]]]
) -> tuple[str, bool]:
    blocking, original, awaited = (median(rates[k]) for k in ("blocking_1", "original", "async_64"))
    rate_ratio = median([b / o for b, o in zip(rates["blocking_1"], rates["original"], strict=True)])
    async_ratio = median([a / b for a, b in zip(rates["async_64"], rates["blocking_1"], strict=True)])
    ok_rate, ok_async = rate_ratio >= TARGETS["rate_1"], async_ratio >= TARGETS["async_64"]
    out = table(
        f"worker runtime: partitions a second, one process, empty process(), {count:,} a run, medians of {RUNS}, "
        f"{engine}",
        ["written as", "partitions/s", "ratio", "target"],
        [
            ("original: four HSETs a partition", f"{original:,.0f}", "1.00x", ""),
            ("Worker, window 1 (threads)", f"{blocking:,.0f}", f"{rate_ratio:.2f}x",
             f">= {TARGETS['rate_1']:g}x of the original: {'met' if ok_rate else 'MISSED'}"),
            ("AsyncWorker, window 64", f"{awaited:,.0f}", f"{async_ratio:.2f}x of window 1",
             f">= {TARGETS['async_64']:g}x of window 1: {'met' if ok_async else 'MISSED'}"),
        ],
    )  # fmt: skip
    client_us, redis_us = median(rates["client_us"]), median(rates["redis_us"])
    out += (
        f"AsyncWorker at window 64, CPU a partition: {client_us:.1f} us in the worker's process, {redis_us:.1f} us in "
        f"Redis (INFO cpu): with a core each, at most {1e6 / max(client_us, redis_us):,.0f} partitions a second; "
        f"sharing one, {1e6 / (client_us + redis_us):,.0f}.\n"
    )
    rows, ok = [], ok_rate and ok_async
    for name, target in (("native", TARGETS["server_native"]), ("elk", TARGETS["server_elk"])):
        runs = servers[name]
        total = median([r["total"] for r in runs])
        met = total <= target
        ok = ok and met
        rows.append((
            "native" if name == "native" else "bound to a Go deployment", median([r["sent"] for r in runs]),
            median([r["beat_call"] for r in runs]), median([r["beat_share"] for r in runs]), total,
            median([r["finish_calls"] for r in runs]), f"<= {target:g} us: {'met' if met else 'MISSED'}",
        ))  # fmt: skip
    out += "\n" + table(
        f"Redis time a partition (INFO commandstats, every command sent), Worker at window 1, medians of {RUNS}",
        ["namespace", "sent us", "a beat us", "beat share us", "total us", "calls a partition", "target"],
        rows,
    )
    for name in ("native", "elk"):
        commands: dict[str, list[float]] = {}
        for r in servers[name]:
            for command, us in r["commands"].items():
                commands.setdefault(command, []).append(us)
        spent = sorted(((median(v), k) for k, v in commands.items()), reverse=True)
        inner = sum(us for us, _ in spent)
        calls = median([r["sent"] for r in servers[name]])
        empty = median([r["empty"] for r in servers[name]])
        lua = max(0.0, calls - inner - empty)
        out += "\n" + table(
            f"where it goes ({name}), a partition: {calls:.1f} us sent = {inner:.1f} us of the commands the scripts "
            f"call + {empty:.1f} us the call itself (a finish of nothing: its keys and arguments read, the function "
            f"called) + {lua:.1f} us of Lua's own work (reading and splicing the records, the checks)",
            ["command", "us a partition"],
            [(k, us) for us, k in spent if us >= 0.05],
        )
    return out, ok

"""Cluster section: archive throughput with 1, 2 and 4 archiver processes, one namespace and
four, on a local Redis Cluster of three masters, with the servers' CPU beside each rate.

Each run fills the archive queues with completed partitions (the standard workload, spread
evenly over the namespaces), starts ``partarchive run --cluster --processes P --namespace
...`` and times it from start until every partition is archived and counted (statistics
flushed). Redis CPU is the growth of ``used_cpu_sys + used_cpu_user`` summed over the
masters, per wall second (cores busy) and per partition: when the archivers' rate stops
growing with processes while one master's share nears one core, that master is the
ceiling; while the client machine's cores are all busy, the client is. A namespace lives
in one slot, so one namespace is served by one master whatever the processes; four
namespaces spread over the masters (by their hash tags). ``BENCH_CLUSTER_SIZE`` sets the
partitions per run (default 200,000).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import redis

from archiver.engine import connect
from archiver.engine.local_cluster import LocalCluster
from bench.populate import _chunks
from bench.report import table
from bench.workload import standard_workload
from layers import ArchiveLayer, ArchiveQueue, KeySchema
from stats import StatsReader


def _fill(client: redis.Redis, namespaces: list[str], n: int) -> None:
    for i, name in enumerate(namespaces):
        keys = KeySchema(name, cluster=True)
        ArchiveQueue(client, keys).ensure_group()
        share = [p for p in standard_workload(n) if p.partition_id % len(namespaces) == i]
        for chunk in _chunks(share, 5000):
            pipe = client.pipeline(transaction=False)
            for part in chunk:
                pipe.xadd(keys.queue, {"p": part.to_json()})
            pipe.execute()


def _cpu(cluster: LocalCluster) -> dict[int, float]:
    out = {}
    for node in cluster.nodes:
        info = node.client.info("cpu")
        out[node.port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return out


def _done(client: redis.Redis, namespaces: list[str], per_ns: dict[str, int]) -> bool:
    for name in namespaces:
        keys = KeySchema(name, cluster=True)
        if ArchiveLayer(client, keys).archived_total() < per_ns[name]:
            return False
        if StatsReader(client, keys).stats()["completed"]["total_completed"] < per_ns[name]:
            return False
    return True


def _one(
    cluster: LocalCluster, namespaces: list[str], processes: int, n: int, flush: int
) -> tuple[float, float, float, bool]:
    client = connect(cluster.url, cluster=True)
    try:
        for name in namespaces:
            for key in client.scan_iter(match=f"{{{name}}}*"):
                client.delete(key)
            for key in client.scan_iter(match=f"{name}_*"):
                client.delete(key)
        _fill(client, namespaces, n)
        per_ns = {name: client.xlen(KeySchema(name, cluster=True).queue) for name in namespaces}
        settings = {
            "PARTARCHIVE_COMPRESSED_FROM": str(10**9),  # the simple tier throughout
            "PARTARCHIVE_SUMMARY_ABOVE": str(10**10),
            "PARTARCHIVE_STATS_FLUSH_INTERVAL_S": "0.5",
            "PARTARCHIVE_STATS_FLUSH_COUNT": str(flush),
        }
        env = dict(os.environ, **settings)
        before = _cpu(cluster)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "archiver", "run", "--cluster", "--redis-url", cluster.url,
             "--namespace", ",".join(namespaces), "--processes", str(processes), "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            while not _done(client, namespaces, per_ns):
                if proc.poll() is not None:
                    raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "archiver exited")
                time.sleep(0.2)
            elapsed = time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        after = _cpu(cluster)
        total = sum(per_ns.values())
        busy = {port: after[port] - before[port] for port in after}
        ok = total == n and proc.returncode == 0
        return total / elapsed, sum(busy.values()) / elapsed, max(busy.values()) / elapsed, ok
    finally:
        client.close()


def run() -> tuple[str, bool]:
    n = int(os.environ.get("BENCH_CLUSTER_SIZE", "200000"))
    rows = []
    ok = True
    with LocalCluster(masters=3) as cluster:
        one, four = ["benchc0"], [f"benchc{i}" for i in range(4)]
        runs = [(one, 1, 100), (one, 2, 100), (one, 4, 100), (four, 1, 100), (four, 2, 100), (four, 4, 100),
                (one, 1, 1000), (four, 4, 1000)]  # fmt: skip
        for namespaces, processes, flush in runs:
            rate, cores, busiest, good = _one(cluster, namespaces, processes, n, flush)
            ok = ok and good
            rows.append((len(namespaces), processes, flush, n, round(rate), round(cores, 2), round(busiest, 2),
                         round(cores / rate * 1e6, 2), "yes" if good else "NO"))  # fmt: skip
    out = table(
        f"cluster: archive throughput on a local cluster of 3 masters ({os.cpu_count()} cores on this machine)",
        ["namespaces", "processes", "flush", "partitions", "archived /s", "Redis cores", "busiest master",
         "Redis us/p", "exact"],
        rows,
    )  # fmt: skip
    out += (
        "Redis cores = server CPU seconds per wall second, summed over the masters; busiest master = the\n"
        "largest single master's share (1.0 = one core saturated, the ceiling of one namespace).\n"
        "Redis us/p = server CPU per archived partition. flush = PARTARCHIVE_STATS_FLUSH_COUNT (default 500, the\n"
        "seed's was 100; one commit script counts that many partitions). Simple tier, statistics exact.\n"
    )
    return out, ok

"""Redis Cluster for real: the processes (archiver, CLI, HTTP API) on a local cluster, and a
failover (kill -9 of the master holding the namespace's slot) with nothing lost or counted twice.

The layers' contract suite runs on the cluster through the `any_redis` / `server_redis`
fixtures; this file covers what needs processes or its own cluster.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import redis

from archiver.engine import connect
from archiver.engine.local_cluster import LocalCluster, Node
from codec.errors import PartArchiveError
from layers import ActiveLayer, ArchiveLayer, KeySchema
from stats import StatsChecker, StatsReader
from tests.conftest import cluster_server
from tests.helpers import free_port, run_cli, start_archiver, start_server, stop_process, wait_for


def test_archiver_cli_and_api_on_the_cluster(
    local_cluster: LocalCluster, cluster_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace, cluster=True)
    sdk = ActiveLayer(cluster_redis, namespace)
    assert sdk.keys == keys  # a cluster client gets the hash-tagged names
    sdk.create_partitions(1, 400 * 100, 100)
    for _ in range(400):
        part = sdk.claim("w")
        assert part is not None
        sdk.complete(part.partition_id, "w")
    url = local_cluster.url
    archiver = start_archiver(
        url, namespace, PARTARCHIVE_CLUSTER="1", PARTARCHIVE_COMPRESSED_FROM="100", PARTARCHIVE_SUMMARY_ABOVE="300",
        PARTARCHIVE_BATCH_SIZE="50", PARTARCHIVE_MAINTENANCE_INTERVAL_S="0.05",
    )  # fmt: skip
    archive = ArchiveLayer(cluster_redis, keys)
    try:
        wait_for(lambda: archive.archived_total() == 400 and archive.simple_size() == 0, 60, "archiving on the cluster")
        wait_for(lambda: archive.tier().value == "summary", 30, "the summary tier")
    finally:
        err = stop_process(archiver)
    assert archiver.returncode == 0 and "Traceback" not in err
    status = run_cli(url, namespace, "status", "--json", PARTARCHIVE_CLUSTER="1")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["archive"]["archived_total"] == 400
    got = run_cli(url, namespace, "get", "123", "--json", PARTARCHIVE_CLUSTER="1")
    assert got.returncode == 0 and json.loads(got.stdout)["partition"]["max_id"] == 12300
    verify = run_cli(url, namespace, "stats", "verify", PARTARCHIVE_CLUSTER="1")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    port = free_port()
    server = start_server(url, namespace, port, "--cluster")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            body = http.get("/partitions/123").json()
            assert body["found"] and body["partition"]["min_id"] == 12201
            assert http.get("/stats").json()["completed"]["total_completed"] == 400
            tier = f'partarchive_archive_tier{{namespace="{namespace}",tier="summary"}} 1.0'
            assert tier in http.get("/metrics").text
            assert http.get("/partitions/abc").status_code == 422
    finally:
        err = stop_process(server)
    assert "Traceback" not in err


def test_an_untagged_namespace_is_refused_on_the_cluster(cluster_redis: redis.Redis, namespace: str) -> None:
    try:
        ArchiveLayer(cluster_redis, KeySchema(namespace))
    except PartArchiveError as exc:
        assert "--cluster" in str(exc)
    else:
        raise AssertionError("an untagged schema was accepted on a cluster client")


def _caught_up(cluster: LocalCluster, master: Node) -> bool:
    """Whether the master's replica has received everything the master had written when asked."""
    offset = int(master.client.info("replication")["master_repl_offset"])
    index = cluster.nodes.index(master)
    replicas = [n for n in cluster.nodes if n.master_of == index and n.alive()]
    return bool(replicas) and all(
        int(n.client.info("replication").get("slave_repl_offset", -1)) >= offset for n in replicas
    )


@pytest.mark.chaos
def test_a_master_failover_loses_nothing_and_counts_once(namespace: str) -> None:
    total = 1500
    with LocalCluster(masters=3, replicas=1, binary=cluster_server()) as cluster:
        client = connect(cluster.url, cluster=True)
        sdk = ActiveLayer(client, namespace, lease_timeout=2.0)
        sdk.create_partitions(1, total * 10, 10)
        archiver = start_archiver(cluster.url, namespace, PARTARCHIVE_CLUSTER="1", PARTARCHIVE_CLAIM_IDLE_MS="2000")
        completed = 0
        errors: list[str] = []
        stop, killed = threading.Event(), threading.Event()

        def work() -> None:
            nonlocal completed
            worker = ActiveLayer(connect(cluster.url, cluster=True), namespace, lease_timeout=2.0)
            while not stop.is_set():
                if completed >= 2 * total // 3 and not killed.is_set():
                    killed.wait(120)  # held here until the kill, so that it lands mid-run however slow the machine
                elif completed >= total // 3 and not killed.is_set():
                    time.sleep(0.01)  # slowed down until the kill, so that completions are in flight when it lands
                try:
                    part = worker.claim("w")
                    if part is None:
                        if worker.size() == 0:
                            return
                        time.sleep(0.2)  # a lease lost with the old master expires
                        continue
                    worker.complete(part.partition_id, "w")
                    completed += 1
                except (redis.RedisError, PartArchiveError) as exc:  # failing over; try again
                    errors.append(type(exc).__name__)
                    time.sleep(0.1)

        thread = threading.Thread(target=work)
        thread.start()
        archive = ArchiveLayer(client, sdk.keys)
        try:
            wait_for(lambda: completed >= total // 3 and archive.archived_total() > 0, 60, "a third of the work")
            victim = cluster.master_of_slot(client.keyslot(sdk.keys.queue))
            # The replica is in step up to the last few milliseconds, as in a healthy deployment, so what
            # the kill loses is the writes of that window. (A replica far behind, on a starved machine,
            # would lose whatever Redis loses; no client can prevent that.) WAIT would count only its own
            # connection's writes: the replica's offset is compared with the master's instead.
            wait_for(lambda: _caught_up(cluster, victim), 60, "the replica in step")
            cluster.kill(victim)
            killed.set()
            assert completed < total  # mid-run
            wait_for(lambda: cluster.master_of_slot(client.keyslot(sdk.keys.queue)) is not victim, 30, "the failover")
            thread.join(120)
            assert not thread.is_alive(), "the worker did not finish"
            try:
                wait_for(lambda: archive.archived_total() == total, 60, "every partition archived")
                wait_for(lambda: client.xlen(sdk.keys.queue) == 0, 30, "the queue drained")
            except AssertionError as exc:
                heir = cluster.master_of_slot(client.keyslot(sdk.keys.queue))
                state = f"archived {archive.archived_total()}, queue {client.xlen(sdk.keys.queue)}"
                state += f", active {sdk.size()}; new master's log: {cluster.log(heir)[-1500:]}"
                raise AssertionError(f"{exc}: {state}; archiver log: {stop_process(archiver)[-3000:]}") from None
        finally:
            stop.set()
            err = stop_process(archiver) if archiver.poll() is None else ""
        assert "Traceback" not in err
        assert archive.indexed(list(range(1, total + 1))) == [True] * total  # nothing lost
        view = StatsReader(client, sdk.keys).stats()
        assert view["completed"]["total_completed"] == total  # nothing counted twice
        assert StatsChecker(client, sdk.keys).check().ok
        assert client.xlen(sdk.keys.dead_letter) == 0
        print(f"failover: {len(errors)} calls retried by the worker ({sorted(set(errors))})")
        client.close()


def test_cluster_mode_against_a_server_that_is_not_a_cluster_is_one_line(engine_url: str, namespace: str) -> None:
    url = engine_url.replace("redis://", "redis://:hunter2@", 1).rsplit("/", 1)[0] + "/0"
    done = run_cli(url, namespace, "status", "--cluster")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot reach Redis Cluster" in done.stderr and "hunter2" not in done.stderr

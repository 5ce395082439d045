"""Which node answers for a namespace and how many replicas are in step, as `status`, `status --json`
and the dashboard show it: on one server, through Sentinel, and on a Redis Cluster (the master of
the namespace's hash slot)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import redis
from fastapi.testclient import TestClient

from archiver.config import Config
from archiver.engine.local_cluster import LocalCluster
from archiver.engine.local_sentinel import LocalSentinel
from archiver.engine.topology import IN_STEP_RULE, serving_node
from archiver.web import create_app
from layers import KeySchema
from tests.conftest import delete_namespace
from tests.helpers import complete_partitions, run_cli, wait_for


def test_one_server(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    complete_partitions(real_redis, namespace, 3)
    url = urlsplit(engine_url)
    node = serving_node(real_redis, KeySchema(namespace).active)
    assert (node["mode"], node["node"], node["role"]) == ("single", f"{url.hostname}:{url.port}", "master")
    assert node["replicas"] == real_redis.info("replication")["connected_slaves"] == len(node["replica_nodes"])
    assert node["in_step_rule"] == IN_STEP_RULE
    text = run_cli(engine_url, namespace, "status")
    assert text.returncode == 0 and f"{url.hostname}:{url.port} (single server, role master)" in text.stdout
    as_json = json.loads(run_cli(engine_url, namespace, "status", "--json").stdout)["redis"]
    assert as_json["node"] == node["node"] and as_json["mode"] == "single"


@pytest.mark.sentinel
def test_sentinel_primary_and_its_replica(
    local_sentinel: LocalSentinel, sentinel_redis: redis.Redis, namespace: str
) -> None:
    complete_partitions(sentinel_redis, namespace, 3)
    primary, replica = local_sentinel.primary(), local_sentinel.nodes[1]
    assert primary is local_sentinel.nodes[0]

    def in_step() -> bool:
        node = serving_node(sentinel_redis, KeySchema(namespace).active)
        assert (node["mode"], node["node"], node["master_name"]) == ("sentinel", primary.address, "partarchive")
        assert node["replicas"] == 1 and node["replica_nodes"][0]["address"] == replica.address
        return bool(node["replicas_in_step"] == 1 and node["replica_nodes"][0]["in_step"])

    wait_for(in_step, 30, "the replica in step")
    with TestClient(create_app(sentinel_redis, Config(namespace=namespace))) as http:
        shown = http.get("/dashboard/overview").json()["redis"]
    assert (shown["mode"], shown["node"], shown["replicas"]) == ("sentinel", primary.address, 1)


def test_cluster_master_of_the_namespace_slot(
    local_cluster: LocalCluster, cluster_redis: redis.Redis, namespace: str
) -> None:
    url_node = urlsplit(local_cluster.url).port

    def owner_of(name: str) -> int:
        return local_cluster.master_of_slot(cluster_redis.keyslot(KeySchema(name, cluster=True).active)).port

    # a namespace whose slot is not on the node the URL names: the answer must come from the slot
    name = next(f"{namespace}{i}" for i in range(100) if owner_of(f"{namespace}{i}") != url_node)
    try:
        complete_partitions(cluster_redis, name, 3)
        owner = f"127.0.0.1:{owner_of(name)}"
        node = serving_node(cluster_redis, KeySchema(name, cluster=True).active)
        assert (node["mode"], node["node"], node["role"], node["replicas"]) == ("cluster", owner, "master", 0)
        done = run_cli(local_cluster.url, name, "status", "--json", PARTARCHIVE_CLUSTER="1")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["redis"]["node"] == owner
        text = run_cli(local_cluster.url, name, "status", PARTARCHIVE_CLUSTER="1").stdout
        assert f"{owner} (cluster master of the namespace's hash slot, role master); 0 replicas" in text
        with TestClient(create_app(cluster_redis, Config(namespace=name, cluster=True))) as http:
            assert http.get("/dashboard/overview").json()["redis"]["node"] == owner
    finally:
        delete_namespace(cluster_redis, name)

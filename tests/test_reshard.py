"""Live resharding: a new master added to a local cluster and slots moved to it key by key
(`LocalCluster.add_master`, `LocalCluster.move_slot`)."""

from __future__ import annotations

import contextlib

import pytest

from archiver.engine import connect
from archiver.engine.local_cluster import LocalCluster
from tests.conftest import cluster_server


def owners(cluster: LocalCluster, slot: int) -> set[int]:
    """The port each live node names as the master of ``slot``."""
    seen = set()
    for node in cluster.nodes:
        if node.alive():
            with contextlib.closing(node.client) as client:
                for start, end, owner, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        seen.add(int(owner[1]))
    return seen


@pytest.mark.cluster
def test_a_slot_moves_to_a_new_master_with_its_keys(namespace: str) -> None:
    with LocalCluster(masters=3, binary=cluster_server()) as cluster:
        client = connect(cluster.url, cluster=True)
        keys = [f"{{{namespace}}}:k{i}" for i in range(25)]
        for i, key in enumerate(keys):
            client.set(key, i, px=3_600_000 if i % 2 else None)
        slot = client.keyslot(keys[0])
        source = cluster.master_of_slot(slot)
        new = cluster.add_master()
        assert new.node_id and len(cluster.nodes) == 4
        assert cluster.move_slot(slot, source, batch=4) == 0  # already there
        assert cluster.move_slot(slot, new, batch=4) == 25
        assert owners(cluster, slot) == {new.port}  # every node was told
        with contextlib.closing(new.client) as target, contextlib.closing(source.client) as old:
            assert target.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 25
            assert old.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
        assert [int(client.get(key) or -1) for key in keys] == list(range(25))
        assert 0 < client.pttl(keys[1]) <= 3_600_000 and client.pttl(keys[0]) == -1  # expiries kept
        client.set(keys[0], "after")  # the slot is served by its new master
        assert client.get(keys[0]) == b"after"
        client.close()

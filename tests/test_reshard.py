"""Live resharding: a fourth master added to a local cluster and slots moved to it key by key
(`LocalCluster.add_master`, `LocalCluster.move_slot`), also while workers complete partitions and
``partarchive run --processes 2`` archives them; nothing may be lost, counted twice, dead-lettered
or go unanswered, and no SDK call may fail."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest

from archiver.engine import connect
from archiver.engine.local_cluster import LocalCluster, Node
from archiver.router import QueryRouter
from layers import ActiveLayer, ArchiveLayer, KeySchema, TierPolicy
from layers.plumbing.resharding import BUDGET_S
from stats import StatsChecker, StatsReader
from tests.conftest import cluster_server
from tests.helpers import RouterWatch, free_port, refusals, retries, start_archiver, stop_process, wait_for

SDK_CALLS = ("claim", "complete")


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
        newer = cluster.add_master()  # the only slot of a master moved away (Redis may make it a replica)
        assert cluster.move_slot(slot, newer) == 25 and owners(cluster, slot) == {newer.port}
        assert client.get(keys[0]) == b"after"
        client.close()


class Load:
    """Worker threads claiming and completing every partition, each on a client of its own: at full
    speed, slowed while `slow` is set (so that the work goes on through a slot move however fast the
    machine), and held near the end until `slow` is cleared. Any error an SDK call raises is noted."""

    def __init__(self, url: str, namespace: str, total: int, workers: int = 2) -> None:
        self.url, self.namespace, self.total = url, namespace, total
        self.completed = 0
        self.slowest_s = 0.0
        self.errors: list[str] = []
        self.slow = threading.Event()
        self.released = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._work, args=(f"w{i}",)) for i in range(workers)]

    def finished(self) -> bool:
        return not any(thread.is_alive() for thread in self.threads)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.slow.clear()
        self.released.set()
        for thread in self.threads:
            thread.join(120)

    def _work(self, name: str) -> None:
        client = connect(self.url, cluster=True)
        sdk = ActiveLayer(client, self.namespace)
        try:
            while True:
                if self.slow.is_set():
                    if self.completed >= self.total * 9 // 10:
                        self.released.wait(120)
                    time.sleep(0.01)
                started = time.monotonic()
                try:
                    part = sdk.claim(name)
                    if part is None:
                        return
                    sdk.complete(part.partition_id, name)
                except Exception as exc:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                    return
                with self._lock:
                    self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                    self.completed += 1
        finally:
            client.close()


def meeting_traffic(source: Node, target: Node, held: Callable[[], bool], per_batch: int = 5) -> Callable[[int], None]:
    """A `LocalCluster.move_slot` hook: after the first batch the move stays half done until
    ``held()`` says the calls it waits for were refused and sent again; after that each next batch
    goes once the two nodes have refused (or sent on) ``per_batch`` more calls, so every step of
    the move meets live traffic."""
    seen = [-1]

    def between(_moved: int) -> None:
        if seen[0] < 0:
            wait_for(held, 30, "calls refused and sent again while the slot is half moved")
        else:
            wait_for(lambda: refusals(source, target) >= seen[0] + per_batch, 30, "calls meeting the move")
        seen[0] = refusals(source, target)

    return between


@pytest.mark.cluster
@pytest.mark.chaos
def test_resharding_under_load_loses_nothing_and_counts_once(namespace: str) -> None:
    total = 3000
    policy = TierPolicy(compressed_from=200, batch_size=10)  # shelves of 640 partitions: five shelves
    with LocalCluster(masters=3, binary=cluster_server()) as cluster:
        client = connect(cluster.url, cluster=True)
        keys = KeySchema(namespace, cluster=True)
        ActiveLayer(client, keys).create_partitions(1, total * 10, 10)
        archive = ArchiveLayer(client, keys, policy)
        port = free_port()
        # entries wait in the archivers up to 2 s for their commit: some always do when the move starts
        archiver = start_archiver(
            cluster.url, namespace, "--processes", "2", "--metrics-port", str(port), PARTARCHIVE_CLUSTER="1",
            PARTARCHIVE_COMPRESSED_FROM=str(policy.compressed_from), PARTARCHIVE_BATCH_SIZE=str(policy.batch_size),
            PARTARCHIVE_MAINTENANCE_INTERVAL_S="0.1", PARTARCHIVE_STATS_FLUSH_INTERVAL_S="2",
        )  # fmt: skip
        slot = client.keyslot(keys.queue)
        shelf_slots = sorted({client.keyslot(keys.shelf(n)) for n in range(total // (64 * policy.batch_size) + 1)})
        watcher = connect(cluster.url, cluster=True)
        try:
            with (
                RouterWatch(watcher, namespace, range(1, total + 1)) as watch,
                Load(cluster.url, namespace, total) as load,
            ):
                wait_for(lambda: load.completed >= total // 4 or bool(load.errors), 60, "a quarter of the work")
                load.slow.set()
                wait_for(lambda: client.exists(keys.shelf(0)) == 1, 60, "the first shelf")
                source, new = cluster.master_of_slot(slot), cluster.add_master()
                at, started, sdk_before = load.completed, time.monotonic(), retries(SDK_CALLS)

                def both_retried() -> bool:
                    """The workers' calls refused and sent again, and the archivers' commits too, unless none
                    met the half-moved slot within half of a call's budget (`BUDGET_S`): a commit whose keys
                    all stayed on the source goes through, and a worker's call may wait no longer."""
                    if load.errors:
                        return True
                    commits_met = retries(("commit",), port) > 0 or time.monotonic() - started > BUDGET_S / 2
                    return retries(SDK_CALLS) > sdk_before and commits_met

                moved = cluster.move_slot(slot, new, batch=3, between=meeting_traffic(source, new, both_retried))
                took = time.monotonic() - started
                for shelf_slot in shelf_slots:
                    moved += cluster.move_slot(shelf_slot, new, batch=5)
                assert load.errors == []
                during = load.completed - at
                load.slow.clear()
                load.released.set()
                wait_for(load.finished, 120, "the workers to finish")
                assert load.errors == []  # no SDK call raised: claim() and complete() waited the move out
                assert load.completed == total
                wait_for(lambda: archive.archived_total() == total and client.xlen(keys.queue) == 0, 120, "archived")
            assert watch.lost == [] and watch.passes >= 1  # the router answered for every partition throughout
            commits = retries(("commit",), port)
        finally:
            err = stop_process(archiver)
            watcher.close()
        assert "Traceback" not in err and "round failed" not in err, err[-3000:]
        assert cluster.master_of_slot(slot) is new and all(cluster.master_of_slot(s) is new for s in shelf_slots)
        assert archive.indexed(list(range(1, total + 1))) == [True] * total  # nothing lost
        assert ActiveLayer(client, keys).size() == 0
        assert StatsReader(client, keys).stats()["completed"]["total_completed"] == total  # counted once
        assert StatsChecker(client, keys, policy=policy).check().ok
        assert client.xlen(keys.dead_letter) == 0
        router = QueryRouter(client, keys, policy=policy)
        answers = [router.get(pid) for pid in range(1, total + 1)]
        assert all(a.found and not a.degraded for a in answers), [a for a in answers if not a.found or a.degraded][:3]
        print(
            f"resharding: {moved} keys moved (the namespace's slot in {took:.1f} s), {during} completions meanwhile, "
            f"slowest claim + complete {load.slowest_s:.2f} s, {refusals(source, new)} calls refused or sent on, "
            f"sent again: {retries(SDK_CALLS) - sdk_before:.0f} by the workers, {commits:.0f} commits by the "
            f"archivers; {watch.passes} router passes"
        )
        client.close()

"""Pausing archival (the progressive rollback): completions stay where the original architecture
kept them, nothing is queued, and resume sends them through the normal exactly-once path."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.namespace import Namespace
from archiver.router import QueryRouter, Source
from codec import ArchivedPartition, PartitionInfo
from codec.elk import ElkRecord, decode_elk
from layers import ActiveLayer, ArchiveLayer, KeySchema
from layers.control.switch import ArchivalSwitch
from stats import StatsChecker, StatsReader
from tests.elk_fixtures import delete_prefix
from tests.go_worker import GoWorker
from tests.helpers import AFTER_A_KILL, RouterWatch, run_cli, scraped, start_archiver, stop_process, wait_for

SAMPLES = [
    orjson.loads(line) for line in (Path(__file__).parent / "fixtures/elk/samples.jsonl").read_bytes().splitlines()
]
COMPLETED_LAYOUT = next(list(s) for s in SAMPLES if s["status"] == "completed")


def _claimed(layer: ActiveLayer, count: int, worker: str = "w") -> list[int]:
    layer.create_partitions(1, count * 1000, 1000)
    pids = []
    for _ in range(count):
        part = layer.claim(worker)
        assert part is not None
        pids.append(part.partition_id)
    return pids


def test_a_paused_completion_stays_in_the_active_hash_until_resumed(any_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(any_redis, namespace)
    keys = layer.keys
    switch = ArchivalSwitch(any_redis, keys)
    first, second, third = _claimed(layer, 3)
    normal = layer.complete(first, "w")
    assert normal.entry_id and not normal.held

    assert switch.pause("tester").paused
    held = layer.complete(second, "w")
    assert held.held and held.entry_id is None and not held.already_completed
    again = layer.complete(second, "w")
    assert again.already_completed and not again.held
    kept = PartitionInfo.from_json(any_redis.hget(keys.active, str(second)))
    assert kept.status.value == "completed" and kept.worker_id == "w" and kept.updated_at > 0
    assert any_redis.xlen(keys.queue) == 1  # only the completion before the pause
    assert any_redis.getbit(keys.done, second) == 1
    assert layer.counts()["claimed"] == 1  # the third; the held one is no longer active work
    state = switch.state()
    assert (state.paused, state.by, state.held) == (True, "tester", 1) and state.since
    gauges = scraped(any_redis, keys)
    assert gauges["partarchive_archival_paused"] == 1 and gauges["partarchive_archival_held"] == 1

    switch.pause("someone else")  # the first pause's time and operator stay
    assert switch.state().by == "tester"
    assert switch.resume() == 1
    assert switch.state() == switch.state().__class__(False, None, "", 0, 100, released=1)
    assert not any_redis.hexists(keys.active, str(second))
    entries = any_redis.xrange(keys.queue)
    assert len(entries) == 2
    resumed = ArchivedPartition.from_json(entries[1][1][b"p"])
    assert resumed.partition_id == second and resumed.completed_at == kept.updated_at
    assert resumed.duration == max(0, kept.updated_at - kept.claimed_at)
    assert layer.complete(second, "w").already_completed
    assert switch.resume() == 0  # nothing left: idempotent

    assert scraped(any_redis, keys)["partarchive_archival_paused"] == 0
    assert not layer.complete(third, "w").held  # running as before
    assert any_redis.xlen(keys.queue) == 3


def test_the_router_answers_for_a_held_partition(server_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(server_redis, namespace)
    [pid] = _claimed(layer, 1)
    switch = ArchivalSwitch(server_redis, layer.keys)
    switch.pause("tester")
    layer.complete(pid, "w")
    router = QueryRouter(server_redis, layer.keys)
    answer = router.get(pid)
    assert answer.source is Source.ACTIVE and answer.status == "completed"
    switch.resume()
    assert router.get(pid).source is Source.QUEUE
    drain(ArchiverDaemon(server_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    assert router.get(pid).source is Source.SIMPLE


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    yield f"{namespace}:"
    delete_prefix(real_redis, f"{namespace}:")


def test_a_bound_namespace_keeps_the_completion_as_go_does(real_redis: redis.Redis, prefix: str) -> None:
    config = Config(namespace="elk", elk_prefix=prefix, block_ms=10)
    sdk = ActiveLayer(real_redis, config.keys)
    go = GoWorker(real_redis, prefix, "go-host-1-8c1f3a2e")
    go.create(2)
    part = sdk.claim("py-worker")
    assert part is not None
    sdk.start(part.partition_id, "py-worker")
    before = decode_elk(real_redis.hget(sdk.keys.active, str(part.partition_id)))
    stats_before = {k: int(v) for k, v in real_redis.hgetall(go.keys.stats).items()}
    switch = ArchivalSwitch(real_redis, config.keys)
    switch.pause("tester")
    assert sdk.complete(part.partition_id, "py-worker").held

    raw = real_redis.hget(sdk.keys.active, str(part.partition_id))
    rec = decode_elk(raw)  # Go's decoder reads it: the record as Go writes a completion
    assert rec.to_json() == raw and [k for k in orjson.loads(raw) if k != "options"] == COMPLETED_LAYOUT
    assert rec.status == "completed" and rec.version == before.version and rec.worker_id == "py-worker"
    assert go.get(part.partition_id).status == "completed"  # what a Go reader sees
    stats = {k: int(v) for k, v in real_redis.hgetall(go.keys.stats).items()}
    assert stats[b"running"] == stats_before[b"running"] - 1
    assert stats[b"completed"] == stats_before.get(b"completed", 0) + 1
    assert real_redis.xlen(config.keys.queue) == 0

    switch.resume()
    [(_, fields)] = real_redis.xrange(config.keys.queue)
    assert fields[b"p"] == raw  # queued as complete() queues a Go record
    drain(ArchiverDaemon(real_redis, config, consumer="t"))
    answer = QueryRouter(real_redis, config.keys).get(part.partition_id)
    assert answer.source is Source.SIMPLE and isinstance(answer.partition, ElkRecord)
    assert answer.partition.to_json() == raw


def test_the_lock_holder_queues_what_an_interrupted_resume_left(real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    pids = _claimed(layer, 5)
    switch = ArchivalSwitch(real_redis, layer.keys)
    switch.pause("tester")
    for pid in pids:
        assert layer.complete(pid, "w").held
    daemon = ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10, maintenance_interval_s=0), "t")
    drain(daemon)
    assert daemon.backlog.paused and ArchiveLayer(real_redis, layer.keys).archived_total() == 0
    real_redis.delete(layer.keys.archival_paused)  # the switch cleared, the resume killed before it queued them
    drain(daemon)
    assert ArchiveLayer(real_redis, layer.keys).archived_total() == 5 and switch.state().held == 0
    assert real_redis.hlen(layer.keys.active) == 0


def test_the_command_line(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    [pid] = _claimed(layer, 1)
    paused = run_cli(engine_url, namespace, "archival", "pause")
    assert paused.returncode == 0, paused.stderr
    assert "archival: paused since" in paused.stdout and "resume with: partarchive archival resume" in paused.stdout
    layer.complete(pid, "w")
    assert re.search(
        r"^archival +PAUSED since .* 1 completed partitions held", run_cli(engine_url, namespace, "status").stdout, re.M
    )
    status = json.loads(run_cli(engine_url, namespace, "archival", "status", "--json").stdout)
    assert status["paused"] is True and status["held"] == 1 and status["queue_backlog"] == 0
    resumed = run_cli(engine_url, namespace, "archival", "resume")
    assert resumed.returncode == 0 and "1 held partitions sent" in resumed.stdout
    assert "archival: running, every completion (archive queue backlog 1)" in resumed.stdout
    bad = run_cli(engine_url, namespace, "archival", "stop")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


class _Workers:
    """Worker threads completing partitions until none is pending, each taking ``pace_s`` a partition."""

    def __init__(self, client: redis.Redis, namespace: str, count: int, pace_s: float = 0.02) -> None:
        self.errors: list[str] = []
        self.pace_s = pace_s
        self.threads = [threading.Thread(target=self._work, args=(client, namespace, f"w{i}")) for i in range(count)]

    def _work(self, client: redis.Redis, namespace: str, worker: str) -> None:
        layer = ActiveLayer(client, namespace)
        try:
            while (part := layer.claim(worker)) is not None:
                time.sleep(self.pace_s)
                layer.complete(part.partition_id, worker)
        except Exception as exc:  # reported by the test
            self.errors.append(repr(exc))

    def __enter__(self) -> _Workers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        for t in self.threads:
            t.join(120)


def test_pause_and_resume_with_workers_running_and_an_archiver_killed(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    n = 3000
    keys = KeySchema(namespace)
    layer = ActiveLayer(real_redis, namespace)
    pids = layer.create_partitions(1, n * 100, 100)
    archive = ArchiveLayer(real_redis, keys)
    switch = ArchivalSwitch(real_redis, keys)
    archiver = start_archiver(engine_url, namespace, "--consumer", "first", **AFTER_A_KILL)
    try:
        with RouterWatch(real_redis, namespace, pids) as watch, _Workers(real_redis, namespace, 4) as workers:
            wait_for(lambda: archive.archived_total() >= 300, 60, "archiving under way")
            assert run_cli(engine_url, namespace, "archival", "pause").returncode == 0
            wait_for(lambda: switch.state().held >= 300, 60, "completions held while paused")
            wait_for(lambda: real_redis.xlen(keys.queue) == 0, 60, "the archiver finishing what was queued")
            archived_while_paused = archive.archived_total()
            archiver.kill()  # kill -9 between pause and resume
            archiver.wait(10)
            held_at_kill = switch.state().held
            wait_for(lambda: switch.state().held >= held_at_kill + 300, 60, "more completions held")
            assert real_redis.xlen(keys.queue) == 0 and archive.archived_total() == archived_while_paused
            archiver = start_archiver(engine_url, namespace, "--consumer", "second", **AFTER_A_KILL)
            resumed = run_cli(engine_url, namespace, "archival", "resume")
            assert resumed.returncode == 0, resumed.stderr
            wait_for(lambda: not layer.counts()["pending"], 120, "the workers done")
        assert not workers.errors, workers.errors[:3]
        wait_for(lambda: archive.archived_total() == n, 120, "everything archived")
    finally:
        err = stop_process(archiver)
    assert "Traceback" not in err
    assert not watch.lost, watch.lost[:5]
    assert watch.passes >= 2
    assert real_redis.bitcount(keys.index) == n and real_redis.hlen(keys.active) == 0
    assert StatsReader(real_redis, keys).stats()["completed"]["total_completed"] == n  # counted once
    assert StatsChecker(real_redis, keys).check().ok
    assert switch.state().held == 0 and real_redis.xlen(keys.queue) == 0


@pytest.fixture
def bound(real_redis: redis.Redis, namespace: str) -> Iterator[tuple[Config, GoWorker]]:
    """``namespace`` bound to a Go deployment (prefix ``<namespace>-app:``), as ``run --adopt-elk`` leaves it."""
    prefix = f"{namespace}-app:"
    config = Config(namespace=namespace, elk_prefix=prefix, block_ms=10)
    Namespace(real_redis, config).remember_binding()
    go = GoWorker(real_redis, prefix, "go-host-1")
    yield config, go
    delete_prefix(real_redis, prefix, namespace)


def test_the_switch_commands_find_a_namespaces_go_binding(
    engine_url: str, real_redis: redis.Redis, namespace: str, bound: tuple[Config, GoWorker]
) -> None:
    """Issue 47: pause, resume, rollout, status and report in a bound namespace act on the keys the
    workers read (under Go's prefix), given only --namespace; a namespace that does not exist is refused."""
    config, go = bound
    sdk = ActiveLayer(real_redis, config.keys)
    go.create(3)
    pids = []
    for _ in range(3):
        part = sdk.claim("py-worker")
        assert part is not None
        pids.append(part.partition_id)
    paused = run_cli(engine_url, namespace, "archival", "pause")
    assert paused.returncode == 0, paused.stderr
    assert real_redis.exists(config.keys.archival_paused)
    assert not real_redis.exists(KeySchema(namespace).archival_paused)
    assert sdk.complete(pids[0], "py-worker").held  # held, as the switch says
    status = json.loads(run_cli(engine_url, namespace, "archival", "status", "--json").stdout)
    assert status["paused"] is True and status["held"] == 1
    report = run_cli(engine_url, namespace, "archival", "report")
    assert report.returncode == 0 and "gray release: paused, held 1" in report.stdout
    resumed = run_cli(engine_url, namespace, "archival", "resume")
    assert resumed.returncode == 0 and "1 held partitions sent" in resumed.stdout
    assert real_redis.xlen(config.keys.queue) == 1
    rolled = run_cli(engine_url, namespace, "archival", "rollout", "0")
    assert rolled.returncode == 0 and json.loads(real_redis.get(config.keys.archival_paused)) == {"share": 0}  # type: ignore[arg-type]
    assert sdk.complete(pids[1], "py-worker").held  # outside a share of 0

    for action in (["pause"], ["resume"], ["rollout", "50"], ["status"], ["report"]):
        typo = run_cli(engine_url, f"{namespace}typo", "archival", *action)
        assert typo.returncode == 1
        assert typo.stderr == f"partarchive: no such namespace '{namespace}typo' on this server\n"
    assert not list(real_redis.scan_iter(match=f"{namespace}typo*"))


def test_held_completions_in_a_bound_namespace_are_not_counted_as_running(
    engine_url: str, real_redis: redis.Redis, namespace: str, bound: tuple[Config, GoWorker]
) -> None:
    """Issue 47: the index rebuild from Go's hash leaves held completions (status completed) out of
    the leases, so `stats` and `status` do not count them as running."""
    config, go = bound
    sdk = ActiveLayer(real_redis, config.keys)
    go.create(5)
    ArchivalSwitch(real_redis, config.keys).pause("tester")
    for _ in range(3):
        part = sdk.claim("py-worker")
        assert part is not None
        sdk.start(part.partition_id, "py-worker")
        assert sdk.complete(part.partition_id, "py-worker").held
    sdk.sync()
    assert real_redis.zcard(config.keys.leases) == 0
    stats = json.loads(run_cli(engine_url, namespace, "stats", "--json").stdout)
    assert stats["active"]["running"] == 0 and stats["active"]["pending"] == 2
    status = json.loads(run_cli(engine_url, namespace, "status", "--json").stdout)
    [ours] = [n for n in status["namespaces"] if n["namespace"] == namespace] if "namespaces" in status else [status]
    assert ours["active"]["by_status"] == {"pending": 2, "claimed": 0, "running": 0, "failed": 0}

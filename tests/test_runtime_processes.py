"""``partarchive worker`` as real processes: 10,000 partitions drained by 4 processes at window 8 on the
real engine and the local cluster, both flavours (each completed once, archived once, counted once);
kill -9 of a worker process in the middle (its partitions taken over, nothing lost); SIGTERM in the
middle (what is in hand finishes, or is handed back to pending at once; a second signal hands back at
once); the supervisor's stop; the command's bad inputs; ``partarchive workers``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from codec import Status
from layers import ActiveLayer, ArchiveLayer, KeySchema
from tests.helpers import cli_env, run_cli, stop_process, wait_for

pytestmark = pytest.mark.chaos  # real processes, signals and kill -9

ROOT = Path(__file__).resolve().parent.parent
FAST = {"PARTARCHIVE_WORKER_HEARTBEAT_S": "0.5"}


def start_worker(url: str, namespace: str, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    """``partarchive worker`` as a process, from the repository's root (where `tests.runtime_jobs` is), in a
    process group of its own (its children's too, as a terminal's job is)."""
    return subprocess.Popen(
        [sys.executable, "-m", "archiver", "worker", *args],
        env=cli_env(url, namespace, **(FAST | extra)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def queued(client: redis.Redis, keys: KeySchema) -> Counter[int]:
    """How often each partition is in the archive queue."""
    return Counter(orjson.loads(f[b"p"])["partition_id"] for _, f in client.xrange(keys.queue))


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.parametrize("function", ["tests.runtime_jobs:process", "tests.runtime_jobs:aprocess"])
@pytest.mark.parametrize("where", ["real", "cluster"])
def test_four_processes_drain_ten_thousand_partitions(
    request: pytest.FixtureRequest, namespace: str, where: str, function: str
) -> None:
    client: redis.Redis = request.getfixturevalue(f"{where}_redis")
    cluster = where == "cluster"
    url = request.getfixturevalue("local_cluster").url if cluster else request.getfixturevalue("engine_url")
    config = Config(namespace=namespace, cluster=cluster)
    sdk = ActiveLayer(client, config.keys)
    sdk.create_partitions(1, 100_000, 10)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "archiver", "worker", function, "--processes", "4", "--window", "8", "--until-empty",
         *(["--cluster"] if cluster else [])],
        env=cli_env(url, namespace, **FAST), cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - began
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert took < 60
    counts = queued(client, config.keys)
    assert len(counts) == 10_000 and set(counts.values()) == {1}  # each completed once
    assert sdk.counts() == {"pending": 0, "claimed": 0, "running": 0, "failed": 0}
    assert sdk.presence() == []  # every process left
    daemon = ArchiverDaemon(client, config, consumer="drain")
    drain(daemon)
    archive = ArchiveLayer(client, config.keys)
    assert archive.archived_total() == 10_000  # archived once
    assert int(client.hget(config.keys.stats_global, "completed") or 0) == 10_000  # counted once
    assert int(client.bitcount(config.keys.index)) == 10_000


def on_engine(request: pytest.FixtureRequest, where: str) -> tuple[redis.Redis, str, tuple[str, ...]]:
    """The client, the URL and the connection flags of the real engine or the local cluster."""
    if where == "cluster":
        return request.getfixturevalue("cluster_redis"), request.getfixturevalue("local_cluster").url, ("--cluster",)
    return request.getfixturevalue("real_redis"), request.getfixturevalue("engine_url"), ()


@pytest.mark.parametrize("function", ["tests.runtime_jobs:process", "tests.runtime_jobs:aprocess"])
@pytest.mark.parametrize("where", ["real", "cluster"])
def test_kill_9_of_a_worker_process_loses_nothing(
    request: pytest.FixtureRequest, namespace: str, where: str, function: str
) -> None:
    client, url, flags = on_engine(request, where)
    keys = Config(namespace=namespace, cluster=where == "cluster").keys
    sdk = ActiveLayer(client, keys)
    sdk.create_partitions(1, 20_000, 10)
    supervisor = start_worker(url, namespace, function, "--processes", "2", "--window", "4", "--lease", "2",
                              "--until-empty", *flags, RUNTIME_JOB_SLEEP_S="0.005")  # fmt: skip
    try:
        wait_for(lambda: len(sdk.presence()) == 2 and client.xlen(keys.queue) >= 300, 60, "both workers at work")
        victim = sdk.presence()[0]
        assert victim.pid in children(supervisor.pid)
        os.kill(victim.pid, signal.SIGKILL)
        held = [p.partition_id for p in sdk.all_active() if p.worker_id == victim.worker_id]
        assert held, "the killed worker held nothing"
        _, err = supervisor.communicate(timeout=120)  # the supervisor restarts it; they drain what is left
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert supervisor.returncode == 0, err.decode()[-2000:]
    counts = queued(client, keys)
    assert len(counts) == 2000 and set(counts.values()) == {1}  # nothing lost, nothing twice
    by_whom = {orjson.loads(f[b"p"])["partition_id"]: orjson.loads(f[b"p"])["worker_id"]
               for _, f in client.xrange(keys.queue)}  # fmt: skip
    assert all(by_whom[pid] != victim.worker_id for pid in held)  # taken over by others


@pytest.mark.parametrize("function", ["tests.runtime_jobs:until_lost", "tests.runtime_jobs:auntil_lost"])
@pytest.mark.parametrize("where", ["real", "cluster"])
def test_sigterm_hands_back_what_is_unfinished_at_once(
    request: pytest.FixtureRequest, namespace: str, where: str, function: str
) -> None:
    client, url, flags = on_engine(request, where)
    sdk = ActiveLayer(client, Config(namespace=namespace, cluster=where == "cluster").keys)
    sdk.create_partitions(1, 100, 10)
    worker = start_worker(url, namespace, function, "--window", "4", "--drain-timeout", "1", "--lease", "300",
                          *flags)  # fmt: skip
    try:
        wait_for(lambda: sdk.counts()["running"] == 4, 30, "four partitions in hand")
        began = time.monotonic()
        err = stop_process(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert time.monotonic() - began < 8  # the drain timeout, then the hand-back: not the lease's 300 s
    assert sdk.counts() == {"pending": 10, "claimed": 0, "running": 0, "failed": 0}
    assert client.xlen(sdk.keys.queue) == 0 and sdk.presence() == []
    assert "unfinished partitions handed back to pending" in err


def test_a_second_sigterm_hands_back_at_once(real_redis: redis.Redis, engine_url: str, namespace: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    worker = start_worker(engine_url, namespace, "tests.runtime_jobs:until_lost", "--window", "3", "--drain-timeout",
                          "60")  # fmt: skip
    try:
        wait_for(lambda: sdk.counts()["running"] == 3, 30, "three partitions in hand")
        worker.send_signal(signal.SIGTERM)
        time.sleep(1.5)  # draining, it would wait 60 s for what it holds (a signal within 1 s is the same stop)
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert time.monotonic() - began < 10 and worker.returncode == 0, err.decode()[-2000:]
    assert sdk.counts()["pending"] == 10 and real_redis.xlen(sdk.keys.queue) == 0


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stop_lets_the_partitions_in_hand_finish(
    real_redis: redis.Redis, engine_url: str, namespace: str, how: str
) -> None:
    """SIGTERM to the supervisor, or Ctrl-C (SIGINT to the whole group: each child has it twice, from the
    terminal and from the supervisor, which is one stop, not two): the children drain."""
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 10_000, 10)
    supervisor = start_worker(engine_url, namespace, "tests.runtime_jobs:process", "--processes", "2", "--window",
                              "3", "--drain-timeout", "20", RUNTIME_JOB_SLEEP_S="0.3")  # fmt: skip
    try:
        wait_for(lambda: real_redis.xlen(sdk.keys.queue) >= 6, 30, "work under way")
        if how == "ctrl-c":
            os.killpg(supervisor.pid, signal.SIGINT)
            _, raw = supervisor.communicate(timeout=40)
            err = raw.decode(errors="replace")
        else:
            err = stop_process(supervisor)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert supervisor.returncode == 0 and "Traceback" not in err, err[-2000:]
    counts = queued(real_redis, sdk.keys)
    assert set(counts.values()) == {1}  # nothing completed twice
    left = sdk.counts()
    assert left["claimed"] == left["running"] == 0 and left["pending"] == 1000 - len(counts)  # the rest pending
    assert "handed back" not in err  # what was in hand finished within the drain
    assert all(p.status is Status.PENDING and p.worker_id == "" for p in sdk.all_active())


def test_bad_inputs_are_one_line_and_write_nothing(real_redis: redis.Redis, engine_url: str, namespace: str) -> None:
    for args, says in (
        (["tests.no_such_module:process"], "cannot import module 'tests.no_such_module'"),
        (["tests.runtime_jobs:nothing"], "has no 'nothing'"),
        (["tests.runtime_jobs:NOT_A_FUNCTION"], "is not callable"),
        (["tests.runtime_jobs"], "MODULE:FUNCTION"),
        (["tests.runtime_jobs:process", "--window", "0"], "--window must be"),
        (["tests.runtime_jobs:process", "--lease", "-5"], "--lease must be a positive"),
        (["tests.runtime_jobs:process", "--heartbeat", "0"], "--heartbeat must be a positive"),
        (["tests.runtime_jobs:process", "--drain-timeout", "-1"], "--drain-timeout must be a positive"),
        (["tests.runtime_jobs:process", "--max-attempts", "0"], "--max-attempts must be"),
        (["tests.runtime_jobs:process", "--processes", "0"], "--processes must be"),
        (["tests.runtime_jobs:process", "--window", "two"], "invalid int value"),
    ):
        done = subprocess.run([sys.executable, "-m", "archiver", "worker", *args], env=cli_env(engine_url, namespace),
                              cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not list(real_redis.scan_iter(match=f"*{namespace}*"))  # nothing written


def test_workers_lists_the_live_processes(real_redis: redis.Redis, engine_url: str, namespace: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    worker = start_worker(engine_url, namespace, "tests.runtime_jobs:until_lost", "--window", "2", "--worker-id",
                          "etl", "--drain-timeout", "1")  # fmt: skip
    try:
        wait_for(lambda: sdk.counts()["running"] == 2, 30, "two partitions in hand")
        wait_for(lambda: any(w.in_hand == 2 for w in sdk.presence()), 10, "a beat that counted them")
        listed = run_cli(engine_url, namespace, "workers", "--json")
        table = run_cli(engine_url, namespace, "workers")
        status = run_cli(engine_url, namespace, "status", "--json")
    finally:
        stop_process(worker)
    [entry] = orjson.loads(listed.stdout)
    assert entry["worker_id"].startswith("etl-") and entry["pid"] == worker.pid and entry["in_hand"] == 2
    assert entry["window"] == 2 and entry["worker_id"] in table.stdout
    assert orjson.loads(status.stdout)["workers"] == {"alive": 1, "in_hand": 2, "retries_waiting": 0}
    assert "no live worker" in run_cli(engine_url, namespace, "workers").stdout

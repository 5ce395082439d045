"""Archiver processes: one process serving several namespaces, and ``run --processes N`` (a
supervisor that restarts a crashed child and stops them all cleanly)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import redis

from layers import ArchiveLayer, KeySchema
from layers.control.liveness import Liveness
from tests.conftest import delete_namespace
from tests.helpers import complete_partitions, run_cli, start_archiver, stop_process, wait_for


def test_one_process_serves_several_namespaces_fairly(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    names = [f"{namespace}{i}" for i in range(3)]
    try:
        for name in names:
            complete_partitions(real_redis, name, 1500)
        archives = [ArchiveLayer(real_redis, KeySchema(name)) for name in names]
        proc = start_archiver(  # a commit per page read, so progress shows round by round
            engine_url, names[0], "--namespace", ",".join(names), "--read-count", "100",
            PARTARCHIVE_STATS_FLUSH_COUNT="100",
        )  # fmt: skip
        try:
            wait_for(lambda: sum(a.archived_total() for a in archives) >= 900, 60, "the first rounds")
            first = [a.archived_total() for a in archives]
            assert min(first) > 0, f"a namespace waited while the others were served: {first}"
            wait_for(lambda: all(a.archived_total() == 1500 for a in archives), 90, "every namespace archived")
            alive = [len(Liveness(real_redis, KeySchema(name)).archivers()) for name in names]
            assert alive == [1, 1, 1]
        finally:
            err = stop_process(proc)
        assert proc.returncode == 0 and "Traceback" not in err
        assert all(real_redis.xlen(KeySchema(name).queue) == 0 for name in names)
        assert [len(Liveness(real_redis, KeySchema(name)).archivers()) for name in names] == [0, 0, 0]
    finally:
        for name in names:
            delete_namespace(real_redis, name)


def test_several_namespaces_are_refused_where_one_is_meant(engine_url: str, namespace: str) -> None:
    for args in (["status", "--namespace", "a,b"], ["run", "--namespace", "a,a"], ["run", "--namespace", "a,b c"]):
        done = run_cli(engine_url, namespace, *args)
        assert done.returncode == 2 or done.returncode == 1
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.chaos
def test_processes_restarts_a_crashed_child_and_stops_all(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    complete_partitions(real_redis, namespace, 300)
    keys = KeySchema(namespace)
    supervisor = start_archiver(engine_url, namespace, "--processes", "2", PARTARCHIVE_HEALTH_INTERVAL_S="0.2")
    liveness = Liveness(real_redis, keys)
    try:
        wait_for(lambda: len(liveness.archivers()) == 2, 60, "two archiver processes alive")
        wait_for(lambda: ArchiveLayer(real_redis, keys).archived_total() == 300, 60, "the work archived")
        first = _children(supervisor.pid)
        assert len(first) == 2
        assert all(_cmdline(pid) == _cmdline(supervisor.pid) for pid in first)  # forked, not a new interpreter
        os.kill(first[0], signal.SIGKILL)
        wait_for(lambda: first[0] not in _children(supervisor.pid) and len(_children(supervisor.pid)) == 2, 30,
                 "the crashed child restarted")  # fmt: skip
        restarted = next(pid for pid in _children(supervisor.pid) if pid not in first)
        wait_for(lambda: restarted in {h.pid for h in liveness.archivers()}, 60, "the restarted child alive")
        complete_partitions_from = ArchiveLayer(real_redis, keys)
        children = _children(supervisor.pid)
    finally:
        started = time.monotonic()
        err = stop_process(supervisor)
    assert supervisor.returncode == 0, err
    assert time.monotonic() - started < 20
    assert "Traceback" not in err
    assert not any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in children)
    assert complete_partitions_from.archived_total() == 300
    # the stopped children left the live set; the killed one could not (it goes stale instead)
    assert {h.pid for h in liveness.archivers()} <= {first[0]}


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False

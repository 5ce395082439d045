"""Crash safety with real processes: an archiver killed with SIGKILL while holding entries."""

from __future__ import annotations

import signal

import pytest
import redis

from layers import ArchiveQueue, KeySchema
from tests.helpers import complete_partitions, kill_archiver_when, start_archiver, wait_for

pytestmark = pytest.mark.chaos


def test_replica_takes_over_entries_of_a_killed_archiver(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    pids = complete_partitions(real_redis, namespace, 300)
    queue = ArchiveQueue(real_redis, keys)
    kill_archiver_when(
        engine_url,
        namespace,
        "victim",
        lambda: queue.state().pending >= 100,  # the page in hand (and the next, read ahead)
        "entries delivered to the victim",
        "--read-count",
        "100",
        pauses={"after_read": 60},
    )
    assert real_redis.hlen(keys.completed) == 0

    survivor = start_archiver(engine_url, namespace, "--consumer", "survivor", "--claim-idle-ms", "500")
    try:
        wait_for(
            lambda: real_redis.hlen(keys.completed) == 300 and real_redis.xlen(keys.queue) == 0,
            what="every partition archived",
        )
        state = queue.state()
        assert state.pending == 0 and state.dead_letters == 0
        assert real_redis.bitcount(keys.index) == 300
        assert sorted(int(k) for k in real_redis.hkeys(keys.completed)) == pids
    finally:
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=15)
    assert survivor.returncode == 0
    assert b"took over idle entries" in err


def test_restart_under_the_same_name_rereads_its_own_pending(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 50)
    queue = ArchiveQueue(real_redis, keys)
    kill_archiver_when(
        engine_url,
        namespace,
        "same",
        lambda: queue.state().pending == 50,
        "entries delivered",
        pauses={"after_read": 60},
    )
    second = start_archiver(engine_url, namespace, "--consumer", "same")
    try:
        wait_for(
            lambda: real_redis.hlen(keys.completed) == 50 and queue.state().pending == 0,
            what="own pending re-read at start",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=15)
    assert real_redis.xlen(keys.queue) == 0


def test_a_stop_ends_an_injected_pause_at_once(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    """The crash tests' pause (`tests.faults`) waits on the daemon's stop: SIGTERM during a ten-minute
    pause drains at once, finishing the page in hand, well before the drain deadline."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 20)
    queue = ArchiveQueue(real_redis, keys)
    proc = start_archiver(
        engine_url, namespace, "--consumer", "paused", pauses={"after_read": 600}, PARTARCHIVE_DRAIN_TIMEOUT_S="300"
    )
    try:
        wait_for(lambda: queue.state().pending == 20, what="a page read, then the pause")
        assert real_redis.hlen(keys.completed) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"archiver stopped" in err
    assert real_redis.hlen(keys.completed) == 20 and queue.state().pending == 0

"""`partarchive run` started while Redis refuses (at maxmemory with noeviction, or not up yet)
waits for it, as a running archiver does, instead of exiting: a supervisor restarting archivers
during an incident must not lose them. Real processes on a server of the test's own (CONFIG SET
and a stopped server would disturb a shared one)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from layers import ActiveLayer, ArchiveLayer, KeySchema
from tests.chaos import Server
from tests.helpers import wait_for

pytestmark = pytest.mark.engine

NS = "startwait"
NOT_READY = "redis not ready at start, retrying"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    own = Server(tmp_path, shutil.which("redis-server") if os.environ.get("REDIS_URL") else None)
    try:
        yield own
    finally:
        own.kill()


def _archiver(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, REDIS_URL=url, PARTARCHIVE_NAMESPACE=NS, PARTARCHIVE_BLOCK_MS="100",
               PARTARCHIVE_STATS_FLUSH_INTERVAL_S="0.2")  # fmt: skip
    command = [sys.executable, "-m", "archiver", "run"]
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _complete(client: redis.Redis, n: int) -> None:
    active = ActiveLayer(client, NS)
    for _ in range(n):
        part = active.claim("w1")
        assert part is not None
        active.complete(part.partition_id, "w1")


def _archived_soon(client: redis.Redis, n: int) -> int:
    archive = ArchiveLayer(client, KeySchema(NS))
    deadline = time.monotonic() + 30
    while archive.archived_total() < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return archive.archived_total()


def _waited_twice(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the archiver has said twice that Redis is not ready (so it waited and tried again), or exited."""
    wait_for(lambda: log.read_text().count(NOT_READY) >= 2 or proc.poll() is not None, what="two refused starts")


def _stopped(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def test_started_at_maxmemory_it_waits_then_archives(server: Server, tmp_path: Path) -> None:
    server.start()
    client = redis.Redis.from_url(server.url)
    ActiveLayer(client, NS).create_partitions(1, 200, 10)
    client.config_set("maxmemory", 1 << 20)  # below what the server holds: writes refused
    log = tmp_path / "archiver.log"
    proc = _archiver(server.url, log)
    _waited_twice(proc, log)
    assert proc.poll() is None, log.read_text()
    assert "maxmemory" in log.read_text()
    client.config_set("maxmemory", 0)
    _complete(client, 20)
    assert _archived_soon(client, 20) == 20
    assert _stopped(proc) == 0


def test_started_before_the_server_it_waits_then_archives(server: Server, tmp_path: Path) -> None:
    log = tmp_path / "archiver.log"
    proc = _archiver(server.url, log)
    _waited_twice(proc, log)
    assert proc.poll() is None, log.read_text()
    server.start()
    client = redis.Redis.from_url(server.url)
    ActiveLayer(client, NS).create_partitions(1, 200, 10)
    _complete(client, 20)
    assert _archived_soon(client, 20) == 20
    assert _stopped(proc) == 0


def test_refused_writes_are_one_warning_while_they_last_and_a_line_when_they_end(server: Server) -> None:
    """min-replicas-to-write with no replica: every write is refused with NOREPLICAS. The archiver
    says so once, with the reason, not a stack trace a round, and says when it is over."""
    from structlog.testing import capture_logs

    from archiver import ArchiverDaemon, Config

    server.start()
    client = redis.Redis.from_url(server.url)
    ActiveLayer(client, NS).create_partitions(1, 200, 10)
    _complete(client, 20)
    daemon = ArchiverDaemon(client, Config(namespace=NS, block_ms=10), consumer="a")
    daemon.queue.ensure_group()
    client.config_set("min-replicas-to-write", 1)
    with capture_logs() as logs:
        for _ in range(4):
            daemon._failures = 0  # keep the backoff short: each round waits at most half a second
            assert daemon.round_with_retry() == 0
        client.config_set("min-replicas-to-write", 0)
        while daemon.round_with_retry():
            pass
    daemon.finish()
    lines = [(e["log_level"], e["event"], e.get("reason", "")) for e in logs]
    refused = [line for line in lines if line[0] == "warning"]
    assert len(refused) == 1 and refused[0][2].startswith("NOREPLICAS"), lines
    assert not [e for e in logs if e["log_level"] == "error" or "exc_info" in e], lines
    again = [e for e in logs if e["event"] == "redis accepts writes again"]
    assert len(again) == 1 and again[0]["rounds_refused"] == 4, lines
    assert ArchiveLayer(client, KeySchema(NS)).archived_total() == 20

"""Shared helpers for tests that drive real processes."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from archiver.engine.local_cluster import Node as LocalNode
from codec import ArchivedPartition
from layers import ActiveLayer, ArchiveLayer, KeySchema
from layers.archive.commit import CommitResult, Uncommitted
from stats.rollup import committer as archive_committer

if TYPE_CHECKING:
    import httpx


def commands_sent(monkeypatch: Any) -> list[str]:
    """The names of the commands every connection of this process sends from now on, blocking or
    asyncio, through a client's pool or on connections kept apart (the asyncio `ReadLane`)."""
    sent: list[str] = []

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        def send_packed_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            packed = command if isinstance(command, bytes) else b"".join(command)
            sent.extend(name.decode().upper() for name in _COMMAND_NAME.findall(packed))
            return original(conn, command, *args, **kwargs)

        return send_packed_command

    for cls in (redis.connection.AbstractConnection, redis.asyncio.connection.AbstractConnection):
        monkeypatch.setattr(cls, "send_packed_command", counting(cls.send_packed_command))
    return sent


#: The name of each command in a packed buffer (RESP arrays of bulk strings, as redis-py packs them).
_COMMAND_NAME = re.compile(rb"(?:^|\r\n)\*\d+\r\n\$\d+\r\n([A-Za-z_]+)\r\n")


def complete_partitions(client: redis.Redis, namespace: str, count: int, worker: str = "w") -> list[int]:
    layer = ActiveLayer(client, namespace)
    pids = list(layer.create_partitions(1, count * 1000, 1000))
    for _pid in pids:
        part = layer.claim(worker)
        assert part is not None
        layer.complete(part.partition_id, worker)
    return pids


def archive_now(layer: ArchiveLayer, entries: list[tuple[str, ArchivedPartition]]) -> CommitResult:
    """Write the entries' detail and commit them (index bits, acknowledgement) through the
    archiver's commit, then drop the statistics it wrote: for tests of the storage alone, where an
    expired partition has no rollup to fall back on."""
    layer.write_detail([part for _, part in entries])
    result = archive_committer(layer).commit(Uncommitted.of(entries))
    stats_keys = list(layer.redis.scan_iter(match=layer.keys.stats_global.replace("global", "*")))
    if stats_keys:
        layer.redis.delete(*stats_keys)
    return result


def cli_env(url: str, namespace: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"REDIS_URL": url, "PARTARCHIVE_NAMESPACE": namespace}, **extra)
    return env


#: For tests that kill an archiver with SIGKILL: the next one takes over its maintenance lock and its
#: pending entries in seconds instead of the production defaults' 30 s (lock) and 60 s (idle entries).
AFTER_A_KILL = {"PARTARCHIVE_MAINTENANCE_LOCK_TTL_S": "3", "PARTARCHIVE_CLAIM_IDLE_MS": "2000"}


def start_archiver(
    url: str, namespace: str, *args: str, pauses: dict[str, float] | None = None, **extra: str
) -> subprocess.Popen[bytes]:
    """``partarchive run`` as a process; with ``pauses``, through `tests.faults` (pausing at its seams)."""
    from tests.faults import pause_args

    extra.setdefault("PARTARCHIVE_STATS_FLUSH_INTERVAL_S", "0.5")
    program = ["tests.faults", *pause_args(pauses)] if pauses else ["archiver"]
    return subprocess.Popen(
        [sys.executable, "-m", *program, "run", *args],
        env=cli_env(url, namespace, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def kill_archiver_when(
    url: str,
    namespace: str,
    consumer: str,
    ready: Callable[[], bool],
    what: str,
    *args: str,
    pauses: dict[str, float] | None = None,
    **extra: str,
) -> None:
    """Start an archiver as ``consumer``, wait until ``ready()``, then SIGKILL it (no clean-up runs)."""
    victim = start_archiver(url, namespace, "--consumer", consumer, *args, pauses=pauses, **extra)
    try:
        wait_for(ready, what=what)
    finally:
        victim.kill()
        victim.wait(10)


def run_cli(url: str, namespace: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "archiver", *args],
        env=cli_env(url, namespace, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@functools.cache
def _local_client() -> httpx.Client:
    import httpx

    return httpx.Client(timeout=5, limits=httpx.Limits(max_keepalive_connections=0))


def http_get(url: str, timeout: float = 5) -> httpx.Response:
    """``httpx.get`` for the plain-HTTP servers the tests start and poll: one client for the process,
    as ``httpx.get`` builds one a call, TLS context included (~20 ms of CPU each); no connection is
    kept alive, so each request has a connection of its own, as with ``httpx.get``."""
    return _local_client().get(url, timeout=timeout)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(url: str, namespace: str, port: int, *args: str) -> subprocess.Popen[bytes]:
    """`partarchive serve` on 127.0.0.1:port, returned once /healthz answers."""
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "archiver", "serve", "--port", str(port), *args],
        env=cli_env(url, namespace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.communicate()[1].decode()}")
        try:
            return http_get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30, what="HTTP server")
    return proc


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 40) -> str:
    """SIGTERM, wait for a clean exit (killed and an error after ``timeout``); returns stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return err.decode(errors="replace")


def scraped(client: redis.Redis, keys: KeySchema) -> dict[str, float]:
    """A namespace's gauges as one scrape reads them (those without labels of their own)."""
    from archiver.metrics import LayerStateCollector

    families = LayerStateCollector(ArchiveLayer(client, keys)).collect()
    return {s.name: s.value for f in families for s in f.samples if set(s.labels) == {"namespace"}}


class RouterWatch:
    """Asks the router about every partition, over and over, and notes any it cannot answer for;
    with ``awaited``, the asyncio router on the client's asyncio twin (its lookups on a `ReadLane`)."""

    def __init__(self, client: redis.Redis, namespace: str, pids: range, *, awaited: bool = False) -> None:
        from archiver.router import QueryRouter

        self.client = client
        self.namespace = namespace
        self.router = QueryRouter(client, namespace)
        self.pids = pids
        self.lost: list[tuple[int, str]] = []
        self.passes = 0
        self.lane_kept = 0  # connections the asyncio router's lane had taken when it stopped
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch_awaited if awaited else self._watch)

    def _watch(self) -> None:
        while not self.stop.is_set():
            for pid in self.pids:
                self._note(pid, self.router.get(pid))
            self.passes += 1

    def _watch_awaited(self) -> None:
        import asyncio

        from archiver import AsyncQueryRouter
        from archiver.engine import async_twin
        from layers.plumbing.scripts import AsyncScripts

        async def watch() -> None:
            twin = async_twin(self.client)
            router = AsyncQueryRouter(twin, self.namespace)
            try:
                while not self.stop.is_set():
                    for pid in self.pids:
                        self._note(pid, await router.get(pid))
                    self.passes += 1
            finally:
                lane = AsyncScripts.of(twin).lane
                self.lane_kept = 0 if lane is None else lane.kept
                await twin.aclose()

        asyncio.run(watch())

    def _note(self, pid: int, answer: Any) -> None:
        from archiver.router import Source

        if not answer.found or (answer.degraded and answer.source is not Source.QUEUE):
            self.lost.append((pid, answer.source.value))

    def __enter__(self) -> RouterWatch:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def refusals(*nodes: LocalNode) -> int:
    """The commands these cluster nodes refused or sent on because of a slot move (TRYAGAIN, ASK)."""
    total = 0
    for node in nodes:
        with contextlib.closing(node.client) as client:
            stats: Any = client.info("errorstats")
        total += sum(int(stats.get(f"errorstat_{code}", {}).get("count", 0)) for code in ("TRYAGAIN", "ASK"))
    return total


RETRIES = "partarchive_slot_move_retries_total"


def retries(calls: tuple[str, ...], port: int | None = None) -> float:
    """``partarchive_slot_move_retries_total`` of these calls: this process's, or those a supervisor
    serves on ``port`` (its children's, added up)."""
    if port is None:
        families = REGISTRY.collect()
        return sum(s.value for f in families for s in f.samples if s.name == RETRIES and s.labels.get("call") in calls)
    import httpx

    try:
        text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    families = text_string_to_metric_families(text)
    return sum(s.value for f in families for s in f.samples if s.name == RETRIES and s.labels.get("call") in calls)

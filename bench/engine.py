"""The engine a benchmark runs on: ``$REDIS_URL`` when set, else a private valkey-server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from archiver.engine import open_engine
from layers import KeySchema


@contextmanager
def bench_engine_url() -> Iterator[tuple[redis.Redis, str, str]]:
    """Like `bench_engine`, and the engine's URL for other processes."""
    with open_engine(os.environ.get("REDIS_URL") or None) as engine, _described(engine.client, engine) as name:
        yield engine.client, name, engine.url


@contextmanager
def _described(client: redis.Redis, engine: object) -> Iterator[str]:
    info: dict[str, str] = client.info("server")  # type: ignore[assignment]
    memory: dict[str, str] = client.info("memory")  # type: ignore[assignment]
    name = f"valkey {info['valkey_version']}" if "valkey_version" in info else f"redis {info.get('redis_version')}"
    where = "embedded" if getattr(engine, "embedded", False) else getattr(engine, "url", "?")
    yield f"{name} ({where}, {memory.get('mem_allocator', '?')})"


@contextmanager
def bench_engine() -> Iterator[tuple[redis.Redis, str]]:
    with bench_engine_url() as (client, name, _url):
        yield client, name


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one round trip per command or pipeline (redis-py
    sends a pipeline's commands in one write and then reads their replies)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def counting_client(url: str) -> redis.Redis:
    """A client of ``url`` whose round trips add up in `CountingConnection.sent`."""
    return redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, connection_class=CountingConnection))


def redis_cpu_us(client: redis.Redis) -> float:
    """The server's CPU time so far (user + system, all its threads), in microseconds. Unlike
    ``INFO commandstats``, which counts a script's commands twice (in EVALSHA and in themselves)
    and leaves out reading and writing sockets, this is what the server spent."""
    cpu: dict[str, float] = client.info("cpu")  # type: ignore[assignment]
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[index]


def settle(client: redis.Redis, timeout_s: float = 60.0) -> None:
    """Wait until the server has no lazily freed objects left, so used_memory is comparable."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        memory: dict[str, int] = client.info("memory")  # type: ignore[assignment]
        if int(memory.get("lazyfree_pending_objects", 0)) == 0:
            return
        time.sleep(0.1)


def drop(client: redis.Redis, namespace: str) -> None:
    """Delete the namespace's keys synchronously (DEL, not UNLINK) and wait for lazy frees."""
    for cluster in (False, True):
        for pattern in KeySchema(namespace, cluster).patterns():
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    client.delete(*batch)
                    batch.clear()
            if batch:
                client.delete(*batch)
    settle(client)

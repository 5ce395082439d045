"""Connect to the Redis named by a URL, with passwords kept out of every message."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool
from redis.utils import HIREDIS_AVAILABLE

from archiver.config import DEFAULT_REDIS_URL, Config
from codec.errors import PartArchiveError
from codec.redact import redact_url
from layers.plumbing.slot_moves import follow_ask_to_new_masters
from layers.plumbing.steps import AsyncClient


class EngineError(PartArchiveError):
    """The Redis server cannot be reached or the embedded engine cannot start."""


class EngineUnreachable(EngineError):
    """The server did not answer, or answered that it is loading its data: it may yet (a daemon
    started with it waits; a one-shot command says so and exits)."""


def engine_error_for(exc: BaseException) -> type[EngineError]:
    """`EngineUnreachable` for a failure that may pass (no answer, a timeout, loading), else `EngineError`."""
    return EngineUnreachable if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)) else EngineError


@dataclass(frozen=True, slots=True)
class Engine:
    client: redis.Redis
    url: str
    embedded: bool


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
        raise engine_error_for(exc)(f"cannot reach {what} at {safe}: {_redacted(str(exc), url, password)}") from None
    return client


#: The connections of an asyncio client's pool (redis-py's bound for a pool that does not wait) ...
POOL_CONNECTIONS = 100
#: ... and how long a command waits for one when every one is in use: the HTTP API's lookups beyond
#: that many at once wait their turn rather than fail as if Redis were down.
POOL_WAIT_S = 5.0
#: The settings of such a pool (`redis.asyncio.BlockingConnectionPool`).
WAITING_POOL: dict[str, Any] = {"max_connections": POOL_CONNECTIONS, "timeout": POOL_WAIT_S}


def async_connect(url: str, *, cluster: bool = False, password: str | None = None) -> AsyncClient:
    """The asyncio client `connect` gives for ``url``, with the same settings; it connects on first
    use, in the event loop that uses it (so nothing is sent here)."""
    try:
        if cluster:
            retry = AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
            cluster_client = redis.asyncio.RedisCluster.from_url(
                url, socket_connect_timeout=5, socket_timeout=10, retry=retry, password=password
            )
            follow_ask_to_new_masters(cluster_client)  # as `connect`
            return cluster_client
        packed = _PACKED.get(urlsplit(url).scheme.lower())
        options: dict[str, Any] = {} if packed is None else {"connection_class": packed}
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, socket_connect_timeout=5, health_check_interval=30, password=password, **WAITING_POOL, **options
        )
        return redis.asyncio.Redis.from_pool(pool)
    except ValueError as exc:
        raise EngineError(f"invalid Redis URL {redact_url(url)!r}: {_redacted(str(exc), url, password)}") from None


class _HiredisPacking:
    """Commands packed by hiredis, as redis-py's blocking connections pack them when it is installed
    (its asyncio ones pack in Python: a third of a script lookup's client time, its keys being many)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        return self._packer.pack(*args)  # type: ignore[no-any-return]


class _PackedConnection(_HiredisPacking, redis.asyncio.Connection):
    pass


class _PackedSSLConnection(_HiredisPacking, redis.asyncio.SSLConnection):
    pass


_PACKED = {"redis": _PackedConnection, "rediss": _PackedSSLConnection} if HIREDIS_AVAILABLE else {}


#: Connection settings that do not carry over to an asyncio client: objects of the synchronous
#: client (its retry policy, connect hook, event dispatcher, maintenance handlers).
_NOT_PORTABLE = {"retry", "redis_connect_func", "event_dispatcher", "connection_pool"}


def async_twin(client: redis.Redis) -> AsyncClient:
    """An asyncio client of the server or cluster that ``client`` talks to, with its settings
    (address, database, credentials, TLS, timeouts, decoding, protocol). For a caller that holds
    a blocking client only (`archiver.web.create_app`); a Sentinel master's client becomes one of
    `redis.asyncio.sentinel` with the same sentinels."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()
        kwargs = _accepted(redis.asyncio.RedisCluster, client.nodes_manager.connection_kwargs)
        retry = AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
        return redis.asyncio.RedisCluster(host=node.host, port=node.port, retry=retry, **kwargs)
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        return _sentinel_twin(pool)
    twins = {
        redis.Connection: redis.asyncio.Connection,
        redis.SSLConnection: redis.asyncio.SSLConnection,
        redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
    }
    connection_class = twins.get(pool.connection_class)
    if connection_class is None:
        raise ValueError(f"no asyncio twin for a client with {pool.connection_class.__name__} connections")
    kwargs = _accepted(connection_class, pool.connection_kwargs)
    twin_pool = redis.asyncio.BlockingConnectionPool(connection_class=connection_class, **WAITING_POOL, **kwargs)
    return redis.asyncio.Redis.from_pool(twin_pool)


def _sentinel_twin(pool: SentinelConnectionPool) -> AsyncClient:
    """The asyncio client of a Sentinel master: the same sentinels, master name, settings and
    failover window (`archiver.engine.sentinel.async_master_client`)."""
    from archiver.engine.sentinel import async_master_client

    manager = pool.sentinel_manager
    watchers = [s.connection_pool.connection_kwargs for s in manager.sentinels]
    hosts = [(kw["host"], kw["port"]) for kw in watchers]
    probe = _accepted(redis.asyncio.Connection, dict(manager.sentinel_kwargs))
    data = _accepted(redis.asyncio.Connection, dict(pool.connection_kwargs))
    window = getattr(pool.connection_kwargs.get("retry"), "window_s", None)
    return async_master_client(hosts, pool.service_name, probe, retry_s=window, **data)


def _accepted(target: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The settings in ``kwargs`` that ``target`` (or a base class it hands them to) takes by name."""
    names = {
        name
        for cls in target.__mro__
        if "__init__" in vars(cls)
        for name in inspect.signature(vars(cls)["__init__"]).parameters
    }
    return {k: v for k, v in kwargs.items() if k in names and k not in _NOT_PORTABLE}


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


def async_client_for(config: Config) -> AsyncClient:
    """`client_for` on asyncio (not connected yet: see `async_connect`): through the sentinels with
    ``sentinel``."""
    if config.sentinel:
        from archiver.engine.sentinel import async_sentinel_client

        return async_sentinel_client(config)
    return async_connect(config.redis_url or DEFAULT_REDIS_URL, cluster=config.cluster, password=config.redis_password)

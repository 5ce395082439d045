"""Connect to the Redis named by a URL, with passwords kept out of every message."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterPipeline
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import MaxConnectionsError, RedisClusterException
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from archiver.config import DEFAULT_POOL_CONNECTIONS
from codec.errors import PartArchiveError
from codec.redact import redact_url
from layers.plumbing.resharding import follow_ask_to_new_masters
from layers.plumbing.runners import AsyncClient


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


#: How long a command of an asyncio client waits for a connection when every one of its pool is in
#: use (``Config.redis_pool_connections`` of them, 100 by default, redis-py's bound for a pool that
#: does not wait): the HTTP API's lookups beyond that many at once wait their turn rather than fail
#: as if Redis were down. One rule for every asyncio client: a server's, a Sentinel master's, a
#: cluster's (`WaitingCluster`).
POOL_WAIT_S = 5.0


def waiting_pool(connections: int = DEFAULT_POOL_CONNECTIONS) -> dict[str, Any]:
    """The settings of such a pool (`redis.asyncio.BlockingConnectionPool`)."""
    return {"max_connections": connections, "timeout": POOL_WAIT_S}


class WaitingCluster(redis.asyncio.RedisCluster):
    """redis-py's asyncio cluster client, whose nodes refuse a command at once when their
    ``max_connections`` are in use (`MaxConnectionsError`), holding its commands and pipelines to
    that many at once: one more waits up to `POOL_WAIT_S` for its turn, as a
    `redis.asyncio.BlockingConnectionPool` makes the other asyncio clients' commands wait."""

    def __init__(self, *args: Any, max_connections: int = DEFAULT_POOL_CONNECTIONS, **kwargs: Any) -> None:
        kwargs["max_connections"] = max_connections
        super().__init__(*args, **kwargs)
        self._turns = asyncio.Semaphore(max_connections)

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(POOL_WAIT_S):
                await self._turns.acquire()
        except TimeoutError:
            raise MaxConnectionsError(f"no connection free within {POOL_WAIT_S:g} s") from None
        try:
            yield
        finally:
            self._turns.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.turn():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)
        return _WaitingPipeline(self, transaction)  # type: ignore[abstract]


class _WaitingPipeline(ClusterPipeline):
    """A `WaitingCluster`'s pipeline: run in one of its turns."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client: WaitingCluster = self.cluster_client  # type: ignore[assignment]
        async with client.turn():
            return await super().execute(raise_on_error, allow_redirections)


def async_connect(
    url: str, *, cluster: bool = False, password: str | None = None, pool_connections: int = DEFAULT_POOL_CONNECTIONS
) -> AsyncClient:
    """The asyncio client `connect` gives for ``url``, with the same settings, its commands waiting
    for one of ``pool_connections`` connections (`waiting_pool`); it connects on first use, in the
    event loop that uses it (so nothing is sent here)."""
    try:
        if cluster:
            retry = AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
            cluster_client = WaitingCluster.from_url(
                url, socket_connect_timeout=5, socket_timeout=10, retry=retry, password=password,
                max_connections=pool_connections,
            )  # fmt: skip
            follow_ask_to_new_masters(cluster_client)  # as `connect`
            return cluster_client
        packed = _PACKED.get(urlsplit(url).scheme.lower())
        options: dict[str, Any] = {} if packed is None else {"connection_class": packed}
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, socket_connect_timeout=5, health_check_interval=30, password=password,
            **waiting_pool(pool_connections), **options,
        )  # fmt: skip
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


def server_twin(client: redis.Redis, pool_connections: int = DEFAULT_POOL_CONNECTIONS) -> AsyncClient:
    """An asyncio client of the server or cluster that ``client`` talks to, with its settings
    (address, database, credentials, TLS, timeouts, decoding, protocol), its commands waiting for
    one of ``pool_connections`` connections (`archiver.engine.clients.async_twin` for any client,
    a Sentinel master's too)."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()
        kwargs = accepted(redis.asyncio.RedisCluster, client.nodes_manager.connection_kwargs)
        kwargs.pop("max_connections", None)
        retry = AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10)
        return WaitingCluster(host=node.host, port=node.port, retry=retry, max_connections=pool_connections, **kwargs)
    pool = client.connection_pool
    twins = {
        redis.Connection: redis.asyncio.Connection,
        redis.SSLConnection: redis.asyncio.SSLConnection,
        redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
    }
    connection_class = twins.get(pool.connection_class)
    if connection_class is None:
        raise ValueError(f"no asyncio twin for a client with {pool.connection_class.__name__} connections")
    kwargs = accepted(connection_class, pool.connection_kwargs)
    twin_pool = redis.asyncio.BlockingConnectionPool(
        connection_class=connection_class, **waiting_pool(pool_connections), **kwargs
    )
    return redis.asyncio.Redis.from_pool(twin_pool)


def accepted(target: type, kwargs: dict[str, Any]) -> dict[str, Any]:
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

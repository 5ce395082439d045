"""Which client a command or the HTTP API uses: the configured server, Redis Cluster, or the primary
a Redis Sentinel setup names (`archiver.engine.connect`, `archiver.engine.sentinel`); and the asyncio
twin of a blocking client, whichever of those it talks to."""

from __future__ import annotations

import redis
import redis.asyncio
from redis.sentinel import SentinelConnectionPool

from archiver.config import DEFAULT_POOL_CONNECTIONS, DEFAULT_REDIS_URL, Config
from archiver.engine.connect import accepted, async_connect, connect, server_twin
from archiver.engine.sentinel import async_master_client, async_sentinel_client, connect_sentinel
from layers.plumbing.runners import AsyncClient


def async_twin(client: redis.Redis, pool_connections: int = DEFAULT_POOL_CONNECTIONS) -> AsyncClient:
    """An asyncio client of what ``client`` talks to, with its settings (`server_twin`), for a caller
    that holds a blocking client only (`archiver.web.create_app`); a Sentinel master's client becomes
    one of `redis.asyncio.sentinel` with the same sentinels."""
    pool = client.connection_pool if not isinstance(client, redis.RedisCluster) else None
    if isinstance(pool, SentinelConnectionPool):
        return _sentinel_twin(pool, pool_connections)
    return server_twin(client, pool_connections)


def _sentinel_twin(pool: SentinelConnectionPool, pool_connections: int) -> AsyncClient:
    """The asyncio client of a Sentinel master: the same sentinels, master name, settings and
    failover window (`archiver.engine.sentinel.async_master_client`)."""
    manager = pool.sentinel_manager
    watchers = [s.connection_pool.connection_kwargs for s in manager.sentinels]
    hosts = [(kw["host"], kw["port"]) for kw in watchers]
    probe = accepted(redis.asyncio.Connection, dict(manager.sentinel_kwargs))
    data = accepted(redis.asyncio.Connection, dict(pool.connection_kwargs))
    window = getattr(pool.connection_kwargs.get("retry"), "window_s", None)
    return async_master_client(
        hosts, pool.service_name, probe, retry_s=window, pool_connections=pool_connections, **data
    )


def client_for(config: Config) -> redis.Redis:
    """The client a command uses: the primary the sentinels name (with ``sentinel``), or the
    configured server (a cluster client with ``cluster``)."""
    if config.sentinel:
        return connect_sentinel(config)
    return connect(config.redis_url or DEFAULT_REDIS_URL, cluster=config.cluster, password=config.redis_password)


def async_client_for(config: Config) -> AsyncClient:
    """`client_for` on asyncio (not connected yet: see `async_connect`): through the sentinels with
    ``sentinel``."""
    if config.sentinel:
        return async_sentinel_client(config)
    url = config.redis_url or DEFAULT_REDIS_URL
    return async_connect(
        url, cluster=config.cluster, password=config.redis_password, pool_connections=config.redis_pool_connections
    )

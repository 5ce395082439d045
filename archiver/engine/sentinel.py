"""A client of the primary that Redis Sentinel names, which follows it through a failover.

redis-py's `redis.sentinel.Sentinel.master_for` asks the sentinels for the primary's address when
it opens a connection, and drops a connection whose server turned replica (``READONLY``). What it
does not do is wait: between the primary's death and the promotion of a replica (Sentinel's
``down-after-milliseconds`` plus the election, seconds to half a minute) every call fails. So the
client retries connection errors for a window of time (`FailoverRetry`), asking the sentinels again
at each reconnection (`FollowingConnection`), and a worker's call or an archiver's round rides out
the promotion instead of raising.

Before handing out a client, `connect_sentinel` asks each sentinel for the master by name itself,
without retries, so a typo (a port, the master's name, a password) is one line at once rather than
a minute of retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from archiver.config import DEFAULT_POOL_CONNECTIONS, Config
from archiver.engine.connect import Engine, EngineError, EngineUnreachable, engine_error_for, waiting_pool

T = TypeVar("T")
PROBE_TIMEOUT_S = 2.0


class _Window:
    """One call's retries under a failover window: which errors are retried, how many failed so
    far, how long to wait before the next try. Both flavours' retries (`FailoverRetry`,
    `AsyncFailoverRetry`) follow it; only their sleeps differ."""

    def __init__(self, retry: FailoverRetry | AsyncFailoverRetry) -> None:
        retry._backoff.reset()  # type: ignore[no-untyped-call]
        self._backoff = retry._backoff
        self._window_s = retry.window_s
        self.failures = 0
        self._deadline: float | None = None

    def failed(self, error: Exception, is_retryable: Callable[[Exception], bool] | None) -> int:
        """Counts ``error``; raises it where it is not retried (a refused password is not)."""
        if isinstance(error, AuthenticationError | AuthorizationError) or (
            is_retryable is not None and not is_retryable(error)
        ):
            raise error
        self.failures += 1
        return self.failures

    def wait_s(self, error: Exception) -> float:
        """How long to wait before the next try; raises ``error`` once the window is spent."""
        now = time.monotonic()
        self._deadline = now + self._window_s if self._deadline is None else self._deadline
        if now >= self._deadline:
            raise error
        return min(self._backoff.compute(self.failures), self._deadline - now)


class FailoverRetry(Retry):
    """Retries connection errors and timeouts for ``window_s`` seconds from the first failure, with
    exponential backoff (50 ms doubling, at most 1 s, jittered); a refused password is not retried.

    A window rather than redis-py's count of attempts: redis-py nests the connection's retry (when
    it connects) inside the command's, so counts multiply, while two nested windows add up to at
    most twice the window.
    """

    def __init__(self, window_s: float) -> None:
        super().__init__(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=-1)
        self.window_s = window_s

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        window = _Window(self)
        while True:
            try:
                return do()
            except self._supported_errors as error:
                failures = window.failed(error, is_retryable)
                fail(error, failures) if with_failure_count else fail(error)
                time.sleep(window.wait_s(error))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FailoverRetry) and other.window_s == self.window_s

    __hash__ = Retry.__hash__


class AsyncFailoverRetry(AsyncRetry):
    """`FailoverRetry` for `redis.asyncio` connections (the same `_Window`, awaited)."""

    def __init__(self, window_s: float) -> None:
        super().__init__(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=-1)
        self.window_s = window_s

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        window = _Window(self)
        while True:
            try:
                return await do()
            except self._supported_errors as error:
                failures = window.failed(error, is_retryable)
                await (fail(error, failures) if with_failure_count else fail(error))
                await asyncio.sleep(window.wait_s(error))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncFailoverRetry) and other.window_s == self.window_s

    __hash__ = AsyncRetry.__hash__


class FollowingConnection(SentinelManagedConnection):
    """A connection to the primary that asks the sentinels where it is each time it connects.

    redis-py's `SentinelManagedConnection` asks only in `connect`; a command's retry reconnects
    through `connect_check_health`, to the address the connection had, so a call that fails as the
    primary dies keeps knocking at the dead one until its retries run out (redis/redis-py#3874).
    """

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self._sock and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    def _connect_retry(self) -> None:
        if not self.connection_pool.is_master:
            super()._connect_retry()  # type: ignore[no-untyped-call]
        elif not self._sock:  # asks for the address once, above
            self.connect_check_health(check_health=self.connection_pool.check_connection, retry_socket_connect=False)


class AsyncFollowingConnection(AsyncSentinelManagedConnection):
    """`FollowingConnection` for `redis.asyncio`, whose reconnection has the same gap."""

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    async def _connect_retry(self) -> None:
        if not self.connection_pool.is_master:
            await super()._connect_retry()  # type: ignore[no-untyped-call]
        elif not self.is_connected:  # asks for the address once, above
            check = self.connection_pool.check_connection
            await self.connect_check_health(check_health=check, retry_socket_connect=False)


def sentinel_client(
    sentinels: list[tuple[str, int]],
    master: str,
    *,
    password: str | None = None,
    sentinel_password: str | None = None,
    retry_s: float = 60.0,
    **kwargs: Any,
) -> redis.Redis:
    """A client of ``master``'s current primary (`master_for`, with `FailoverRetry`); not checked.
    ``kwargs`` go to the data nodes' connections (e.g. ``decode_responses``)."""
    manager = Sentinel(  # type: ignore[no-untyped-call]
        sentinels,
        sentinel_kwargs={
            "password": sentinel_password,
            "socket_connect_timeout": PROBE_TIMEOUT_S,
            "socket_timeout": PROBE_TIMEOUT_S,
            "retry": Retry(NoBackoff(), 0),  # the next sentinel is asked instead
        },
    )
    options: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 10, "health_check_interval": 30}
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        master, password=password, retry=FailoverRetry(retry_s), connection_class=FollowingConnection,
        **(options | kwargs),
    )  # fmt: skip
    return client


def async_sentinel_client(config: Config) -> redis.asyncio.Redis:
    """The configured Sentinel master's client on asyncio (not connected yet): it asks the sentinels
    for the primary when it connects, and rides out a failover as `sentinel_client` does."""
    assert config.sentinel_master is not None
    return async_master_client(
        config.sentinels,
        config.sentinel_master,
        {"password": config.sentinel_password},
        retry_s=config.sentinel_retry_s,
        password=config.redis_password,
        socket_connect_timeout=5,
        socket_timeout=10,
        pool_connections=config.redis_pool_connections,
    )


def async_master_client(
    sentinels: list[tuple[str, int]],
    master: str,
    sentinel_kwargs: dict[str, Any],
    *,
    retry_s: float | None,
    pool_connections: int = DEFAULT_POOL_CONNECTIONS,
    **kwargs: Any,
) -> redis.asyncio.Redis:
    """A `redis.asyncio` client of ``master``'s current primary: `AsyncFailoverRetry` for
    ``retry_s`` seconds (None: redis-py's own retries), `AsyncFollowingConnection`, commands waiting
    for one of ``pool_connections`` connections. ``kwargs`` go to the data nodes' connections,
    ``sentinel_kwargs`` to the sentinels'."""
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    probe = {"socket_connect_timeout": PROBE_TIMEOUT_S, "socket_timeout": PROBE_TIMEOUT_S} | sentinel_kwargs
    manager = AsyncSentinel(sentinels, sentinel_kwargs=probe)  # type: ignore[no-untyped-call]
    following: dict[str, Any] = {"connection_class": AsyncFollowingConnection}
    if retry_s is not None:
        following["retry"] = AsyncFailoverRetry(retry_s)
    pool = {"connection_pool_class": _WaitingSentinelPool, **waiting_pool(pool_connections)}
    client: redis.asyncio.Redis = manager.master_for(master, **(kwargs | following | pool))
    return client


class _WaitingSentinelPool(AsyncSentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """redis-py's asyncio Sentinel pool, waiting for a connection when all are in use as the other
    asyncio clients' pools do (`archiver.engine.connect.waiting_pool`)."""


def connect_sentinel(config: Config) -> redis.Redis:
    """The configured Sentinel master's client, once a sentinel has named its primary and the
    primary has answered; every failure is an `EngineError` of one line without a password."""
    assert config.sentinel_master is not None
    sentinels, master = config.sentinels, config.sentinel_master
    secrets = [s for s in (config.sentinel_password, config.redis_password) if s]
    primary = discover_primary(sentinels, master, config.sentinel_password, secrets)
    client = sentinel_client(
        sentinels,
        master,
        password=config.redis_password,
        sentinel_password=config.sentinel_password,
        retry_s=config.sentinel_retry_s,
    )
    try:
        client.ping()
    except AuthenticationError as exc:
        client.close()
        raise EngineError(
            f"the primary of {master!r} at {primary} refused the password "
            f"(PARTARCHIVE_REDIS_PASSWORD): {_hidden(str(exc), secrets)}"
        ) from None
    except redis.RedisError as exc:
        client.close()
        reason = _hidden(str(exc), secrets)
        raise engine_error_for(exc)(f"cannot reach the primary of {master!r} at {primary}: {reason}") from None
    return client


def discover_primary(sentinels: list[tuple[str, int]], master: str, password: str | None, secrets: list[str]) -> str:
    """``host:port`` of ``master``'s primary as the first sentinel that knows it says; otherwise
    why not, as one line: no sentinel reachable, a refused password, or no such master."""
    unknown: list[str] = []
    failures: list[str] = []
    refused = False  # a password refused or not a Sentinel: waiting will not help
    for host, port in sentinels:
        where = _address(host, port)
        probe = redis.Redis(
            host=host,
            port=port,
            password=password,
            socket_connect_timeout=PROBE_TIMEOUT_S,
            socket_timeout=PROBE_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            found = probe.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master)  # type: ignore[no-untyped-call]
        except AuthenticationError as exc:
            failures.append(f"{where} refused the password (PARTARCHIVE_SENTINEL_PASSWORD): {exc}")
            refused = True
            continue
        except redis.ResponseError as exc:
            failures.append(f"{where} is not a Sentinel ({exc})")
            refused = True
            continue
        except (redis.RedisError, OSError) as exc:
            failures.append(f"{where}: {exc}")
            continue
        finally:
            probe.close()
        if found:
            ip, primary_port = (part.decode() if isinstance(part, bytes) else str(part) for part in found)
            return _address(ip, int(primary_port))
        unknown.append(where)
    every = ", ".join(_address(h, p) for h, p in sentinels)
    if unknown:
        raise EngineError(f"no Sentinel at {every} monitors a master named {master!r}")
    error = EngineError if refused else EngineUnreachable
    raise error(f"cannot reach Sentinel at {every}: {_hidden('; '.join(failures), secrets)}")


@contextmanager
def sentinel_engine(config: Config) -> Iterator[Engine]:
    """`connect_sentinel` as an `Engine` (for the demo), closed on exit."""
    client = connect_sentinel(config)
    try:
        yield Engine(client, f"Sentinel master {config.sentinel_master!r} via {config.sentinel}", embedded=False)
    finally:
        client.close()


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _hidden(message: str, secrets: list[str]) -> str:
    for secret in secrets:
        message = message.replace(secret, "***")
    return message

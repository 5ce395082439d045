"""The asyncio router's lookups on a `ReadLane`: connections of the client's pool kept for the
read-only script, one deadline a call. On the real engine: whatever interrupts a lookup (its
deadline, a cancellation, the server closing the connection, an error reply), the next lookup on
the same connections gets its own answer, and the connections go when the client closes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from archiver import AsyncQueryRouter, Config, Source
from archiver.engine import async_client_for, async_connect, async_twin
from archiver.engine.connect import WaitingCluster
from archiver.engine.local_cluster import LocalCluster
from codec import PartitionInfo, ValidationError
from layers import ActiveLayer, KeySchema
from layers.errors import WrongKeyType
from layers.plumbing.scripts import LANE_CONNECTIONS, AsyncScripts, ReadLane
from tests.helpers import wait_for

PARTITIONS = 40


@pytest.fixture
def created(real_redis: redis.Redis, namespace: str) -> list[int]:
    return list(ActiveLayer(real_redis, namespace).create_partitions(1, PARTITIONS * 1000, 1000))


@pytest.fixture
def client_name() -> str:
    return f"lane-{uuid.uuid4().hex[:8]}"


def _client(engine_url: str, name: str, **options: object) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(engine_url, client_name=name, **options)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _routed(client: redis.asyncio.Redis, namespace: str) -> AsyncIterator[AsyncQueryRouter]:
    """A router of ``namespace`` on ``client``, closed with it."""
    try:
        yield AsyncQueryRouter(client, namespace)
    finally:
        await client.aclose()


def _lane(client: redis.asyncio.Redis) -> ReadLane:
    lane = AsyncScripts.of(client).lane
    assert lane is not None
    return lane


async def _answers_own(router: AsyncQueryRouter, pids: list[int]) -> None:
    """Each lookup answers for its own partition (no reply of another call read in its place)."""
    answers = await asyncio.gather(*(router.get(pid) for pid in pids))
    for pid, answer in zip(pids, answers, strict=True):
        assert answer.source is Source.ACTIVE and isinstance(answer.partition, PartitionInfo), answer
        assert answer.partition.partition_id == pid


def _connections(sync: redis.Redis, name: str) -> list[dict[str, str]]:
    return [c for c in sync.client_list() if c.get("name") == name]


def test_concurrent_lookups_share_the_kept_connections(engine_url: str, namespace: str, created: list[int],
                                                       client_name: str) -> None:  # fmt: skip
    async def main() -> int:
        client = _client(engine_url, client_name)
        async with _routed(client, namespace) as router:
            for _ in range(3):
                await _answers_own(router, created)
            await _answers_own(router, created[:1])
            return _lane(client).kept

    kept = asyncio.run(main())
    assert kept == LANE_CONNECTIONS < PARTITIONS  # the rest went the usual way; kept ones used again


def test_a_bounded_pool_lends_the_lane_at_most_a_quarter(engine_url: str, namespace: str, created: list[int],
                                                   client_name: str) -> None:  # fmt: skip
    async def main() -> int:
        client = _client(engine_url, client_name, max_connections=8)
        async with _routed(client, namespace) as router:
            for at in range(0, PARTITIONS, 6):  # as many at once as the pool allows
                await _answers_own(router, created[at : at + 6])
            assert await client.ping()
            return _lane(client).kept

    assert asyncio.run(main()) == 2


@contextlib.contextmanager
def _paused(sync: redis.Redis, seconds: float) -> Iterator[None]:
    """Every client's commands held by the server for ``seconds`` (CLIENT PAUSE), and waited out."""
    ends = time.monotonic() + seconds
    sync.client_pause(int(seconds * 1000))
    try:
        yield
    finally:
        time.sleep(max(0.0, ends - time.monotonic()))


def test_a_lookup_cut_off_leaves_no_reply_for_the_next(
    real_redis: redis.Redis, engine_url: str, namespace: str, created: list[int], client_name: str
) -> None:
    """While the server holds every command, one lookup is cancelled and one runs past its deadline (on the lane,
    then the usual way, without retries here); their replies, written once the server is free
    again, are not read by the lookups after them on the same connections."""

    async def main() -> None:
        client = _client(engine_url, client_name, socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
        async with _routed(client, namespace) as router:
            await _answers_own(router, created[:2])
            with _paused(real_redis, 1.0):
                cancelled = asyncio.create_task(router.get(created[0]))
                await asyncio.sleep(0.05)
                cancelled.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await cancelled
                with pytest.raises(RedisTimeoutError):
                    await router.get(created[1])
            for pid in created:
                await _answers_own(router, [pid])
            await _answers_own(router, created)

    asyncio.run(main())


def test_connections_the_server_closed_are_answered_and_opened_again(
    real_redis: redis.Redis, engine_url: str, namespace: str, created: list[int], client_name: str
) -> None:
    async def main() -> None:
        client = _client(engine_url, client_name)
        async with _routed(client, namespace) as router:
            await _answers_own(router, created[:1])
            assert _lane(client).kept == 1
            for found in _connections(real_redis, client_name):
                real_redis.client_kill_filter(_id=found["id"])
            for pid in created[:5]:  # the first written on a closed connection, then sent the usual way
                await _answers_own(router, [pid])
            assert _lane(client).kept == 1

    asyncio.run(main())


def test_an_error_reply_keeps_the_connection(
    real_redis: redis.Redis, engine_url: str, namespace: str, created: list[int], client_name: str
) -> None:
    """A key of the namespace holding another type fails the lookup's script: the typed error, and
    the connection answers the next lookup."""
    simple = KeySchema(namespace).completed

    async def main() -> None:
        client = _client(engine_url, client_name)
        async with _routed(client, namespace) as router:
            await _answers_own(router, created[:1])
            real_redis.set(simple, "not a hash")
            with pytest.raises(WrongKeyType):
                await router.get(created[0])
            real_redis.delete(simple)
            for pid in created[:3]:
                await _answers_own(router, [pid])
            assert _lane(client).kept == 1

    asyncio.run(main())


def test_closing_the_client_closes_the_lane(
    real_redis: redis.Redis, engine_url: str, namespace: str, created: list[int], client_name: str
) -> None:
    async def main() -> int:
        client = _client(engine_url, client_name)
        await _answers_own(AsyncQueryRouter(client, namespace), created)
        kept = _lane(client).kept
        await client.aclose()
        return kept

    assert asyncio.run(main()) >= 1
    wait_for(lambda: not _connections(real_redis, client_name), 10, "the server to see the lane's connections closed")


@pytest.mark.parametrize("made_by", ["async_connect", "async_twin"])
def test_lookups_beyond_the_pools_connections_wait_for_one(
    real_redis: redis.Redis, namespace: str, created: list[int], engine_url: str, made_by: str
) -> None:
    """The API's clients (`archiver.engine`) wait for a connection of their pool, bounded as redis-py
    bounds it, rather than fail as if Redis were down; here 4 connections for 40 lookups at once."""

    async def main() -> None:
        made = async_connect(engine_url, pool_connections=4) if made_by == "async_connect" else None
        client = made or async_twin(real_redis, 4)
        assert isinstance(client, redis.asyncio.Redis) and client.connection_pool.max_connections == 4
        async with _routed(client, namespace) as router:
            await _answers_own(router, created)

    asyncio.run(main())


@pytest.mark.cluster
@pytest.mark.parametrize("made_by", ["async_connect", "async_twin"])
def test_lookups_beyond_the_pools_connections_wait_for_one_on_a_cluster(
    cluster_redis: redis.RedisCluster, local_cluster: LocalCluster, namespace: str, made_by: str
) -> None:
    """Issue 47: one rule for every asyncio client, the cluster's too (redis-py's refuses a command at
    once when a node's connections are all in use): 40 lookups at once on 4 connections a node."""
    created = list(ActiveLayer(cluster_redis, namespace).create_partitions(1, 40_000, 1000))

    async def main() -> None:
        if made_by == "async_connect":
            client = async_connect(local_cluster.url, cluster=True, pool_connections=4)
        else:
            client = async_twin(cluster_redis, 4)
        assert isinstance(client, WaitingCluster)
        try:
            answers = await asyncio.gather(*(AsyncQueryRouter(client, namespace).get(pid) for pid in created))
            assert [answer.partition.partition_id for answer in answers if answer.partition] == created
        finally:
            await client.aclose()

    asyncio.run(main())


def test_the_pools_bound_is_a_setting() -> None:
    """``PARTARCHIVE_REDIS_POOL_CONNECTIONS`` (`Config.redis_pool_connections`): the API's clients."""
    config = Config.from_env({"PARTARCHIVE_REDIS_POOL_CONNECTIONS": "250", "REDIS_URL": "redis://127.0.0.1:1/0"})
    client = async_client_for(config)
    assert client.connection_pool.max_connections == 250  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="redis_pool_connections must be at least 1"):
        Config(redis_pool_connections=0)

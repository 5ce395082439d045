"""``GET /partitions/{id}`` in the app: one lookup per request whatever happens to it, errors
answered once with the app's own mapping, and lookups of one event loop that wait for Redis
together rather than one after another."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import redis
import redis.asyncio
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from archiver import Config
from archiver.web import create_app
from layers import ActiveLayer, KeySchema
from tests.helpers import free_port


def _lookups(namespace: str) -> float:
    """Lookups the namespace's routers ran (each observed in partarchive_router_seconds, raising or not)."""
    return REGISTRY.get_sample_value("partarchive_router_seconds_count", {"namespace": namespace}) or 0.0


def _without_short_path(app: Any) -> None:
    app.lookup_path.enabled = False


def test_a_lookup_that_raises_runs_once_and_is_answered_as_the_route_answers(
    real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    ActiveLayer(real_redis, namespace).create_partitions(1, 3000, 1000)
    app = create_app(real_redis, Config(namespace=namespace))
    real_redis.delete(keys.active)
    real_redis.set(keys.active, "not a hash")  # every lookup now raises WRONGTYPE
    with TestClient(app) as http:
        before = _lookups(namespace)
        short = http.get("/partitions/2")
        assert _lookups(namespace) - before == 1
    assert short.status_code == 409 and short.headers["content-type"] == "application/json"
    assert short.json() == {
        "error": "stored data is not what partarchive wrote",
        "detail": f"{keys.active} is a string, not a hash: not partarchive's data",
    }
    _without_short_path(app)
    with TestClient(app) as http:
        before = _lookups(namespace)
        routed = http.get("/partitions/2")
        assert _lookups(namespace) - before == 1
    assert (routed.status_code, routed.content) == (short.status_code, short.content)


def test_redis_unreachable_is_one_lookup_and_one_503(real_redis: redis.Redis, namespace: str) -> None:
    port = free_port()  # nothing listens there
    app = create_app(
        real_redis,
        Config(namespace=namespace),
        async_client=lambda: redis.asyncio.Redis(port=port, socket_connect_timeout=1),
    )
    with TestClient(app) as http:
        before = _lookups(namespace)
        answer = http.get("/partitions/2")
        assert _lookups(namespace) - before == 1
    assert answer.status_code == 503
    assert answer.json() == {"error": "redis unavailable", "detail": "ConnectionError"}


def test_a_lookup_waiting_for_redis_does_not_hold_up_other_requests(real_redis: redis.Redis, namespace: str) -> None:
    """The app's Redis connections go through a relay that holds the first connection's commands
    until told to: while that lookup waits, the event loop answers /healthz and another lookup.
    (A lookup blocking the loop would stall the relay too, running on the same loop: the waits
    below would time out.)"""
    ActiveLayer(real_redis, namespace).create_partitions(1, 3000, 1000)
    server = real_redis.connection_pool.connection_kwargs
    arrived, released = asyncio.Event(), asyncio.Event()
    connections: list[int] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        gated = not connections
        connections.append(1)
        upstream_reader, upstream = await asyncio.open_connection(server["host"], server["port"])

        async def forward(src: asyncio.StreamReader, dst: asyncio.StreamWriter, gate: bool) -> None:
            while data := await src.read(65536):
                if gate:
                    arrived.set()
                    await released.wait()
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(forward(reader, upstream, gated), forward(upstream_reader, writer, False))

    async def main() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        port = proxy.sockets[0].getsockname()[1]
        made: list[redis.asyncio.Redis] = []

        def through_relay() -> redis.asyncio.Redis:
            made.append(redis.asyncio.Redis(host="127.0.0.1", port=port, db=server.get("db", 0)))
            return made[-1]

        app = create_app(real_redis, Config(namespace=namespace), async_client=through_relay)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            held = asyncio.create_task(http.get("/partitions/2"))
            await asyncio.wait_for(arrived.wait(), 10)
            health = await asyncio.wait_for(http.get("/healthz"), 10)
            other = await asyncio.wait_for(http.get("/partitions/3"), 10)
            assert not held.done()  # still waiting for its reply
            released.set()
            first = await asyncio.wait_for(held, 10)
        for client in made:
            await client.aclose()
        proxy.close()
        return first, health, other

    first, health, other = asyncio.run(main())
    assert health.status_code == 200
    assert (first.status_code, first.json()["source"], other.json()["partition_id"]) == (200, "active", 3)

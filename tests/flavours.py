"""The two flavours of the worker SDK and the query router, for one test body to drive either.

``Flavour("sync")`` builds `ActiveLayer` / `QueryRouter` on the test's client as they are.
``Flavour("async")`` builds `AsyncActiveLayer` / `AsyncQueryRouter` on an asyncio client of the
same server (fakeredis: the same `FakeServer`) and hands them back behind `Blocking`, a thin
synchronous facade that runs each coroutine on the flavour's private event loop in a thread.
Tests only: the facade is how one assertion serves both, not a way to use the asyncio SDK.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import fakeredis
import fakeredis.aioredis
import redis

from archiver import AsyncQueryRouter, QueryRouter
from archiver.engine import async_twin
from layers import ActiveLayer, AsyncActiveLayer

T = TypeVar("T")


class EventLoopThread:
    """An event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="flavour-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


class Blocking:
    """An asyncio SDK or router object seen as a blocking one: its coroutine methods run to their
    end on the loop, its async iterators are gathered into lists, anything else passes through."""

    def __init__(self, target: Any, loop: EventLoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            return lambda *args, **kwargs: self._loop.run(value(*args, **kwargs))
        if inspect.isasyncgenfunction(value):
            return lambda *args, **kwargs: iter(self._loop.run(_collect(value(*args, **kwargs))))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


class Flavour:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: EventLoopThread | None = None
        self._clients: dict[int, tuple[redis.Redis, Any]] = {}

    def __repr__(self) -> str:
        return self.name

    @property
    def is_async(self) -> bool:
        return self.name == "async"

    @property
    def loop(self) -> EventLoopThread:
        if self._loop is None:
            self._loop = EventLoopThread()
        return self._loop

    def active(self, client: redis.Redis, *args: Any, **kwargs: Any) -> ActiveLayer:
        """`ActiveLayer(client, ...)`, or an `AsyncActiveLayer` behind `Blocking`."""
        if not self.is_async:
            return ActiveLayer(client, *args, **kwargs)
        return Blocking(AsyncActiveLayer(self.async_client(client), *args, **kwargs), self.loop)  # type: ignore[return-value]

    def router(self, client: redis.Redis, *args: Any, **kwargs: Any) -> QueryRouter:
        """`QueryRouter(client, ...)`, or an `AsyncQueryRouter` behind `Blocking`."""
        if not self.is_async:
            return QueryRouter(client, *args, **kwargs)
        return Blocking(AsyncQueryRouter(self.async_client(client), *args, **kwargs), self.loop)  # type: ignore[return-value]

    def async_client(self, client: redis.Redis) -> Any:
        """The asyncio client of ``client``'s server (one per client, closed with the flavour)."""
        found = self._clients.get(id(client))
        if found is None:
            if isinstance(client, fakeredis.FakeRedis):
                twin: Any = fakeredis.aioredis.FakeRedis(server=client.connection_pool.connection_kwargs["server"])
            else:
                twin = async_twin(client)
            found = self._clients[id(client)] = (client, twin)
        return found[1]

    def close(self) -> None:
        if self._loop is None:
            return
        for _, twin in self._clients.values():
            self._loop.run(twin.aclose())
        self._loop.close()

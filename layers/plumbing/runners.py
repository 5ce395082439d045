"""Steps run on a client: `SyncIO` drives a generator of steps (`layers.plumbing.steps`) on a
`redis.Redis` (or `redis.RedisCluster`) client, `AsyncIO` awaits each step on a `redis.asyncio` client:
a `Script` through the one script runner (`layers.plumbing.scripts`), a `Batch` in one round trip (a
transaction ridden out while its hash slot moves, `layers.plumbing.resharding`), anything else by the
steps' own `perform`. The synchronous and the asyncio classes of the worker SDK and the query router
differ only in which of the two drives them.

`operation` turns a method returning steps into the public method of both flavours at once (a
`Blocking` or an `Awaited` instance): the worker SDK's and the query router's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import redis
import redis.asyncio

from layers.plumbing.resharding import ride_out, ride_out_async
from layers.plumbing.scripts import AsyncKeptConnection, AsyncScripts, KeptConnection, Scripts
from layers.plumbing.steps import Batch, Script, Steps, adrive, aperform, drive, perform

__all__ = [
    "AsyncClient",
    "AsyncIO",
    "AsyncLane",
    "Awaited",
    "Blocking",
    "SyncIO",
    "SyncLane",
    "operation",
]

T = TypeVar("T")
P = ParamSpec("P")

#: The asyncio clients the steps run on (a Sentinel's ``master_for`` gives a `redis.asyncio.Redis`).
AsyncClient = redis.asyncio.Redis | redis.asyncio.RedisCluster


class SyncIO:
    """Runs steps with a synchronous client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client: Any = client
        self.scripts = Scripts.of(client)
        self._cluster = isinstance(client, redis.RedisCluster)

    def run(self, steps: Steps[T]) -> T:
        return drive(steps, self._perform)

    def _perform(self, step: Any) -> Any:
        kind = type(step)  # not isinstance: Batch's is a slow check (redis-py's commands are a Protocol)
        if kind is Script:
            return self.scripts(step.name, step.keys, step.args)
        if kind is Batch:
            if step.single:
                args, options = step.calls[0]
                return self.client.execute_command(*args, **options)
            if step.transaction and self._cluster:
                # refused while its hash slot moves
                return ride_out(lambda: self._batch(step), "transaction", keys=_keys(step))
            return self._batch(step)
        return perform(self.client, step)

    def _batch(self, step: Batch) -> Any:
        pipe = self.client.pipeline(transaction=step.transaction)
        for args, options in step.calls:
            pipe.execute_command(*args, **options)
        return pipe.execute(raise_on_error=step.raise_on_error)

    def lane(self) -> SyncIO:
        """A driver of steps whose scripts go on a connection of its own (`SyncLane`); on Redis Cluster,
        whose client routes each script by its keys, this driver itself."""
        return self if self._cluster else SyncLane(self.client)

    def close(self) -> None:
        """Give back what the driver holds (a lane's connection)."""


class SyncLane(SyncIO):
    """`SyncIO` whose scripts' first command goes on a connection of its own, kept until `close`
    (`layers.plumbing.scripts.KeptConnection`), for one thread's long run of scripts (a worker
    runtime's slot); everything else is sent the client's usual way."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.kept = KeptConnection(client.connection_pool)

    def _perform(self, step: Any) -> Any:
        if type(step) is Script:
            return self.scripts(step.name, step.keys, step.args, on=self.kept)
        return super()._perform(step)

    def close(self) -> None:
        self.kept.close()


class AsyncIO:
    """Awaits steps on a `redis.asyncio` client (`redis.asyncio.Redis`, `redis.asyncio.RedisCluster`)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client: Any = client
        self.scripts = AsyncScripts.of(client)
        self._cluster = isinstance(client, redis.asyncio.RedisCluster)

    async def run(self, steps: Steps[T]) -> T:
        return await adrive(steps, self._perform)

    async def _perform(self, step: Any) -> Any:
        kind = type(step)  # as `SyncIO`
        if kind is Script:
            return await self.scripts(step.name, step.keys, step.args)
        if kind is Batch:
            if step.single:
                args, options = step.calls[0]
                return await self.client.execute_command(*args, **options)
            if step.transaction and self._cluster:
                return await ride_out_async(lambda: self._batch(step), "transaction", keys=_keys(step))  # as `SyncIO`
            return await self._batch(step)
        return await aperform(self.client, step)

    async def _batch(self, step: Batch) -> Any:
        pipe = self.client.pipeline(transaction=step.transaction)
        for args, options in step.calls:
            pipe.execute_command(*args, **options)
        return await pipe.execute(raise_on_error=step.raise_on_error)

    async def lane(self) -> AsyncIO:
        """`SyncIO.lane` on asyncio (`AsyncLane`): its `lane` gives drivers that share its connection,
        whose calls go together (`layers.plumbing.scripts.AsyncKeptConnection`)."""
        if self._cluster or getattr(self.client, "connection_pool", None) is None:
            return self
        return AsyncLane(self.client, await AsyncKeptConnection.take(self.client.connection_pool))

    async def close(self) -> None:
        """Give back what the driver holds (a lane's connection)."""


class AsyncLane(AsyncIO):
    """`SyncLane` on asyncio: scripts on a kept connection the lanes of one loop share, their calls
    pipelined (made by `AsyncIO.lane`; `close` by the one that made it)."""

    def __init__(self, client: AsyncClient, kept: AsyncKeptConnection) -> None:
        super().__init__(client)
        self.kept = kept

    async def lane(self) -> AsyncIO:
        return AsyncLane(self.client, self.kept)

    async def _perform(self, step: Any) -> Any:
        if type(step) is Script:
            return await self.scripts(step.name, step.keys, step.args, on=self.kept)
        return await super()._perform(step)

    async def close(self) -> None:
        await self.kept.close()


def _keys(step: Batch) -> list[str]:
    """The keys of a batch's commands (each command's first argument), for `ride_out`'s metric."""
    return [str(args[1]) for args, _ in step.calls if len(args) > 1]


class Blocking:
    """Mixin of a class whose operations (`operation`) run blocking, with its `SyncIO` (``self._io``)."""

    _io: SyncIO


class Awaited:
    """Mixin of a class whose operations (`operation`) are coroutines, awaited with its `AsyncIO` (``self._io``)."""

    _io: AsyncIO


class operation(Generic[P, T]):
    """A method returning steps, made the public method of both flavours by one line:
    ``claim = operation(ActiveCore._claim)``. On a `Blocking` instance it runs the steps and
    returns their result; on an `Awaited` one it is a coroutine function. Typed for either (the
    overloads of ``__get__``), with the signature and docstring of the steps' method.

    With ``on``, the steps are a method of an object the instance holds in that attribute:
    ``get = operation(ActiveReads._get, on="reads")`` runs ``instance.reads._get``.

    The method made for an instance is kept in the instance's ``__dict__``, so from the second
    call on it is found as an attribute is, without this descriptor."""

    def __init__(self, steps: Callable[Concatenate[Any, P], Steps[T]], *, on: str | None = None) -> None:
        self.steps = steps
        self.on = on
        self.name = steps.__name__.lstrip("_")
        self.__doc__ = steps.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> operation[P, T]: ...
    @overload
    def __get__(self, instance: Blocking, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, instance: Awaited, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, instance: object, owner: type) -> Any:
        if instance is None:
            return self
        steps, io = self.steps, instance._io  # type: ignore[attr-defined]
        holder = instance if self.on is None else getattr(instance, self.on)  # the steps' self
        method: Callable[..., Any]
        if isinstance(io, AsyncIO):

            async def awaited(*args: Any, **kwargs: Any) -> Any:
                return await io.run(steps(holder, *args, **kwargs))

            method = awaited
        else:

            def blocking(*args: Any, **kwargs: Any) -> Any:
                return io.run(steps(holder, *args, **kwargs))

            method = blocking
        functools.update_wrapper(method, steps)
        method.__name__ = method.__qualname__ = self.name
        instance.__dict__[self.name] = method
        return method

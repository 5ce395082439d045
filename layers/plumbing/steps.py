"""Redis work written once, run blocking or awaited (sans-I/O).

An operation of the worker SDK or the query router is a generator of *steps*: it yields what it
needs from Redis (a `Script`, a `Batch` of commands, or a `Call` of some outside function such
as the clock) and is sent the reply; it validates its arguments, builds keys and arguments and
reads the replies itself, and returns its result. `SyncIO` runs such a generator with a
`redis.Redis` (or `redis.RedisCluster`) client, `AsyncIO` awaits each step on a
`redis.asyncio` client: the synchronous and the asyncio classes differ only in which of the two
drives them. A step that fails is thrown into the generator at its ``yield``, so ``try`` blocks
around a step work as around a call.

`blocking` and `awaiting` turn a method returning steps into the public method of either flavour,
with its signature and docstring.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import redis
import redis.asyncio
from redis.commands.core import CoreCommands

from layers.plumbing.scripts import Scripts
from layers.plumbing.scripts_async import AsyncScripts
from layers.plumbing.slot_moves import ride_out

T = TypeVar("T")
P = ParamSpec("P")

#: The asyncio clients the steps run on (a Sentinel's ``master_for`` gives a `redis.asyncio.Redis`).
AsyncClient = redis.asyncio.Redis | redis.asyncio.RedisCluster

#: A generator of steps returning ``T``.
Steps = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Script:
    """Run one of the scripts in ``layers/<room>/lua`` (EVALSHA, loading it when the server lacks it)."""

    name: str
    keys: list[str]
    args: list[Any]


@dataclass(frozen=True, slots=True)
class Call:
    """Call a function outside Redis (a clock, a caller's statistics lookup); its result is awaited
    under `AsyncIO` when it is awaitable."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()


class Batch(CoreCommands):
    """Commands recorded through redis-py's own command methods (so their arguments, options and
    reply parsing are redis-py's), sent in one round trip: the reply is the list of their replies
    (a pipeline), or with ``single`` the one command's reply. ``yield Batch().hget(k, f).getbit(k2, 3)``

    Typed as a synchronous client (``_is_async_client``) for redis-py's annotations: a command
    method returns the batch itself, not the reply its annotation names.
    """

    _is_async_client: Literal[False] = False
    _event_dispatcher: Any = None

    def __init__(self, *, single: bool = False, transaction: bool = False, raise_on_error: bool = True) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.single = single
        self.transaction = transaction
        self.raise_on_error = raise_on_error

    def execute_command(self, *args: Any, **options: Any) -> Batch:
        self.calls.append((args, options))
        return self


def one() -> Batch:
    """A step of one command: ``raw = yield one().hget(key, field)``."""
    return Batch(single=True)


class SyncIO:
    """Runs steps with a synchronous client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client: Any = client
        self.scripts = Scripts.of(client)

    def run(self, steps: Steps[T]) -> T:
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                step = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                reply = self._perform(step)
            except Exception as exc:  # handed to the steps, which may catch it
                error = exc
            except BaseException:
                steps.close()
                raise

    def _perform(self, step: Any) -> Any:
        if isinstance(step, Script):
            return self.scripts(step.name, step.keys, step.args)
        if isinstance(step, Call):  # before Batch, whose check is a slow one (redis-py's commands are a Protocol)
            return step.function(*step.args)
        if isinstance(step, Batch):
            if step.single:
                args, options = step.calls[0]
                return self.client.execute_command(*args, **options)
            if step.transaction and isinstance(self.client, redis.RedisCluster):
                return ride_out(lambda: self._batch(step), "transaction")  # refused while its slot moves
            return self._batch(step)
        raise TypeError(f"not a step: {step!r}")

    def _batch(self, step: Batch) -> Any:
        pipe = self.client.pipeline(transaction=step.transaction)
        for args, options in step.calls:
            pipe.execute_command(*args, **options)
        return pipe.execute(raise_on_error=step.raise_on_error)


class AsyncIO:
    """Awaits steps on a `redis.asyncio` client (`redis.asyncio.Redis`, `redis.asyncio.RedisCluster`)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client: Any = client
        self.scripts = AsyncScripts.of(client)

    async def run(self, steps: Steps[T]) -> T:
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                step = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                reply = await self._perform(step)
            except Exception as exc:  # handed to the steps, which may catch it
                error = exc
            except BaseException:  # cancelled: the steps' clean-up runs now, not at garbage collection
                steps.close()
                raise

    async def _perform(self, step: Any) -> Any:
        if isinstance(step, Script):
            return await self.scripts(step.name, step.keys, step.args)
        if isinstance(step, Call):
            got = step.function(*step.args)
            return await got if inspect.isawaitable(got) else got
        if isinstance(step, Batch):
            if step.single:
                args, options = step.calls[0]
                return await self.client.execute_command(*args, **options)
            pipe = self.client.pipeline(transaction=step.transaction)
            for args, options in step.calls:
                pipe.execute_command(*args, **options)
            return await pipe.execute(raise_on_error=step.raise_on_error)
        raise TypeError(f"not a step: {step!r}")


def blocking(steps: Callable[Concatenate[Any, P], Steps[T]]) -> Callable[Concatenate[Any, P], T]:
    """The method that runs ``steps`` with the instance's `SyncIO` (``self._io``)."""

    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        io: SyncIO = self._io
        return io.run(steps(self, *args, **kwargs))

    functools.update_wrapper(method, steps)
    return method


def awaiting(
    steps: Callable[Concatenate[Any, P], Steps[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The coroutine method that awaits ``steps`` with the instance's `AsyncIO` (``self._io``)."""

    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        io: AsyncIO = self._io
        return await io.run(steps(self, *args, **kwargs))

    functools.update_wrapper(method, steps)
    return method

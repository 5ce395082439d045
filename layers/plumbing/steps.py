"""Redis work written once, run blocking or awaited (sans-I/O): what a step is, and the two loops
that drive a generator of steps.

An operation of the worker SDK or the query router is a generator of *steps*: it yields what it
needs from Redis (a `Script`, a `Batch` of commands, a `Send` of one command, a `Wait`, or a `Call`
of some outside function such as the clock) and is sent the reply; it validates its arguments,
builds keys and arguments and reads the replies itself, and returns its result. A step that fails
is thrown into the generator at its ``yield``, so ``try`` blocks around a step work as around a
call. `drive` runs such a generator blocking, `adrive` awaits it: these two loops are the only place
where the blocking and the asyncio flavours differ. What each step does is the caller's
``perform``: `perform` and `aperform` do a `Send`, a `Wait` and a `Call` on a client of either
flavour; `layers.plumbing.runners` adds scripts and batches (`SyncIO`, `AsyncIO`), and
`layers.plumbing.resharding` rides out a hash slot move with these same loops.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

from redis.commands.core import CoreCommands

T = TypeVar("T")

#: A generator of steps returning ``T``.
Steps = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Call:
    """Call a function outside Redis (a clock, a caller's statistics lookup); its result is awaited
    under `adrive` when it is awaitable."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()


class Send(NamedTuple):
    """One command, by the name of the client method that sends it (``fcall``, ``evalsha``, ...):
    the blocking and the asyncio clients name and take them alike."""

    method: str
    args: tuple[Any, ...]


class Wait(NamedTuple):
    """Sleep (a backoff): `time.sleep` blocking, `asyncio.sleep` awaited."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Script:
    """Run one of the scripts in ``layers/<room>/lua`` (EVALSHA, loading it when the server lacks it)."""

    name: str
    keys: list[str]
    args: list[Any]


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


def drive(steps: Steps[T], perform: Callable[[Any], Any]) -> T:
    """Run ``steps``, each step done by ``perform``."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = perform(step)
        except Exception as exc:  # handed to the steps, which may catch it
            error = exc
        except BaseException:
            steps.close()
            raise


async def adrive(steps: Steps[T], perform: Callable[[Any], Awaitable[Any]]) -> T:
    """`drive`, each step awaited (a `Call` whose function gives no awaitable, such as a cached clock's
    reading, is not: called here, as `aperform` would, without a coroutine of its own)."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            if type(step) is Call:
                reply = step.function(*step.args)
                if inspect.isawaitable(reply):
                    reply = await reply
            else:
                reply = await perform(step)
        except Exception as exc:  # handed to the steps, which may catch it
            error = exc
        except BaseException:  # cancelled: the steps' clean-up runs now, not at garbage collection
            steps.close()
            raise


def perform(client: Any, step: Any) -> Any:
    """Do a `Send`, `Wait` or `Call` blocking (``client`` sends the commands)."""
    kind = type(step)
    if kind is Send:
        return getattr(client, step.method)(*step.args)
    if kind is Wait:
        time.sleep(step.seconds)
        return None
    if kind is Call:
        return step.function(*step.args)
    raise TypeError(f"not a step: {step!r}")


async def aperform(client: Any, step: Any) -> Any:
    """`perform` on an asyncio client."""
    kind = type(step)
    if kind is Send:
        return await getattr(client, step.method)(*step.args)
    if kind is Wait:
        await asyncio.sleep(step.seconds)
        return None
    if kind is Call:
        got = step.function(*step.args)
        return await got if inspect.isawaitable(got) else got
    raise TypeError(f"not a step: {step!r}")

"""The two drivers of steps: `drive` runs a generator of steps blocking, `adrive` awaits it.

Work written once as a generator yields what it needs (a `Send` of one command, a `Wait`, a
`Call` of an outside function) and is sent the reply; a step that fails is thrown into the
generator at its ``yield``. What each step does is the caller's ``perform``; `perform` and
`aperform` do the three kinds here on a client of either flavour. These two loops are the only
place where the blocking and the asyncio flavours differ (`layers.plumbing.steps` adds the
worker's and the router's steps, `layers.plumbing.scripts` the running of a script,
`layers.plumbing.resharding` riding out a slot move).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

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

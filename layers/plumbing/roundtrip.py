"""Several parts' commands in one round trip, each part handed its own replies.

A part (the staging of a page, the reads of its batches, the writes of their slots, the check of
their workers' numbers...) opens a `Part` on the `RoundTrip`, adds its commands on it as on a
pipeline, and gives the function that reads its replies: once the round trip has run, that
function is handed the replies of its own commands, errors among them (the pipeline runs with
``raise_on_error=False``), wherever they fell among the others', and the part's `Part.value` is
what it returned. The readers run in the order their parts were opened, and the first that raises
stops the others: a part that depends on another opens after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: A part's reader: its replies (errors among them) -> its value.
Reader = Callable[[list[Any]], T]


class Part(Generic[T]):
    """One part's commands in a `RoundTrip`: every command method of a pipeline adds that command
    (and returns the part, as a pipeline returns itself); `value` once the round trip has run."""

    __slots__ = ("_at", "_read", "_trip", "replies", "value")

    def __init__(self, trip: RoundTrip, read: Reader[T]) -> None:
        self._trip = trip
        self._read = read
        self._at: list[int] = []  # where its commands are in the round trip's
        self.replies: list[Any] = []  # its own replies, as Redis answered them
        self.value: T

    def __getattr__(self, name: str) -> Callable[..., Part[T]]:
        if name in Part.__slots__:  # `value` before the round trip ran
            raise AttributeError(f"{name} is not known until the round trip has run")
        method = getattr(self._trip.commands, name)
        at, length = self._at, self._trip.length

        def add(*args: Any, **kwargs: Any) -> Part[T]:
            at.append(length())
            method(*args, **kwargs)
            return self

        return add

    def _hand(self, replies: Sequence[Any]) -> None:
        self.replies = [replies[i] for i in self._at]
        self.value = self._read(self.replies)


class RoundTrip:
    """The parts of one round trip on ``commands``: a pipeline (`run` sends it) or a
    `layers.plumbing.steps.Batch` (its step's replies are handed over with `hand`). Commands added
    on ``commands`` directly, not through a part, are the owner's and read by the owner."""

    def __init__(self, commands: Any) -> None:
        self.commands = commands
        calls = getattr(commands, "calls", None)  # a Batch's; a pipeline counts its own
        self.length: Callable[[], int] = calls.__len__ if calls is not None else commands.__len__
        self._parts: list[Part[Any]] = []

    @classmethod
    def on(cls, client: Any) -> RoundTrip:
        """A round trip on a new pipeline of ``client`` (no transaction)."""
        return cls(client.pipeline(transaction=False))

    def part(self, read: Reader[T]) -> Part[T]:
        """Open a part whose replies ``read`` turns into its value."""
        part = Part(self, read)
        self._parts.append(part)
        return part

    def after(self, read: Callable[[], T]) -> Part[T]:
        """A part of no commands whose value ``read`` makes once the parts opened before have theirs."""
        return self.part(lambda _replies: read())

    def run(self) -> None:
        """Send the pipeline and hand each part its replies."""
        self.hand(self.commands.execute(raise_on_error=False))

    def hand(self, replies: Sequence[Any]) -> None:
        """Hand each part its replies (from the whole round trip's ``replies``), in the order opened."""
        for part in self._parts:
            part._hand(replies)


def raised(replies: list[Any]) -> list[Any]:
    """A reader for replies that are all results: the first error among them is raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies

"""Committing one page of the archive queue while the archiver handles the next.

An archiver reads a page of entries, decodes it, writes its detail and commits it. Done strictly
in turn, Redis idles while the archiver decodes and the archiver idles while Redis runs the
commit. Here the archiver reads the next page first and only then sends the last page's commit,
on a connection of its own, without waiting: Redis runs the commit while the archiver decodes the
page, and the commit's reply is read once the page is handled. While the queue holds full pages,
the read of the next page is sent as soon as a page arrives (`prefetch`), so Redis reads it while
the archiver handles the one in hand.

The order matters: Redis writes its replies to a client once it has run every command that came
in with them, so a commit sent before (or with) a read would hold the page back until the commit
has run. A read of new entries (``>``) never returns an entry a commit acknowledges, so this
changes when work happens, not what it does.

Redis Cluster has no single connection for this (the client routes each command); the archiver
reads and commits in turn there.
"""

from __future__ import annotations

from typing import Any

import redis

from layers.archive.queue import page_columns
from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.plumbing.scripts import KeptConnection, Scripts
from layers.plumbing.steps import Send

#: A script call: its name, keys and arguments.
ScriptCall = tuple[str, list[str], list[Any]]


class PageConnections:
    """Two connections of the client's pool, kept (`KeptConnection`): one reads new entries, ahead
    of their handling (`prefetch`); on the other the script runner (`Scripts.send`) sends a call
    without waiting for its reply (`send`, `reply`)."""

    def __init__(self, client: redis.Redis, keys: KeySchema, consumer: str, count: int) -> None:
        self._pool = client.connection_pool
        self._scripts = Scripts.of(client)
        self._head = ("GROUP", ARCHIVER_GROUP, consumer, "COUNT", count)
        self._tail = ("STREAMS", keys.queue, ">")
        self._reader: KeptConnection | None = None
        self._sender: KeptConnection | None = None
        self._owed: ScriptCall | None = None  # the call sent, its reply not read yet
        self._fetching = False  # a read sent by `prefetch`, its reply not taken yet

    @staticmethod
    def usable(client: redis.Redis) -> bool:
        """Whether ``client`` has one pool of connections to one server (not Redis Cluster)."""
        return getattr(client, "connection_pool", None) is not None

    @property
    def prefetched(self) -> bool:
        """Whether a read sent by `prefetch` waits to be taken by `read`."""
        return self._fetching

    def prefetch(self) -> None:
        """Send the read of the next page now, without waiting (not blocking: it returns what the
        queue holds when Redis runs it); `read` takes its reply. The caller reads while a page is
        handled, so that Redis reads the next one meanwhile."""
        if self._fetching:
            return
        reader = self._reader or self._take_reader()
        try:
            reader.write(Send("xreadgroup", (*self._head, *self._tail)))
        except BaseException:
            self._drop_reader()
            raise
        self._fetching = True

    def read(self, block_ms: int) -> tuple[list[str], list[bytes]]:
        """New entries (ids, payloads): those of the read `prefetch` sent, else read now, waiting up
        to ``block_ms`` for one (0: not at all)."""
        reader = self._reader or self._take_reader()
        try:
            if not self._fetching:
                block = ("BLOCK", block_ms) if block_ms > 0 else ()
                reader.write(Send("xreadgroup", (*self._head, *block, *self._tail)))
            self._fetching = False
            page = reader.read(raw=True)
        except redis.ResponseError:
            raise
        except BaseException:
            self._drop_reader()
            raise
        return page_columns(page)

    def _take_reader(self) -> KeptConnection:
        self._reader = KeptConnection(self._pool)
        return self._reader

    def _drop_reader(self) -> None:
        """Drop the read connection (what a read on it delivered stays unacknowledged for this
        consumer, taken over after ``claim_idle_ms``, as the entries of any page a failure interrupts)."""
        reader, self._reader = self._reader, None
        self._fetching = False
        if reader is not None:
            reader.drop()

    def send(self, call: ScriptCall) -> None:
        """Send a script call without waiting; its reply is read by `reply`."""
        if self._owed is not None:
            raise RuntimeError("the reply of the script sent before was not read")
        if self._sender is None:
            self._sender = KeptConnection(self._pool)
        name, keys, args = call
        try:
            self._scripts.send(name, keys, args, on=self._sender)
        except BaseException:
            self._drop_sender()
            raise
        self._owed = call

    def reply(self) -> Any:
        """The reply of the script sent last, as `Scripts.reply` reads it (an error the script
        answered is raised, the connection staying usable)."""
        if self._owed is None or self._sender is None:
            raise RuntimeError("no script was sent")
        (name, keys, args), self._owed = self._owed, None
        try:
            return self._scripts.reply(name, keys, args, on=self._sender)
        except redis.ResponseError:
            raise
        except BaseException:
            self._drop_sender()
            raise

    def close(self) -> None:
        """Give the connections back (one whose reply may still be on its way is dropped)."""
        if self._sender is not None:
            self._drop_sender() if self._owed is not None else self._sender.close()
            self._sender = None
        if self._reader is not None:
            self._drop_reader() if self._fetching else self._reader.close()
            self._reader = None

    def _drop_sender(self) -> None:
        sender, self._sender = self._sender, None
        self._owed = None
        if sender is not None:
            sender.drop()

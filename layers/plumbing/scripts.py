"""The scripts in ``layers/<room>/lua``, run: ``Scripts.of(client)(name, keys, args)`` on a blocking
client, ``await AsyncScripts.of(client)(name, keys, args)`` on a `redis.asyncio` one.

What is sent is `layers.plumbing.lua_sources`' (a script with its helpers, the worker's library).
How it is run is written once, in `ScriptCore`: it holds what a client's runs have learnt (does
the server have Redis Functions, which scripts run as scripts because it refused the library,
each script's SHA1) and gives the steps (`layers.plumbing.steps`) of a run: FCALL of the worker's
library, or EVALSHA; the library or the script loaded where the server lacks it; a script whose
node never saw it sent whole (EVAL) on Redis Cluster; every run on Redis Cluster sent again while
its hash slot moves (`layers.plumbing.resharding.riding_out`); and an error Redis answers with
``user_script:N`` named by the file and line of the script's own source (`located`). `Scripts`
drives those steps blocking, `AsyncScripts` awaits them: the two differ in nothing else. Here too,
on a blocking client: several scripts in one round trip (`Scripts.run_many`, `Scripts.add_calls`),
and a call sent on a `KeptConnection` whose reply is read later (`Scripts.send`, `Scripts.reply`: the
archiver's commit, sent with a page's reads).

The worker's hot path pays nothing for this: a driver sends `ScriptCore.first` itself and hands
the steps only the error it got, if any. On asyncio, a read-only script's first command goes on a
`ReadLane`, connections kept for it (the router's lookup, the API's hot request).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Self
from weakref import WeakKeyDictionary

import redis
import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError
from redis.utils import HIREDIS_AVAILABLE

from layers.plumbing.lua_sources import (
    LIBRARY_PREFIX,
    LIBRARY_SCRIPTS,
    LUA_ROOMS,
    READ_ONLY_SCRIPTS,
    Assembled,
    Library,
    assembled,
    includes,
    is_missing_function,
    lacks_functions,
    library,
    located,
    lua_files,
    lua_path,
    refuses_load,
    script_source,
)
from layers.plumbing.replies import as_text
from layers.plumbing.resharding import follow_ask_to_new_masters, riding_out
from layers.plumbing.roundtrip import Part, RoundTrip
from layers.plumbing.steps import Send, Steps, adrive, aperform, drive, perform

if HIREDIS_AVAILABLE:
    import hiredis

__all__ = [
    "LIBRARY_SCRIPTS",
    "LUA_ROOMS",
    "READ_ONLY_SCRIPTS",
    "Assembled",
    "AsyncKeptConnection",
    "AsyncScripts",
    "KeptConnection",
    "Library",
    "ReadLane",
    "ScriptCore",
    "Scripts",
    "assembled",
    "includes",
    "is_missing_function",
    "lacks_functions",
    "library",
    "located",
    "lua_files",
    "lua_path",
    "refuses_load",
    "script_source",
]


class ScriptCore:
    """The script runs of one client (no I/O: the flavours drive its steps)."""

    def __init__(self, *, cluster: bool) -> None:
        self.cluster = cluster
        #: The library (`LIBRARY_SCRIPTS`) runs as functions: not on Redis Cluster (redis-py would
        #: ask the server for an FCALL's keys before every call), nor once the server said it has none.
        self.functions = not cluster
        self.as_scripts: set[str] = set()  # read-only ones run as scripts: the server refused the library
        self._shas: dict[str, str] = {}

    def sha(self, name: str) -> str:
        """The SHA1 of script ``name`` as sent (`script_source`)."""
        sha = self._shas.get(name)
        if sha is None:
            sha = self._shas[name] = hashlib.sha1(script_source(name).encode()).hexdigest()
        return sha

    @functools.cached_property
    def _function_names(self) -> dict[str, str]:
        """The library's function of each of its scripts, looked up once per client."""
        return library().functions

    def _as_function(self, name: str) -> bool:
        return self.functions and name in LIBRARY_SCRIPTS and name not in self.as_scripts

    def first(self, name: str, keys: list[str], args: list[Any]) -> Send | None:
        """The one command that runs ``name`` when all goes well; None on Redis Cluster, where each
        run is `steps` from the start."""
        if self.cluster:
            return None
        if self._as_function(name):
            return Send("fcall", (self._function_names[name], len(keys), *keys, *args))
        return Send("evalsha", (self.sha(name), len(keys), *keys, *args))

    def steps(self, name: str, keys: list[str], args: list[Any], failed: Exception | None = None) -> Steps[Any]:
        """Run script ``name``; ``failed`` is the error `first`, sent by the driver, got."""
        if self._as_function(name):
            return (yield from self._fcall(name, keys, args, failed))
        try:
            if not self.cluster:
                return (yield from self._script(name, keys, args, failed))
            return (yield from riding_out(lambda: self._script(name, keys, args), name, keys=keys))
        except NoScriptError:
            raise
        except ResponseError as exc:
            raise located(name, exc) from None

    def _script(self, name: str, keys: list[str], args: list[Any], failed: Exception | None = None) -> Steps[Any]:
        """EVALSHA; where the server has not loaded the script (restarted, SCRIPT FLUSH), SCRIPT LOAD
        and EVALSHA again, or on Redis Cluster EVAL, which loads it on the node that runs it (a new
        master, the target of an ASK: not necessarily one the client knows)."""
        call = (self.sha(name), len(keys), *keys, *args)
        try:
            return (yield from _sent(Send("evalsha", call), failed))
        except NoScriptError:
            if self.cluster:
                return (yield Send("eval", (script_source(name), *call[1:])))
            yield Send("script_load", (script_source(name),))
            return (yield Send("evalsha", call))

    def _fcall(self, name: str, keys: list[str], args: list[Any], failed: Exception | None) -> Steps[Any]:
        """FCALL; the library loaded where the server lacks it, or the script run instead where the
        server has no functions or refuses the library (`lacks_functions`, `refuses_load`)."""
        call = (self._function_names[name], len(keys), *keys, *args)
        for attempt in (1, 2):
            try:
                if attempt == 1:
                    return (yield from _sent(Send("fcall", call), failed))
                if not (yield from self._load(name)):  # refused: `name` runs as a script
                    return (yield from self.steps(name, keys, args))
                return (yield Send("fcall", call))
            except ResponseError as exc:
                if lacks_functions(exc):
                    self.functions = False
                    return (yield from self.steps(name, keys, args))
                if attempt == 2 or not is_missing_function(exc):
                    raise located(name, exc) from None
        raise AssertionError("unreachable")

    def _load(self, name: str) -> Steps[bool]:
        """FUNCTION LOAD the library; False where the server refused and script ``name`` can run
        instead (it is then run as a script from now on)."""
        try:
            yield Send("function_load", (library().source.text,))
        except ResponseError as exc:
            if "already exists" in str(exc):
                return True
            if not refuses_load(name, exc):
                raise
            self.as_scripts.add(name)
            return False
        return True


def library_names(client: redis.Redis) -> list[str]:
    """The worker libraries of every partarchive release loaded on the server (``partarchive_<hash>``),
    this release's among them once a step has run; none on Redis Cluster, which runs the steps
    as scripts. A server without Redis Functions has none."""
    if isinstance(client, redis.RedisCluster):
        return []
    try:
        listed: Any = client.function_list(library=f"{LIBRARY_PREFIX}*")
    except ResponseError as exc:
        if lacks_functions(exc):
            return []
        raise
    return sorted(as_text({as_text(k): v for k, v in zip(entry[::2], entry[1::2], strict=True)}["library_name"])
                  for entry in listed)  # fmt: skip


def unload_old_libraries(client: redis.Redis) -> list[str]:
    """Unload the worker libraries of other releases (`library_names`); returns their names.

    Safe during a rolling upgrade: a process of another release that still runs finds its library
    missing at its next step, loads it again (one round trip) and goes on, as after a restart of
    the server; only this release's library is never unloaded here."""
    old = [name for name in library_names(client) if name != library().name]
    for name in old:
        with contextlib.suppress(ResponseError):  # unloaded meanwhile by another such call
            client.function_delete(name)
    return old


def _sent(command: Send, failed: Exception | None) -> Steps[Any]:
    """``command``'s reply; or, where the driver sent it already, the error it got."""
    if failed is not None:
        raise failed
    return (yield command)


class _ClientScripts:
    """What both flavours' runners share: one per client (`of`, so what its runs learn, `ScriptCore`,
    is learnt once per client), and ASK followed to a new master on Redis Cluster. A runner refers
    to its client weakly: kept by `of` for as long as the client lives, and no longer."""

    _by_client: WeakKeyDictionary[Any, Any]
    _cluster: type  # the flavour's cluster client

    def __init_subclass__(cls) -> None:
        cls._by_client = WeakKeyDictionary()

    def __init__(self, client: Any) -> None:
        self._client_ref = weakref.ref(client)
        self.core = ScriptCore(cluster=isinstance(client, self._cluster))
        if self.core.cluster:
            follow_ask_to_new_masters(client)

    @classmethod
    def of(cls, client: Any) -> Self:
        found: Self | None = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    @property
    def _client(self) -> Any:
        return self._client_ref()  # alive: whoever runs a script holds its client

    @property
    def functions(self) -> bool:
        """The worker's library runs as functions on this client (`ScriptCore.functions`)."""
        return self.core.functions


class Scripts(_ClientScripts):
    """The scripts of one blocking client, by name: ``scripts("complete", keys, args)``
    (`Scripts.of(client)`: the same instance for every layer using the client)."""

    _cluster = redis.RedisCluster

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self._loaded: set[str] = set()  # loaded by `add_calls` (the server may have lost them since)

    def __call__(self, name: str, keys: list[str], args: list[Any], *, on: KeptConnection | None = None) -> Any:
        """Run script ``name``; with ``on``, its first command goes on that kept connection instead of
        through the client."""
        first = self.core.first(name, keys, args)
        failed: Exception | None = None
        if first is not None:
            try:
                if on is not None:
                    return on.send(first)
                return getattr(self._client, first.method)(*first.args)
            except Exception as exc:  # the core's steps take it from here
                failed = exc
        return drive(self.core.steps(name, keys, args, failed), self._perform)

    def send(self, name: str, keys: list[str], args: list[Any], *, on: KeptConnection) -> None:
        """Send script ``name``'s first command on ``on`` without reading its reply: `reply`, with the
        same call, reads it (after the replies of what was sent on ``on`` before). Not on Redis
        Cluster, which has no one connection to a script's keys."""
        first = self.core.first(name, keys, args)
        if first is None:
            raise RuntimeError("a script is sent on a kept connection only to one server")
        on.write(first)

    def reply(self, name: str, keys: list[str], args: list[Any], *, on: KeptConnection) -> Any:
        """The reply of the call `send` sent on ``on``; an error it answered is handled as a call's
        is (`__call__`): the script loaded and run again where the server lacks it, a script's
        error named by its file and line."""
        try:
            return on.read()
        except Exception as exc:  # the core's steps take it from here
            failed = exc
        return drive(self.core.steps(name, keys, args, failed), self._perform)

    def _perform(self, step: Any) -> Any:
        return perform(self._client, step)

    def run_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Run several scripts in one round trip (a pipeline of EVALSHA), or one by one on Redis
        Cluster (`add_calls`)."""
        if self.core.cluster or len(calls) == 1:
            return [self(name, keys, args) for name, keys, args in calls]
        trip = RoundTrip.on(self._client)
        ran = self.add_calls(trip, calls)
        trip.run()
        return ran.value

    def add_calls(self, trip: RoundTrip, calls: list[tuple[str, list[str], list[Any]]]) -> Part[list[Any]]:
        """Add script calls to the caller's round trip; the part's value is the scripts' replies (a
        script's error raised). A call the server did not know the script of (after SCRIPT FLUSH or
        a restart) is run again on its own, which loads it; the others ran once, in their place, as
        does a script loaded since this process started. (redis-py's own pipeline scripts ask
        SCRIPT EXISTS first: a second round trip every time.) On Redis Cluster, whose client
        refuses scripts in pipelines (their keys may live on different nodes), they are run here
        and now, one by one, and add no command."""
        if self.core.cluster:
            done = [self(name, keys, args) for name, keys, args in calls]
            return trip.part(lambda _replies: done)
        for name in {name for name, _, _ in calls} - self._loaded:  # loaded first, so they run in their place
            self._client.script_load(script_source(name))
            self._loaded.add(name)

        def read(replies: list[Any]) -> list[Any]:
            out = list(replies)
            for i, reply in enumerate(out):
                if isinstance(reply, NoScriptError):
                    out[i] = self(*calls[i])
                elif isinstance(reply, ResponseError):
                    raise located(calls[i][0], reply) from None
                elif isinstance(reply, Exception):
                    raise reply
            return out

        part = trip.part(read)
        for name, keys, args in calls:
            part.evalsha(self.core.sha(name), len(keys), *keys, *args)
        return part


class AsyncScripts(_ClientScripts):
    """The scripts of one asyncio client, by name: ``await scripts("complete", keys, args)``. A
    read-only script (`READ_ONLY_SCRIPTS`: the router's lookup) is first sent on the client's
    `ReadLane`."""

    _cluster = redis.asyncio.RedisCluster

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        pool = getattr(client, "connection_pool", None)
        self.lane = None if self.core.cluster or pool is None else ReadLane(pool, self._send)

    async def __call__(
        self, name: str, keys: list[str], args: list[Any], *, on: AsyncKeptConnection | None = None
    ) -> Any:
        """Run script ``name``; with ``on``, its first command goes on that kept connection instead of
        through the client."""
        first = self.core.first(name, keys, args)
        failed: Exception | None = None
        if first is not None:
            try:
                if on is not None:
                    return await on.send(first)
                if self.lane is not None and name in READ_ONLY_SCRIPTS:
                    return await self.lane.send(first)
                return await self._send(first)
            except Exception as exc:  # the core's steps take it from here
                failed = exc
        return await adrive(self.core.steps(name, keys, args, failed), self._perform)

    async def _send(self, command: Send) -> Any:
        """``command`` sent the client's usual way."""
        return await getattr(self._client, command.method)(*command.args)

    async def _perform(self, step: Any) -> Any:
        return await aperform(self._client, step)


#: A call on a lane that failed short of a reply: sent again the client's usual way.
_CUT_SHORT = (redis.ConnectionError, redis.TimeoutError, TimeoutError, OSError)

#: Connections a `ReadLane` keeps at most, and never more than a quarter of its pool's bound
#: (redis-py's default: 100): the rest of the pool stays for everything else, such as a burst of
#: lookups that each read the worker registry again.
LANE_CONNECTIONS = 16


class ReadLane:
    """A read-only script's command sent on connections of the client's pool kept for it, under one
    deadline a call.

    A command through ``redis.asyncio.Redis`` costs its client as much as the rest of an HTTP lookup:
    a connection taken from the pool and given back (a lock, observability records), a retry
    wrapper, and, with a socket timeout, a task for each write (``asyncio.wait_for``) and a timer for
    each read. Here a connection is taken from a free list, the command written and its reply read
    under one ``asyncio.timeout`` of the pool's socket timeout, and the connection put back.

    What this gives up is safe only for reads: a command that fails on a lane connection (refused,
    reset, timed out) is sent again the client's usual way, with its retries, health checks and, on
    a Sentinel client, a new master; redis-py closes the connection whatever interrupts a command
    (timeout, cancellation), so no late reply is read as the next one's, and the connection opens
    again on its next use. A reply that is an error (a function the server lacks) is raised as the
    client raises it, the connection kept. The connections stay taken from the pool, which closes
    them with its own (``aclose``); while all are busy, commands go the usual way."""

    def __init__(self, pool: Any, usual: Callable[[Send], Awaitable[Any]]) -> None:
        self._pool = pool
        self._usual = usual  # the command sent the client's usual way
        self._idle: list[Any] = []
        self._taken = 0
        bound = getattr(pool, "max_connections", None) or 4 * LANE_CONNECTIONS
        self._limit = min(LANE_CONNECTIONS, bound // 4)
        self._deadline: float | None = None

    @property
    def kept(self) -> int:
        """How many connections the lane has taken from the pool."""
        return self._taken

    async def send(self, command: Send) -> Any:
        """``command``'s reply (an FCALL or EVALSHA: `ScriptCore.first`)."""
        conn = self._idle.pop() if self._idle else None
        if conn is None and self._taken < self._limit:
            with contextlib.suppress(*_CUT_SHORT):  # not reached: the usual way retries and says why
                conn = await self._take()
        if conn is None:
            return await self._usual(command)
        try:
            async with asyncio.timeout(self._deadline):
                await conn.send_packed_command(_packed(conn, command), False)
                return await conn.read_response()
        except _CUT_SHORT:
            pass  # closed by redis-py, which connects it again when next used: sent again the usual way
        finally:
            self._idle.append(conn)
        return await self._usual(command)

    async def _take(self) -> Any:
        self._taken += 1  # before the wait: lookups at once count each other's
        try:
            conn = await self._pool.get_connection()
        except BaseException:
            self._taken -= 1
            raise
        self._deadline = conn.socket_timeout
        conn.socket_timeout = None  # the call's deadline is `send`'s
        return conn


def _packed(conn: Any, command: Send) -> Any:
    """``command`` in the protocol: packed by hiredis where it is installed (as redis-py's blocking
    connections pack; its asyncio ones pack in Python, at a few microseconds an argument)."""
    if HIREDIS_AVAILABLE:
        return [hiredis.pack_command((command.method.upper(), *command.args))]
    return conn.pack_command(command.method.upper(), *command.args)


class KeptConnection:
    """A connection taken from a blocking client's pool and kept, for one thread's long run of script
    calls (a worker runtime's slot, `layers.plumbing.runners.SyncLane`): what redis-py spends on a
    command's way through its client (the pool's lock and bookkeeping, its retry wrapper, its
    observability records: about a third of a short script's round trip) is paid once. A command cut
    short (reset, timed out) is not sent again here: redis-py closes the connection (it opens again
    at its next use) and the error goes to the caller, who knows whether a write may be sent again.
    A reply that is an error is raised as the client raises it."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.conn = pool.get_connection()

    def send(self, command: Send) -> Any:
        self.write(command)
        return self.conn.read_response()

    def write(self, command: Send) -> None:
        """Send ``command`` without reading its reply (`read` reads the replies in the order sent)."""
        self.conn.send_packed_command(_packed(self.conn, command), False)

    def read(self, *, raw: bool = False) -> Any:
        """The next reply; ``raw``: bytes left undecoded, whatever the client decodes."""
        return self.conn.read_response(disable_decoding=True) if raw else self.conn.read_response()

    def drop(self) -> None:
        """Close the connection (a reply may be on its way that nobody is to read) and give it back."""
        self.conn.disconnect()
        self.pool.release(self.conn)

    def close(self) -> None:
        self.pool.release(self.conn)


#: Replies an `AsyncKeptConnection` reads under one deadline before it puts the deadline off.
REPLIES_A_DEADLINE = 64


class AsyncKeptConnection:
    """`KeptConnection` on asyncio, shared by the tasks of one loop (`layers.plumbing.runners.AsyncLane`:
    a worker runtime's slots), its calls pipelined: a call waits unsent, what waits is written at once
    when the loop next turns, and the replies are read in their order by a reader of their
    own, while later calls are written (as ioredis's auto-pipelining does). So N tasks that call
    together cost one write and one wake-up of the loop, not N, and neither side waits for the
    other's batch: on asyncio what a call costs the client (a system call, a turn of the loop) is
    most of it. A write, and a read while replies are awaited, go under the pool's socket timeout
    (redis.asyncio's own would make a task of each write). A connection cut short fails every call
    still waiting for its reply (redis-py closes it; it opens again at the next write): none is
    sent again here. Made by `take`."""

    def __init__(self, pool: Any, conn: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.deadline = conn.socket_timeout
        conn.socket_timeout = None  # the deadlines are `_write`'s and `_read`'s
        self._unsent: list[tuple[Send, asyncio.Future[Any]]] = []
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()  # written, in order
        self._writing: asyncio.Task[None] | None = None
        self._reading: asyncio.Task[None] | None = None

    @classmethod
    async def take(cls, pool: Any) -> AsyncKeptConnection:
        return cls(pool, await pool.get_connection())

    def send(self, command: Send) -> asyncio.Future[Any]:
        """``command`` added to what waits unsent; the future of its reply (a future, not a coroutine:
        one frame less a call)."""
        future = asyncio.get_running_loop().create_future()
        self._unsent.append((command, future))
        if self._writing is None:
            self._writing = asyncio.create_task(self._write())
        return future

    async def _write(self) -> None:
        try:
            while self._unsent:
                batch, self._unsent = self._unsent, []
                data = b"".join(b"".join(_packed(self.conn, command)) for command, _ in batch)
                self._waiting.extend(future for _, future in batch)
                try:
                    async with asyncio.timeout(self.deadline):
                        await self.conn.send_packed_command(data, False)
                except BaseException as exc:
                    await self._cut(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                if self._reading is None:
                    self._reading = asyncio.create_task(self._read())
        finally:
            self._writing = None

    async def _read(self) -> None:
        """Read the replies in order while any are awaited. One deadline serves a run of reads, put off
        every `REPLIES_A_DEADLINE` replies (a deadline costs a timer, about as much as the rest of a
        reply's reading): replies must keep coming, that many every socket timeout."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.deadline) as deadline:
                read = 0
                while self._waiting:
                    try:
                        reply = await self.conn.read_response()
                    except ResponseError as exc:  # a reply that is an error: the others stand
                        _settle(self._waiting.popleft(), exc)
                        continue
                    future = self._waiting.popleft()
                    if not future.done():  # its caller may have been cancelled
                        future.set_result(reply)
                    read += 1
                    if self.deadline is not None and read % REPLIES_A_DEADLINE == 0:
                        deadline.reschedule(loop.time() + self.deadline)
        except BaseException as exc:
            await self._cut(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._reading = None

    async def _cut(self, exc: BaseException) -> None:
        """The connection cut short: what waits for a reply fails (a cancelled read cancels it)."""
        failed = exc if isinstance(exc, Exception) else redis.ConnectionError("cancelled")
        waiting, self._waiting = self._waiting, collections.deque()
        await self.conn.disconnect()
        for future in waiting:
            _settle(future, failed)

    async def close(self) -> None:
        for task in (self._writing, self._reading):
            if task is not None:
                with contextlib.suppress(Exception):
                    await task
        self.conn.socket_timeout = self.deadline
        await self.pool.release(self.conn)


def _settle(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)

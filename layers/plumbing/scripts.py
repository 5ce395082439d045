"""Loads the Lua scripts in ``layers/<room>/lua`` once and registers them on a client.

A script is named by its file's name, unique across the rooms (`lua_files`); a helper may live in
another room than the scripts that include it (the shared ones are in ``layers/plumbing/lua``).

A script names the helper files it uses in a header line, ``-- include: _checks.lua, _record.lua``
(a helper may include others the same way); they are put before it, each once, and nothing else
is, since defining functions and tables costs every call (~6 us of server time for
``_record.lua``, a quarter of the query router's lookup).

The worker's hot steps and the query router's lookup (`LIBRARY_SCRIPTS`) run instead as the
functions of one Redis Functions library (``FUNCTION LOAD``, ``FCALL``), where the client is not a
cluster client: the helpers are then defined once, when the library loads, and FCALL itself costs
Redis less than EVALSHA; together about a third of a step's server time. The library's name carries a hash of its text,
so releases side by side each call their own; a server that lost it (restarted without
persistence, ``FUNCTION FLUSH``) is sent it again, a server without functions (before Redis 7)
runs the same files as scripts. On Redis Cluster they run as scripts too: redis-py would ask the
server for an FCALL's keys (COMMAND GETKEYS) before every call. Redis reports an error at a line of
what it was sent; `Scripts` puts the line of the script's own file (or helper's) in the error it
raises instead. redis-py's ``Script`` runs ``EVALSHA`` and reloads the script itself after a
``SCRIPT FLUSH`` or a server restart. On Redis Cluster a script that a slot move refuses is sent
again (`layers.plumbing.slot_moves`), and one a node has not loaded (a new master, the target of an ASK)
is sent whole with ``EVAL``, which loads it on the node that runs it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from weakref import WeakKeyDictionary

import redis
from redis.commands.core import Script
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from layers.plumbing.slot_moves import follow_ask_to_new_masters, ride_out

_INCLUDE = re.compile(r"^-- include: *(.+)$", re.MULTILINE)
_LINE = re.compile(r"user_(?:script|function):(\d+)")

#: The scripts that run as the functions of the library (see above): the worker's steps and the
#: query router's lookup.
LIBRARY_SCRIPTS = ("claim", "start", "heartbeat", "complete", "lookup")
#: Those of them that write nothing: registered ``no-writes``, so that they run on a replica and on
#: a server past its maxmemory as their scripts do; where the library cannot be loaded (those
#: refuse FUNCTION LOAD) they run as scripts (`refuses_load`).
READ_ONLY_SCRIPTS = frozenset({"lookup"})
_LIBRARY_LINE = "<library>"


@dataclass(frozen=True, slots=True)
class Assembled:
    """A script as sent to Redis, and where each of its lines comes from."""

    text: str
    parts: tuple[tuple[str, int], ...]  # (file, how many lines it gave), in order

    def where(self, line: int) -> str:
        """``layers/<room>/lua/<file>:<line>`` for a line of `text` (1-based)."""
        first = 1
        for name, count in self.parts:
            if line < first + count:
                return name if name == _LIBRARY_LINE else f"{lua_path(name)}:{line - first + 1}"
            first += count
        return f"{lua_path(self.parts[-1][0])}:{line}"

    def located(self, exc: ResponseError) -> ResponseError:
        """``exc`` with each ``user_script:N`` of its message named by file and line."""
        message = str(exc)
        named = _LINE.sub(lambda m: self.where(int(m[1])), message)
        return exc if named == message else type(exc)(named)


def includes(text: str) -> list[str]:
    """The helper files a script's ``-- include:`` lines name, in order."""
    return [name.strip() for line in _INCLUDE.findall(text) for name in line.split(",") if name.strip()]


#: The rooms of `layers` that hold Lua, each in its ``lua`` folder.
LUA_ROOMS = ("plumbing", "active", "archive", "control")


@cache
def lua_files() -> dict[str, str]:
    """Every script and helper file by its name: the room it lives in."""
    found: dict[str, str] = {}
    for room in LUA_ROOMS:
        for entry in (resources.files("layers") / room / "lua").iterdir():
            if entry.name.endswith(".lua"):
                if entry.name in found:
                    raise ValueError(f"{entry.name} is in both layers/{found[entry.name]}/lua and layers/{room}/lua")
                found[entry.name] = room
    return found


def lua_path(file: str) -> str:
    """``layers/<room>/lua/<file>``: where a script or helper file lives in the repository."""
    return f"layers/{lua_files()[file]}/lua/{file}"


@cache
def _lua(file: str) -> str:
    text = (resources.files("layers") / lua_files()[file] / "lua" / file).read_text(encoding="utf-8")
    return text if text.endswith("\n") else text + "\n"


def _with_helpers(files: list[str]) -> list[str]:
    """``files`` after the helpers they include (transitively), each once, helpers first."""
    order: list[str] = []

    def visit(file: str, seen: tuple[str, ...]) -> None:
        if file in order:
            return
        if file in seen:
            raise ValueError(f"{lua_path(file)} includes itself through {' -> '.join(seen)}")
        for helper in includes(_lua(file)):
            visit(helper, (*seen, file))
        order.append(file)

    for file in files:
        visit(file, ())
    return order


def _joined(pieces: list[tuple[str, str]]) -> Assembled:
    """(where, text) pieces, one after the other."""
    return Assembled("".join(text for _, text in pieces), tuple((where, text.count("\n")) for where, text in pieces))


@cache
def assembled(name: str) -> Assembled:
    return _joined([(file, _lua(file)) for file in _with_helpers([f"{name}.lua"])])


@dataclass(frozen=True, slots=True)
class Library:
    """The worker's library: its source for FUNCTION LOAD, its name, its functions by script."""

    source: Assembled
    name: str

    functions: dict[str, str]  # script name -> function name

    def function(self, script: str) -> str:
        return self.functions[script]


@cache
def library() -> Library:
    """`LIBRARY_SCRIPTS` as the functions of one library: their helpers first, once, then each
    script's text as the body of a function of ``(KEYS, ARGV)``."""
    files = [f"{name}.lua" for name in LIBRARY_SCRIPTS]
    helpers = [file for file in _with_helpers(files) if file not in files]
    body: list[tuple[str, str]] = [(file, _lua(file)) for file in helpers]
    for name in LIBRARY_SCRIPTS:
        if name in READ_ONLY_SCRIPTS:
            named = f"function_name='{{name}}_{name}', flags={{'no-writes'}}"
            opening = f"redis.register_function{{{named}, callback=function(KEYS, ARGV)\n"
            closing = "end}\n"
        else:
            opening, closing = f"redis.register_function('{{name}}_{name}', function(KEYS, ARGV)\n", "end)\n"
        body += [(_LIBRARY_LINE, opening), (f"{name}.lua", _lua(f"{name}.lua")), (_LIBRARY_LINE, closing)]
    digest = hashlib.sha1("".join(text for _, text in body).encode()).hexdigest()[:12]
    lib_name = f"partarchive_{digest}"
    body = [(where, text.replace("{name}", lib_name) if where == _LIBRARY_LINE else text) for where, text in body]
    functions = {name: f"{lib_name}_{name}" for name in LIBRARY_SCRIPTS}
    return Library(_joined([(_LIBRARY_LINE, f"#!lua name={lib_name}\n"), *body]), lib_name, functions)


def is_missing_function(exc: ResponseError) -> bool:
    """The server has not loaded the library (restarted, flushed, a new node)."""
    return str(exc).startswith("Function not found")


def lacks_functions(exc: ResponseError) -> bool:
    """The server has no Redis Functions (before Redis 7), or the client's user may not load or
    call them (an ACL that allows scripts only): the steps run as scripts instead."""
    text = str(exc)
    return "unknown command" in text.lower() or text.startswith("NOPERM") or isinstance(exc, NoPermissionError)


def refuses_load(name: str, exc: ResponseError) -> bool:
    """The server refused to load the library (a replica, maxmemory reached) and script ``name``
    writes nothing, so it can run as a script there instead."""
    return name in READ_ONLY_SCRIPTS and not lacks_functions(exc) and not str(exc).startswith("ERR Error compiling")


def located(name: str, exc: ResponseError) -> ResponseError:
    """An error Redis answered to script ``name``, its lines named in the script's own files."""
    if "user_function:" in str(exc):
        return library().source.located(exc)
    return assembled(name).located(exc)


def script_source(name: str) -> str:
    """What is sent to Redis for script ``name``: its included helpers, then itself."""
    return assembled(name).text


class Scripts:
    """The scripts registered on one client, by name: ``scripts("complete", keys, args)``.

    `Scripts.of(client)` gives every layer using a client the same instance, so each script is
    read, hashed and registered once per client.
    """

    _by_client: WeakKeyDictionary[redis.Redis, Scripts] = WeakKeyDictionary()

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._registered: dict[str, Script] = {}
        self._loaded: set[str] = set()  # loaded by `queue_calls` (the server may have lost them since)
        self._cluster = isinstance(client, redis.RedisCluster)
        self.functions = not self._cluster  # the library (`LIBRARY_SCRIPTS`) runs as functions
        self.as_scripts: set[str] = set()  # read-only ones run as scripts: the server refused the library
        if self._cluster:
            follow_ask_to_new_masters(client)

    @classmethod
    def of(cls, client: redis.Redis) -> Scripts:
        found = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    def _script(self, name: str) -> Script:
        script = self._registered.get(name)
        if script is None:
            script = self._client.register_script(script_source(name))
            self._registered[name] = script
        return script

    def sha(self, name: str) -> str:
        """The SHA1 of a script, for a caller that sends ``EVALSHA`` itself (and runs the call again
        through `__call__`, which loads the script, if the server answers ``NOSCRIPT``)."""
        return str(self._script(name).sha)

    def __call__(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        if self.functions and name in LIBRARY_SCRIPTS and name not in self.as_scripts:
            return self._fcall(name, keys, args, client or self._client)
        script = self._script(name)
        try:
            if not self._cluster:
                return script(keys=keys, args=args, client=client)
            on = client or self._client
            return ride_out(lambda: _run_anywhere(on, script, keys, args), name)
        except NoScriptError:
            raise
        except ResponseError as exc:
            raise located(name, exc) from None

    def _fcall(self, name: str, keys: list[str], args: list[Any], client: Any) -> Any:
        function = library().function(name)
        for attempt in (1, 2):
            try:
                if attempt == 2 and not self._load(name, client):  # the server has not loaded the library
                    return self(name, keys, args, client)  # and refused it: `name` runs as a script
                return client.fcall(function, len(keys), *keys, *args)
            except ResponseError as exc:
                if lacks_functions(exc):
                    self.functions = False
                    return self(name, keys, args, client)
                if attempt == 2 or not is_missing_function(exc):
                    raise located(name, exc) from None
        raise AssertionError("unreachable")

    def _load(self, name: str, client: Any) -> bool:
        """Load the library; False where the server refused and script ``name`` can run instead."""
        try:
            load_library(client)
        except ResponseError as exc:
            if not refuses_load(name, exc):
                raise
            self.as_scripts.add(name)
            return False
        return True

    def run_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Run several scripts in one round trip (a pipeline of EVALSHA), or one by one on Redis
        Cluster (`queue_calls`)."""
        if self._cluster or len(calls) == 1:
            return [self(name, keys, args) for name, keys, args in calls]
        pipe = self._client.pipeline(transaction=False)
        _, finish = self.queue_calls(pipe, calls)
        return finish(pipe.execute(raise_on_error=False))

    def queue_calls(
        self, pipe: Any, calls: list[tuple[str, list[str], list[Any]]]
    ) -> tuple[int, Callable[[Sequence[Any]], list[Any]]]:
        """Queue script calls on the caller's pipeline (to be run with ``raise_on_error=False``);
        returns how many replies they take, first in the pipeline's, and the function that turns
        those replies into the scripts' (raising a script's error). A call the server did not know
        the script of (after SCRIPT FLUSH or a restart) is run again on its own, which loads it; the
        others ran once, in their place, as does a script loaded since this process started.
        (redis-py's own pipeline scripts ask SCRIPT EXISTS first: a second round trip every time.)
        On Redis Cluster, whose client refuses scripts in pipelines (their keys may live on
        different nodes), they are run here and now, one by one, and take no reply."""
        if self._cluster:
            done = [self(name, keys, args) for name, keys, args in calls]
            return 0, lambda _replies: done
        for name in {name for name, _, _ in calls} - self._loaded:  # loaded first, so they run in their place
            self._client.script_load(self._script(name).script)
            self._loaded.add(name)
        for name, keys, args in calls:
            pipe.evalsha(self._script(name).sha, len(keys), *keys, *args)

        def finish(replies: Sequence[Any]) -> list[Any]:
            out = list(replies[: len(calls)])
            for i, reply in enumerate(out):
                if isinstance(reply, NoScriptError):
                    out[i] = self(*calls[i])
                elif isinstance(reply, ResponseError):
                    raise located(calls[i][0], reply) from None
                elif isinstance(reply, Exception):
                    raise reply
            return out

        return len(calls), finish


def load_library(client: Any) -> None:
    """FUNCTION LOAD the worker's library, unless the server has it already."""
    try:
        client.function_load(library().source.text)
    except ResponseError as exc:
        if "already exists" not in str(exc):
            raise


def _run_anywhere(client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA, or EVAL with the source where the node that runs it has not loaded the script."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.script, len(keys), *keys, *args)

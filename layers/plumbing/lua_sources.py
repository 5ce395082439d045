"""The Lua scripts in ``layers/<room>/lua``, as sent to Redis: each with its helpers, and the
worker's library.

A script is named by its file's name, unique across the rooms (`lua_files`); a helper may live in
another room than the scripts that include it (the shared ones are in ``layers/plumbing/lua``).

A script names the helper files it uses in a header line, ``-- include: _checks.lua, _record.lua``
(a helper may include others the same way); they are put before it, each once, and nothing else
is, since defining functions and tables costs every call (~6 us of server time for
``_record.lua``, a quarter of the query router's lookup).

The worker's hot steps and the query router's lookup (`LIBRARY_SCRIPTS`) run instead as the
functions of one Redis Functions library (``FUNCTION LOAD``, ``FCALL``), where the client is not a
cluster client: the helpers are then defined once, when the library loads, and FCALL itself costs
Redis less than EVALSHA; together about a third of a step's server time. The library's name
carries a hash of its text, so releases side by side each call their own. Redis reports an error
at a line of what it was sent; `located` names the line of the script's own file (or helper's)
instead. How a script is run is `layers.plumbing.scripts`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from redis.exceptions import NoPermissionError, ResponseError

_INCLUDE = re.compile(r"^-- include: *(.+)$", re.MULTILINE)
_LINE = re.compile(r"user_(?:script|function):(\d+)")

#: The scripts that run as the functions of the library (see above): the worker's steps (the runtime's
#: finish-and-claim among them) and the query router's lookup.
LIBRARY_SCRIPTS = ("claim", "start", "heartbeat", "complete", "finish", "lookup")
#: Those of them that write nothing: registered ``no-writes``, so that they run on a replica and on
#: a server past its maxmemory as their scripts do; where the library cannot be loaded (those
#: refuse FUNCTION LOAD) they run as scripts (`refuses_load`).
READ_ONLY_SCRIPTS = frozenset({"lookup"})
_LIBRARY_LINE = "<library>"
#: The start of every release's library name (the rest a hash of its text, `library`).
LIBRARY_PREFIX = "partarchive_"


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
    lib_name = f"{LIBRARY_PREFIX}{digest}"
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

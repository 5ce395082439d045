"""Loads the Lua scripts in ``layers/lua`` once and registers them on a client.

A script names the helper files it uses in a header line, ``-- include: _checks.lua, _record.lua``
(a helper may include others the same way); they are put before it, each once, and nothing else
is, since defining functions and tables costs every call (~6 us of server time for
``_record.lua``, a quarter of the query router's lookup). Redis reports an error at a line of
what it was sent; `Scripts` puts the line of the script's own file (or helper's) in the error it
raises instead. redis-py's ``Script`` runs ``EVALSHA`` and reloads the script itself after a
``SCRIPT FLUSH`` or a server restart. On Redis Cluster a script that a slot move refuses is sent
again (`layers.slot_moves`), and one a node has not loaded (a new master, the target of an ASK)
is sent whole with ``EVAL``, which loads it on the node that runs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from weakref import WeakKeyDictionary

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from layers.slot_moves import follow_ask_to_new_masters, ride_out

_INCLUDE = re.compile(r"^-- include: *(.+)$", re.MULTILINE)
_LINE = re.compile(r"user_script:(\d+)")


@dataclass(frozen=True, slots=True)
class Assembled:
    """A script as sent to Redis, and where each of its lines comes from."""

    text: str
    parts: tuple[tuple[str, int], ...]  # (file, how many lines it gave), in order

    def where(self, line: int) -> str:
        """``layers/lua/<file>:<line>`` for a line of `text` (1-based)."""
        first = 1
        for name, count in self.parts:
            if line < first + count:
                return f"layers/lua/{name}:{line - first + 1}"
            first += count
        return f"layers/lua/{self.parts[-1][0]}:{line}"

    def located(self, exc: ResponseError) -> ResponseError:
        """``exc`` with each ``user_script:N`` of its message named by file and line."""
        message = str(exc)
        named = _LINE.sub(lambda m: self.where(int(m[1])), message)
        return exc if named == message else type(exc)(named)


def includes(text: str) -> list[str]:
    """The helper files a script's ``-- include:`` lines name, in order."""
    return [name.strip() for line in _INCLUDE.findall(text) for name in line.split(",") if name.strip()]


@cache
def assembled(name: str) -> Assembled:
    folder = resources.files("layers") / "lua"
    order: list[str] = []

    def visit(file: str, seen: tuple[str, ...]) -> None:
        if file in order:
            return
        if file in seen:
            raise ValueError(f"layers/lua/{file} includes itself through {' -> '.join(seen)}")
        for helper in includes((folder / file).read_text(encoding="utf-8")):
            visit(helper, (*seen, file))
        order.append(file)

    visit(f"{name}.lua", ())
    texts = [(folder / file).read_text(encoding="utf-8") for file in order]
    texts = [text if text.endswith("\n") else text + "\n" for text in texts]
    return Assembled("".join(texts), tuple((file, text.count("\n")) for file, text in zip(order, texts, strict=True)))


def located(name: str, exc: ResponseError) -> ResponseError:
    """An error Redis answered to script ``name``, its lines named in the script's own files."""
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


def _run_anywhere(client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA, or EVAL with the source where the node that runs it has not loaded the script."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.script, len(keys), *keys, *args)

"""The scripts in ``layers/<room>/lua`` run on a blocking client: ``Scripts.of(client)(name, keys, args)``.

What is sent is `layers.plumbing.lua_sources`' (a script with its helpers, the worker's library);
how it is run, FCALL or EVALSHA, loading what the server lacks, riding out a slot move on Redis
Cluster and naming a failed line by its file, is `layers.plumbing.script_core.ScriptCore`, which
`layers.plumbing.scripts_async.AsyncScripts` drives alike on asyncio. Here too: several scripts in
one round trip (`run_many`, `queue_calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary

import redis
from redis.exceptions import NoScriptError, ResponseError

from layers.plumbing.drive import drive, perform
from layers.plumbing.lua_sources import (
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
from layers.plumbing.script_core import ScriptCore
from layers.plumbing.slot_moves import follow_ask_to_new_masters

__all__ = [
    "LIBRARY_SCRIPTS",
    "LUA_ROOMS",
    "READ_ONLY_SCRIPTS",
    "Assembled",
    "Library",
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


class Scripts:
    """The scripts of one blocking client, by name: ``scripts("complete", keys, args)``.

    `Scripts.of(client)` gives every layer using a client the same instance, so what its runs
    learn (`ScriptCore`) is learnt once per client.
    """

    _by_client: WeakKeyDictionary[redis.Redis, Scripts] = WeakKeyDictionary()

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.core = ScriptCore(cluster=isinstance(client, redis.RedisCluster))
        self._loaded: set[str] = set()  # loaded by `queue_calls` (the server may have lost them since)
        if self.core.cluster:
            follow_ask_to_new_masters(client)

    @classmethod
    def of(cls, client: redis.Redis) -> Scripts:
        found = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    @property
    def functions(self) -> bool:
        """The worker's library runs as functions on this client (`ScriptCore.functions`)."""
        return self.core.functions

    def sha(self, name: str) -> str:
        """The SHA1 of a script, for a caller that sends ``EVALSHA`` itself (and runs the call again
        through `__call__`, which loads the script, if the server answers ``NOSCRIPT``)."""
        return self.core.sha(name)

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        first = self.core.first(name, keys, args)
        failed: Exception | None = None
        if first is not None:
            try:
                return getattr(self._client, first.method)(*first.args)
            except Exception as exc:  # the core's steps take it from here
                failed = exc
        return drive(self.core.steps(name, keys, args, failed), self._perform)

    def _perform(self, step: Any) -> Any:
        return perform(self._client, step)

    def run_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Run several scripts in one round trip (a pipeline of EVALSHA), or one by one on Redis
        Cluster (`queue_calls`)."""
        if self.core.cluster or len(calls) == 1:
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
        if self.core.cluster:
            done = [self(name, keys, args) for name, keys, args in calls]
            return 0, lambda _replies: done
        for name in {name for name, _, _ in calls} - self._loaded:  # loaded first, so they run in their place
            self._client.script_load(script_source(name))
            self._loaded.add(name)
        for name, keys, args in calls:
            pipe.evalsha(self.core.sha(name), len(keys), *keys, *args)

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

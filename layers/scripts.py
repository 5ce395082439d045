"""Loads the Lua scripts in ``layers/lua`` once and registers them on a client.

A script gets each shared helper file (``_decimal.lua``, ``_record.lua``) that it uses
prepended, and runs without the others, since defining their functions and tables costs every
call (~6 us of server time for ``_record.lua``, a quarter of the query router's lookup).
redis-py's ``Script`` runs ``EVALSHA`` and reloads the script itself after a ``SCRIPT FLUSH``
or a server restart. On Redis Cluster a script that a slot move refuses is sent again
(`layers.slot_moves`), and one a node has not loaded (a new master, the target of an ASK) is
sent whole with ``EVAL``, which loads it on the node that runs it.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any
from weakref import WeakKeyDictionary

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from layers.slot_moves import follow_ask_to_new_masters, ride_out

PRELUDES = ("_decimal.lua", "_record.lua")


@cache
def script_source(name: str) -> str:
    folder = resources.files("layers") / "lua"
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    preludes = [(folder / prelude).read_text(encoding="utf-8") for prelude in PRELUDES]
    return "\n".join([*(prelude for prelude in preludes if uses_prelude(prelude, body)), body])


def uses_prelude(prelude: str, body: str) -> bool:
    """Whether ``body`` names anything ``prelude`` defines (comments and string literals aside; a
    local of the same name counts too, which only costs the prelude)."""
    names = re.findall(r"^local (?:function )?(\w+)", prelude, re.MULTILINE)
    code = re.sub(r"--[^\n]*|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", " ", body)
    return re.search(rf"\b(?:{'|'.join(names)})\b", code) is not None


class Scripts:
    """The scripts registered on one client, by name: ``scripts("complete", keys, args)``.

    `Scripts.of(client)` gives every layer using a client the same instance, so each script is
    read, hashed and registered once per client.
    """

    _by_client: WeakKeyDictionary[redis.Redis, Scripts] = WeakKeyDictionary()

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._registered: dict[str, Script] = {}
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
        if not self._cluster:
            return script(keys=keys, args=args, client=client)
        on = client or self._client
        return ride_out(lambda: _run_anywhere(on, script, keys, args), name)

    def run_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Run several scripts in one round trip (a pipeline of EVALSHA), or one by one on Redis
        Cluster, whose client refuses scripts in pipelines (their keys may live on different
        nodes). A call the server did not know the script of (after SCRIPT FLUSH or a restart)
        is run again on its own, which loads it; the others ran once. (redis-py's own pipeline
        scripts ask SCRIPT EXISTS first: a second round trip every time.)"""
        if self._cluster or len(calls) == 1:
            return [self(name, keys, args) for name, keys, args in calls]
        pipe = self._client.pipeline(transaction=False)
        for name, keys, args in calls:
            pipe.evalsha(self._script(name).sha, len(keys), *keys, *args)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[i] = self(*calls[i])
            elif isinstance(reply, Exception):
                raise reply
        return replies


def _run_anywhere(client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
    """EVALSHA, or EVAL with the source where the node that runs it has not loaded the script."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.script, len(keys), *keys, *args)

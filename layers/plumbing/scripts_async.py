"""The scripts in ``layers/<room>/lua`` run on a `redis.asyncio` client: EVALSHA, and after ``NOSCRIPT``
(a server restarted or flushed its scripts, a cluster node that never saw them) SCRIPT LOAD and
EVALSHA again; the worker's library (`layers.plumbing.scripts.LIBRARY_SCRIPTS`) as functions, loaded when
the server lacks them. The sources are `layers.plumbing.scripts`' own, as for the synchronous
`layers.plumbing.scripts.Scripts`.
"""

from __future__ import annotations

import hashlib
from typing import Any
from weakref import WeakKeyDictionary

import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError

from layers.plumbing.scripts import (
    LIBRARY_SCRIPTS,
    is_missing_function,
    lacks_functions,
    library,
    located,
    refuses_load,
    script_source,
)


class AsyncScripts:
    """The scripts of one asyncio client, by name: ``await scripts("complete", keys, args)``."""

    _by_client: WeakKeyDictionary[Any, AsyncScripts] = WeakKeyDictionary()

    def __init__(self, client: Any) -> None:
        self._client = client
        self._shas: dict[str, str] = {}
        self.functions = not isinstance(client, redis.asyncio.RedisCluster)
        self.as_scripts: set[str] = set()  # as `layers.plumbing.scripts.Scripts.as_scripts`

    @classmethod
    def of(cls, client: Any) -> AsyncScripts:
        found = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    def sha(self, name: str) -> str:
        sha = self._shas.get(name)
        if sha is None:
            sha = self._shas[name] = hashlib.sha1(script_source(name).encode()).hexdigest()
        return sha

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if self.functions and name in LIBRARY_SCRIPTS and name not in self.as_scripts:
            return await self._fcall(name, keys, args)
        try:
            return await self._client.evalsha(self.sha(name), len(keys), *keys, *args)
        except NoScriptError:
            loaded = await self._client.script_load(script_source(name))
            self._shas[name] = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
            return await self._client.evalsha(self._shas[name], len(keys), *keys, *args)

    async def _fcall(self, name: str, keys: list[str], args: list[Any]) -> Any:
        function = library().function(name)
        for attempt in (1, 2):
            try:
                if attempt == 2 and not await self._load(name):  # the server has not loaded the library
                    return await self(name, keys, args)  # and refused it: `name` runs as a script
                return await self._client.fcall(function, len(keys), *keys, *args)
            except ResponseError as exc:
                if lacks_functions(exc):
                    self.functions = False
                    return await self(name, keys, args)
                if attempt == 2 or not is_missing_function(exc):
                    raise located(name, exc) from None
        raise AssertionError("unreachable")

    async def _load(self, name: str) -> bool:
        """As `layers.plumbing.scripts.Scripts._load`."""
        try:
            await self._client.function_load(library().source.text)
        except ResponseError as exc:
            if "already exists" in str(exc):
                return True
            if not refuses_load(name, exc):
                raise
            self.as_scripts.add(name)
            return False
        return True

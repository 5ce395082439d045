"""The scripts in ``layers/lua`` run on a `redis.asyncio` client: EVALSHA, and after ``NOSCRIPT``
(a server restarted or flushed its scripts, a cluster node that never saw them) SCRIPT LOAD and
EVALSHA again. The sources, with their preludes, are `layers.scripts.script_source`'s, as for the
synchronous `layers.scripts.Scripts`.
"""

from __future__ import annotations

import hashlib
from typing import Any
from weakref import WeakKeyDictionary

from redis.exceptions import NoScriptError

from layers.scripts import script_source


class AsyncScripts:
    """The scripts of one asyncio client, by name: ``await scripts("complete", keys, args)``."""

    _by_client: WeakKeyDictionary[Any, AsyncScripts] = WeakKeyDictionary()

    def __init__(self, client: Any) -> None:
        self._client = client
        self._shas: dict[str, str] = {}

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
        try:
            return await self._client.evalsha(self.sha(name), len(keys), *keys, *args)
        except NoScriptError:
            loaded = await self._client.script_load(script_source(name))
            self._shas[name] = loaded.decode() if isinstance(loaded, bytes) else str(loaded)
            return await self._client.evalsha(self._shas[name], len(keys), *keys, *args)

"""The scripts in ``layers/<room>/lua`` run on a `redis.asyncio` client: the steps of
`layers.plumbing.script_core.ScriptCore` awaited, as `layers.plumbing.scripts.Scripts` runs them
blocking (so both load what the server lacks, ride out a slot move on Redis Cluster and name a
failed line by its file alike)."""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

import redis.asyncio

from layers.plumbing.drive import adrive, aperform
from layers.plumbing.script_core import ScriptCore
from layers.plumbing.slot_moves import follow_ask_to_new_masters


class AsyncScripts:
    """The scripts of one asyncio client, by name: ``await scripts("complete", keys, args)``."""

    _by_client: WeakKeyDictionary[Any, AsyncScripts] = WeakKeyDictionary()

    def __init__(self, client: Any) -> None:
        self._client = client
        self.core = ScriptCore(cluster=isinstance(client, redis.asyncio.RedisCluster))
        if self.core.cluster:
            follow_ask_to_new_masters(client)

    @classmethod
    def of(cls, client: Any) -> AsyncScripts:
        found = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    @property
    def functions(self) -> bool:
        """The worker's library runs as functions on this client (`ScriptCore.functions`)."""
        return self.core.functions

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        first = self.core.first(name, keys, args)
        failed: Exception | None = None
        if first is not None:
            try:
                return await getattr(self._client, first.method)(*first.args)
            except Exception as exc:  # the core's steps take it from here
                failed = exc
        return await adrive(self.core.steps(name, keys, args, failed), self._perform)

    async def _perform(self, step: Any) -> Any:
        return await aperform(self._client, step)

"""elk_coordinator's worker registry, for the worker runtime's processes of a namespace bound to a Go
deployment: each registers where Go's leader counts workers, so that Go's leader plans for them too,
and a partarchive leader counts Go's workers the same way.

As Go's ``RegisterWorker`` does (data/redis.go, FORMAT.md "Workers"): a member of Go's ``workers``
sorted set, ``{"worker_id":...,"register_time":...}`` (Go's ``encoding/json`` of ``WorkerInfo``, the
time RFC 3339 with nanoseconds in the host's zone), scored by the registration time in nanoseconds,
and ``heartbeat:<id>``, the registration time to the second, expiring in 180 s; refreshed while the
process beats (Go only extends its time to live: set again here with the same value, so a key that
expired in a stall comes back), and on a clean stop the member rewritten with its ``stop_time`` by
Go's own script (``elk_unregister.lua``) and the key deleted. Go's leader counts a worker alive while
its key exists (``KEYS heartbeat:*``); `GoWorkers.live` reads the same from the members and their keys,
without a scan.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from codec.gojson import GoTime, go_string
from layers.keys import ElkKeys, KeySchema
from layers.plumbing.replies import script_error
from layers.plumbing.steps import Batch, Script, Steps, one

#: Go's heartbeat key's time to live (``RegisterWorker``, ``RefreshWorkerHeartbeat``: 3 minutes).
HEARTBEAT_TTL_S = 180


def local_time(ns: int) -> GoTime:
    """``ns`` (unix nanoseconds) in this host's zone, as Go's ``time.Now()`` gives it."""
    seconds = ns // 10**9
    return GoTime(seconds, ns % 10**9, time.localtime(seconds).tm_gmtoff)


class GoWorkers:
    """Go's worker registry of a bound namespace, as steps (driven by the runtime's loop)."""

    def __init__(self, keys: KeySchema) -> None:
        if keys.elk is None:
            raise ValueError("Go's worker registry needs a namespace bound to an elk_coordinator deployment")
        self.keys = keys
        self.elk: ElkKeys = keys.elk

    def register(self, worker_id: str) -> Steps[str]:
        """Register ``worker_id`` as Go's RegisterWorker does; returns its heartbeat key's value."""
        now = time.time_ns()
        member = f'{{"worker_id":{go_string(worker_id)},"register_time":"{local_time(now).format()}"}}'
        registered = local_time(now - now % 10**9).format()
        batch = Batch()
        batch.zadd(self.elk.workers, {member: float(now)})
        batch.set(self.elk.heartbeat(worker_id), registered, ex=HEARTBEAT_TTL_S)
        yield batch
        return registered

    def refresh(self, worker_id: str, registered: str) -> Steps[None]:
        """Keep ``worker_id`` counted alive for another `HEARTBEAT_TTL_S`."""
        yield one().set(self.elk.heartbeat(worker_id), registered, ex=HEARTBEAT_TTL_S)

    def unregister(self, worker_id: str) -> Steps[bool]:
        """End the registration as Go's UnregisterWorker does (``elk_unregister.lua``)."""
        stop = local_time(time.time_ns() // 10**9 * 10**9).format()
        got = yield Script("elk_unregister", [self.elk.workers, self.elk.heartbeat(worker_id)], [worker_id, stop])
        script_error(got)
        return bool(got)

    def live(self) -> Steps[list[str]]:
        """The ids of the workers Go's leader counts alive now: registered, not stopped, their
        heartbeat key there."""
        members: Any = yield one().zrange(self.elk.workers, 0, -1)
        ids = []
        for member in members:
            try:
                info = orjson.loads(member)
            except orjson.JSONDecodeError:
                continue
            if isinstance(info, dict) and isinstance(info.get("worker_id"), str) and "stop_time" not in info:
                ids.append(info["worker_id"])
        if not ids:
            return []
        batch = Batch()
        for worker_id in ids:
            batch.exists(self.elk.heartbeat(worker_id))
        found = yield batch
        return sorted({worker_id for worker_id, there in zip(ids, found, strict=True) if int(there)})


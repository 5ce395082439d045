"""Which archivers are alive: a health entry per archiver, and the queue's dead consumers.

Each archiver beats every few seconds into one hash of its namespace (one key, so it works on
Redis Cluster and needs no SCAN): its process id, host, start time, last beat, archive rate and
its unacknowledged entries. Times come from the server's ``TIME``, so clocks of the hosts do not
matter. An entry not beaten for ``stale_after_s`` is a dead archiver's: it is shown as such and
dropped later. A consumer of the queue's group is deleted (``XGROUP DELCONSUMER``) only when
its archiver is not alive, its entries have all been claimed by others (none unacknowledged) and it has
been idle for longer than the claim time: deleting a consumer drops its unacknowledged entries, so a
consumer with one is never deleted, and the last two are checked in the script that
deletes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson
import redis

from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts

#: Seconds without a beat after which an archiver counts as dead.
STALE_AFTER_S = 30.0
#: Seconds after which a dead archiver's entry is removed from the hash.
FORGET_AFTER_S = 24 * 3600.0


def server_time(client: redis.Redis) -> float:
    """The server's clock (``TIME``), in unix seconds."""
    seconds, micros = client.time()  # type: ignore[misc]
    return int(seconds) + int(micros) / 1e6


@dataclass(frozen=True, slots=True)
class ArchiverHealth:
    consumer: str
    pid: int
    host: str
    started: float
    last_beat: float
    rate: float  # partitions archived per second since the previous beat
    uncommitted: int  # entries read and not yet committed (stored and shown as ``pending``, `to_dict`)
    archived: int = 0  # partitions archived since start
    stale_after_s: float = STALE_AFTER_S  # silent for longer than this: dead (3 beats)
    alive: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The fields, ``uncommitted`` under its stored name ``pending`` (read by archivers of earlier
        releases and shown by ``archivers --json``)."""
        body = asdict(self)
        body["pending"] = body.pop("uncommitted")
        return body


class Liveness:
    def __init__(self, client: redis.Redis, keys: KeySchema) -> None:
        self.redis = client
        self.keys = keys

    def beat(self, health: ArchiverHealth) -> float:
        """Record ``health`` with the server's time as its last beat; returns that time."""
        now = server_time(self.redis)
        body = health.to_dict()
        body.update(last_beat=now, alive=True)
        self.redis.hset(self.keys.archivers, health.consumer, orjson.dumps(body))
        return now

    def leave(self, consumer: str) -> None:
        """An archiver stopping cleanly takes its entry out."""
        self.redis.hdel(self.keys.archivers, consumer)

    def archivers(self, *, include_dead: bool = False) -> list[ArchiverHealth]:
        """Archivers that beat within their ``stale_after_s`` (and dead ones too with
        ``include_dead``), by consumer name; an entry that does not decode counts as dead."""
        now = server_time(self.redis)
        return archivers_from(self.redis.hgetall(self.keys.archivers), now, include_dead=include_dead)

    def forget_dead(self, forget_after_s: float = FORGET_AFTER_S) -> int:
        """Remove entries of archivers silent for ``forget_after_s``."""
        now = server_time(self.redis)
        raw: Any = self.redis.hgetall(self.keys.archivers)
        gone = [name for name, value in raw.items() if now - _decode(as_text(name), value).last_beat > forget_after_s]
        return int(self.redis.hdel(self.keys.archivers, *gone)) if gone else 0  # type: ignore[arg-type]

    def remove_dead_consumers(self, claim_idle_ms: int) -> list[str]:
        """Delete the group's consumers with no unacknowledged entry, were idle past ``claim_idle_ms`` and
        whose archiver is not alive. Returns their names.

        The candidates are read here; whether each still has none and is still idle is
        checked again in the script that deletes it (`del_idle_consumers.lua`): an archiver
        judged dead that wakes and reads in between would otherwise lose what it read."""
        try:
            consumers: Any = self.redis.xinfo_consumers(self.keys.queue, ARCHIVER_GROUP)
        except redis.ResponseError:  # no stream or group yet
            return []
        alive = {h.consumer for h in self.archivers()}
        names = [
            name
            for consumer in consumers
            if (name := as_text(consumer["name"])) not in alive
            and not int(consumer["pending"])
            and int(consumer["idle"]) > claim_idle_ms
        ]
        if not names:
            return []
        deleted: Any = Scripts.of(self.redis)(
            "del_idle_consumers", [self.keys.queue], [ARCHIVER_GROUP, claim_idle_ms, *names]
        )
        return [as_text(name) for name in deleted]


def archivers_from(raw: Any, now: float, *, include_dead: bool = False) -> list[ArchiverHealth]:
    """`Liveness.archivers` from the health hash as read and the server's time then."""
    out = []
    for name, value in sorted(raw.items()):
        health = _decode(as_text(name), value)
        alive = now - health.last_beat <= health.stale_after_s
        if alive or include_dead:
            out.append(_with_alive(health, alive))
    return out


def _decode(name: str, value: bytes) -> ArchiverHealth:
    try:
        data = orjson.loads(value)
        return ArchiverHealth(
            consumer=name,
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=float(data["started"]),
            last_beat=float(data["last_beat"]),
            rate=float(data["rate"]),
            uncommitted=int(data["pending"]),
            archived=int(data["archived"]),
            stale_after_s=float(data["stale_after_s"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return ArchiverHealth(name, 0, "?", 0.0, 0.0, 0.0, 0, alive=False)


def _with_alive(health: ArchiverHealth, alive: bool) -> ArchiverHealth:
    return health if health.alive == alive else replace(health, alive=alive)

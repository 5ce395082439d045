"""Pausing archival: the design's progressive rollback ("archiving of new partitions can be
stopped at any time, keeping the existing architecture").

The switch is one stored key (`KeySchema.archival_paused`) that `complete.lua` reads through
its KEYS, so every worker sees it on its next completion. While it is set, a completed
partition stays where the original architecture kept it: in the active hash with status
``completed`` (in a namespace bound to an elk_coordinator deployment, as Go's record, so Go's
readers see it), its pid in `KeySchema.archival_held`, nothing queued. The archivers finish
what was queued before and then idle. Resuming clears the switch and sends the held partitions
through the archive queue (`release_held.lua`, the normal exactly-once path), oldest first; the
archiver holding the maintenance lock also sends any left over (a resume that was interrupted).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from layers.keys import KeySchema
from layers.replies import as_text, script_error
from layers.scripts import Scripts

RELEASE_STEP = 500


@dataclass(frozen=True, slots=True)
class ArchivalState:
    paused: bool
    since: float | None
    by: str
    held: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Released:
    """What one resume step did."""

    queued: int
    dropped: int
    left: int
    unreadable: list[str]


class ArchivalSwitch:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(keys, client=redis_client)
        self._scripts = Scripts.of(redis_client)

    def state(self) -> ArchivalState:
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.keys.archival_paused)
        pipe.zcard(self.keys.archival_held)
        raw, held = pipe.execute()
        return parse_state(raw, held)

    def pause(self, by: str) -> ArchivalState:
        """Set the switch (kept if already set: the first pause's time stays)."""
        self.redis.set(self.keys.archival_paused, json.dumps({"since": round(time.time(), 3), "by": by}), nx=True)
        return self.state()

    def resume(self) -> int:
        """Clear the switch, then queue every partition completed while paused; returns how many."""
        self.redis.delete(self.keys.archival_paused)
        queued = 0
        while True:
            step = self.release_step()
            if step is None:
                return queued  # paused again meanwhile
            queued += step.queued
            if not step.left:
                return queued

    def release_step(self, limit: int = RELEASE_STEP) -> Released | None:
        """Queue up to ``limit`` held partitions; None while archival is paused."""
        k = self.keys
        reply = self._scripts("release_held", [k.active, k.archival_held, k.queue, k.archival_paused], [limit])
        if as_text(reply[0]) == "paused":
            return None
        refused = script_error(reply)
        if refused is not None:
            raise RuntimeError(f"release_held refused: {refused}")
        return Released(int(reply[0]), int(reply[1]), int(reply[2]), [as_text(p) for p in reply[3:]])


def parse_state(raw: Any, held: Any) -> ArchivalState:
    """The switch as read (its key's value, or None) and the held count."""
    if raw is None:
        return ArchivalState(False, None, "", int(held or 0))
    try:
        value = json.loads(raw)
        since, by = float(value["since"]), str(value.get("by", ""))
    except (ValueError, KeyError, TypeError):
        since, by = None, ""  # set by hand: paused all the same, since unknown
    return ArchivalState(True, since, by, int(held or 0))

"""Pausing archival and the gray release: the design's progressive rollback ("archiving of new
partitions can be stopped at any time, keeping the existing architecture") and its A/B phase.

The switch is one stored key (`KeySchema.archival_paused`, its value in `_share.lua`) that
`complete.lua` reads through its KEYS with one GET, so every worker sees it on its next
completion. It holds a pause and a share (0-100, by default 100): a completion is archived when
archival is not paused and its partition's bucket (`share_bucket`, a stable hash of its ID) is
below the share. Otherwise it is held where the original architecture kept it: in the active
hash with status ``completed`` (in a namespace bound to an elk_coordinator deployment, as Go's
record, so Go's readers see it), its pid in `KeySchema.archival_held`, nothing queued. A pause
wins over the share while it is set; resuming goes back to the share set before (100 unless a
rollout set another). Resuming, or raising the share, sends the held partitions that now fall in
it through the archive queue (`release_held.lua`, the normal exactly-once path); lowering it
changes only later completions. The archiver that has taken the maintenance lock also sends any left
over (a resume or a rollout that was interrupted).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from codec.validate import check_int
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.scripts import Scripts

RELEASE_STEP = 500
_RUNNING = re.compile(r'\{"share":(\d+)\}')
_KEPT = re.compile(r'\{"share":(\d+),')
_HASH = 2654435761  # Knuth's multiplicative constant, as in `_share.lua`


def share_bucket(pid: int) -> int:
    """The partition's bucket, 0..99 (`_share.lua`): archived while the share is above it."""
    return ((pid * _HASH) % 2**32) * 100 >> 32


@dataclass(frozen=True, slots=True)
class ArchivalState:
    paused: bool
    since: float | None
    by: str
    held: int
    share: int = 100
    released: int = 0

    @property
    def effective_share(self) -> int:
        """The share completions get now: 0 while paused."""
        return 0 if self.paused else self.share

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Released:
    """What one resume step did."""

    queued: int
    dropped: int
    left: int  # held and in the share: for the next step
    held: int  # held in all
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
        pipe.get(self.keys.archival_released)
        return parse_state(*pipe.execute())

    def pause(self, by: str) -> ArchivalState:
        """Set the pause (kept if already set: the first pause's time stays); the share stays."""
        members = json.dumps({"since": round(time.time(), 3), "by": by})[1:-1]
        self._switch("pause", members)
        return self.state()

    def resume(self) -> int:
        """Clear the pause, then queue every held partition the share lets through; returns how many."""
        self._switch("resume", "")
        return self.release()

    def rollout(self, percent: int) -> int:
        """Set the share (0-100) of partitions whose completions are archived, and queue the held
        ones that now fall in it (none while paused); returns how many were queued."""
        check_int("percent", percent, 0, 100)
        self._switch("share", str(percent))
        return self.release()

    def release(self) -> int:
        """Queue the held partitions the switch lets through, step by step; returns how many."""
        queued = 0
        while True:
            step = self.release_step()
            if step is None:
                return queued  # paused
            queued += step.queued
            if not step.left:
                return queued

    def release_step(self, limit: int = RELEASE_STEP) -> Released | None:
        """Queue up to ``limit`` held partitions the switch lets through; None while paused."""
        k = self.keys
        keys = [k.active, k.archival_held, k.queue, k.archival_paused, k.archival_released]
        reply = self._scripts("release_held", keys, [limit])
        if as_text(reply[0]) == "paused":
            return None
        refused = script_error(reply)
        if refused is not None:
            raise RuntimeError(f"release_held refused: {refused}")
        return Released(int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]), [as_text(p) for p in reply[4:]])

    def _switch(self, action: str, value: str) -> None:
        script_error(self._scripts("archival_switch", [self.keys.archival_paused], [action, value]))


def parse_state(raw: Any, held: Any, released: Any = None) -> ArchivalState:
    """The switch as read (its key's value, or None), the held count and the released count."""
    count = int(released) if released is not None and as_text(released).isdigit() else 0
    if raw is None:
        return ArchivalState(False, None, "", int(held or 0), 100, count)
    text = as_text(raw)
    running = _RUNNING.fullmatch(text)
    if running:
        return ArchivalState(False, None, "", int(held or 0), min(100, int(running[1])), count)
    kept = _KEPT.match(text)  # as `_share.lua` reads it: anything else is a pause
    share = min(100, int(kept[1])) if kept else 100
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return ArchivalState(True, None, "", int(held or 0), share, count)  # set by hand: paused all the same
    since = value.get("since")
    since = float(since) if isinstance(since, int | float) and not isinstance(since, bool) else None
    return ArchivalState(True, since, str(value.get("by") or ""), int(held or 0), share, count)

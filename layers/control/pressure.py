"""Skipping compression while the backlog is critical: the design's degraded mode ("in critical
cases skip compression and store directly").

In a batch tier an archiver normally seals what it reads into compressed batches. When the
archive queue's backlog is critical (by default more than 10,000 entries, ten times the
design's alert level, for 10 seconds, or an oldest entry older than a minute), the archivers
store records without sealing them, in the simple hash as the simple tier does, and note their
batches in `KeySchema.unsealed`; the queue then drains at the simple tier's rate. Once the
backlog is under the low-water mark, the maintenance lock holder seals those batches, batch by
batch, once each (`layers.archive.transitions.seal_unsealed_step`); nothing seals them while the mode
is on, so the seal-up never competes with the drain.

The mode is a stored state (`KeySchema.pressure`), decided by one archiver, the maintenance lock
holder, and read by every archiver once per maintenance interval. "Critical for 10 s" needs a
history: archivers deciding each for itself would turn the mode on and off at different moments
(one that just started knows no history), and two of them could disagree about the same batch;
a single stored decision gives every process, `status`, the dashboard and ``/metrics`` the same
answer, with since when and why.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import redis

from codec.errors import ValidationError
from layers.archive.tiers import Tier
from layers.keys import KeySchema
from layers.plumbing.replies import as_text

SKIP = "skip"
NORMAL = "normal"
MISSED_LOOKS = 3


@dataclass(frozen=True, slots=True)
class PressureSettings:
    """When the backlog is critical, and when it is over. 0 turns a trigger off."""

    critical_backlog: int = 10_000
    critical_for_s: float = 10.0
    critical_age_s: float = 60.0
    low_water: int = 1_000
    #: How often the lock holder looks (the maintenance interval): "critical for 10 s" must be seen
    #: look after look; looks more than `MISSED_LOOKS` of these apart start the count again.
    looks_every_s: float = 1.0

    @property
    def unwatched_after_s(self) -> float:
        """The gap between two looks after which a critical backlog is not known to have lasted."""
        return MISSED_LOOKS * max(self.looks_every_s, 0.5)

    def __post_init__(self) -> None:
        if self.critical_backlog < 0 or self.critical_for_s < 0 or self.critical_age_s < 0:
            raise ValidationError("the critical backlog, its duration and the critical age must not be negative")
        if self.low_water < 1 or (self.critical_backlog and self.low_water > self.critical_backlog):
            raise ValidationError("the low-water mark must be 1 or more and not above the critical backlog")


class Backlog(NamedTuple):
    """The archive queue as the decisions see it: entries not yet archived, age of the oldest."""

    length: int
    oldest_age_s: float


def observe_backlog(client: redis.Redis, keys: list[KeySchema], now: float | None = None) -> Backlog:
    """The queues of ``keys`` together, in one round trip: their lengths added, the oldest entry's
    age (entries are deleted once archived, so a queue's first entry is its oldest not archived)."""
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.xlen(k.queue)
        pipe.xrange(k.queue, "-", "+", count=1)
    replies = pipe.execute()
    now = time.time() if now is None else now
    length, oldest = 0, 0.0
    for n, first in zip(replies[::2], replies[1::2], strict=True):
        length += int(n)
        if first:
            oldest = max(oldest, now - int(as_text(first[0][0]).split("-")[0]) / 1000)
    return Backlog(length, max(0.0, oldest))


@dataclass(frozen=True, slots=True)
class PressureState:
    skipping: bool
    since: float | None  # when the mode last changed
    reason: str
    critical_since: float | None  # when the backlog went over the critical size (None: it is not)
    times_on: int
    unsealed_records: int  # records in the simple hash of a batch tier: waiting to be sealed
    unsealed_batches: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PressureChange:
    skipping: bool
    reason: str
    backlog: int
    oldest_age_s: float


class BacklogPressure:
    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(keys, client=redis_client)

    def skipping(self) -> bool:
        return as_text(self.redis.hget(self.keys.pressure, "mode") or b"") == SKIP

    def state(self, tier: Tier) -> PressureState:
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(k.pressure)
        pipe.hlen(k.completed)
        pipe.zcard(k.unsealed)
        raw, simple, batches = pipe.execute()
        return pressure_state(raw, simple, batches, tier)

    def decide(
        self, settings: PressureSettings, backlog: Backlog, tier: Tier, now: float | None = None
    ) -> PressureChange | None:
        """Turn the mode on or off as the backlog says (the maintenance lock holder calls this once
        per maintenance interval); returns the change made, if any.

        On: in a batch tier, with at least the low-water mark waiting, when the oldest entry is
        older than ``critical_age_s`` or the backlog has stayed above ``critical_backlog`` for
        ``critical_for_s``, seen so at every call: a backlog last seen critical more than a few
        looks ago (`PressureSettings.unwatched_after_s`: the archivers were stopped, or drained it
        and stopped before looking again) starts its count afresh. Off: once the backlog is under
        the low-water mark."""
        now = time.time() if now is None else now
        k = self.keys
        fields = {as_text(a): as_text(b) for a, b in self.redis.hgetall(k.pressure).items()}  # type: ignore[union-attr]
        skipping = fields.get("mode") == SKIP
        critical_since = _float(fields.get("critical_since"))
        seen_at = _float(fields.get("critical_seen_at"))
        over = bool(settings.critical_backlog) and backlog.length > settings.critical_backlog
        pipe = self.redis.pipeline(transaction=False)
        if over and critical_since is not None and (seen_at is None or now - seen_at > settings.unwatched_after_s):
            critical_since = None  # nobody looked for a while (the archivers stopped): not known to have lasted
        if over:
            if critical_since is None:
                critical_since = now
            seen = {"critical_since": round(critical_since, 3), "critical_seen_at": round(now, 3)}
            pipe.hset(k.pressure, mapping=seen)  # type: ignore[arg-type]
        elif critical_since is not None:
            pipe.hdel(k.pressure, "critical_since", "critical_seen_at")
        change = None
        if not skipping and tier is not Tier.SIMPLE and backlog.length >= settings.low_water:
            reason = ""
            if settings.critical_age_s and backlog.oldest_age_s > settings.critical_age_s:
                age, limit = backlog.oldest_age_s, settings.critical_age_s
                reason = f"oldest queue entry is {age:.0f} s old (critical: {limit:g} s)"
            elif over and critical_since is not None and now - critical_since >= settings.critical_for_s:
                reason = (
                    f"backlog of {backlog.length} entries above {settings.critical_backlog} "
                    f"for {now - critical_since:.0f} s"
                )
            if reason:
                change = PressureChange(True, reason, backlog.length, backlog.oldest_age_s)
                pipe.hincrby(k.pressure, "times_on", 1)
        elif skipping and backlog.length < settings.low_water:
            reason = f"backlog of {backlog.length} entries under the low-water mark of {settings.low_water}"
            change = PressureChange(False, reason, backlog.length, backlog.oldest_age_s)
        if change is not None:
            mode = SKIP if change.skipping else NORMAL
            pipe.hset(k.pressure, mapping={"mode": mode, "changed_at": round(now, 3), "reason": change.reason})
        pipe.execute()
        return change


def pressure_state(raw: dict[Any, Any], simple: Any, batches: Any, tier: Tier) -> PressureState:
    """The state from the pressure hash as read, the simple hash's size and the unsealed batches'
    count; ``tier`` is the one in force (the simple hash of the simple tier waits for nothing)."""
    fields = {as_text(a): as_text(b) for a, b in raw.items()}
    return PressureState(
        skipping=fields.get("mode") == SKIP,
        since=_float(fields.get("changed_at")),
        reason=fields.get("reason", ""),
        critical_since=_float(fields.get("critical_since")),
        times_on=int(_float(fields.get("times_on")) or 0),
        unsealed_records=0 if tier is Tier.SIMPLE else int(simple),
        unsealed_batches=int(batches),
    )


def _float(raw: str | None) -> float | None:
    try:
        return None if raw is None else float(raw)
    except ValueError:
        return None

"""``run --processes auto``: as many archiver processes as the backlog needs, one step at a time.

The supervisor asks `Autoscaler.decide` every ``scale_interval_s`` (5 s), with the archive
queues' state (`layers.control.pressure.observe_backlog`: entries not archived, age of the oldest):

- one process more, up to ``max_processes`` (the CPU cores by default), while the backlog keeps
  growing (it grew at each of the last three checks) or its oldest entry is older than
  ``scale_up_age_s`` (10 s); then it waits two checks, so the new process is counted in the
  next decision before another is added;
- one process fewer, never below one, once the queues have been empty for ``scale_down_idle_s``
  (60 s); the next one after another such period. The process stopped is the newest: SIGTERM, it
  drains and leaves.

A decision is a `ScaleDecision`: the supervisor logs it as one line with its reason and counts
it in ``partarchive_scale_decisions_total``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from codec.errors import ValidationError
from layers.control.pressure import Backlog

GROWTH_CHECKS = 3
SETTLE_CHECKS = 2


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    max_processes: int
    interval_s: float = 5.0
    up_age_s: float = 10.0
    down_idle_s: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_processes <= 64:
            raise ValidationError("--max-processes must be in 1..64")


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    direction: str  # "up" or "down"
    processes: int  # after the decision
    cause: str  # "backlog_growing", "oldest_entry" or "queue_idle"
    reason: str
    backlog: int
    oldest_age_s: float


class Autoscaler:
    def __init__(self, policy: ScalePolicy, observe: Callable[[], Backlog]) -> None:
        self.policy = policy
        self.observe = observe
        self._lengths: deque[int] = deque(maxlen=GROWTH_CHECKS + 1)
        self._idle_since: float | None = None
        self._settled_at = 0.0

    def decide(self, processes: int, now: float) -> ScaleDecision | None:
        """What to do with ``processes`` running, given the backlog now (read here)."""
        backlog = self.observe()
        self._lengths.append(backlog.length)
        if backlog.length:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        p = self.policy
        if processes < p.max_processes and now >= self._settled_at:
            cause = reason = ""
            lengths = list(self._lengths)
            if len(lengths) == GROWTH_CHECKS + 1 and all(b > a for a, b in pairwise(lengths)):
                cause = "backlog_growing"
                reason = f"backlog grew at {GROWTH_CHECKS} checks in a row: " + " -> ".join(map(str, lengths))
            elif p.up_age_s and backlog.oldest_age_s > p.up_age_s:
                cause = "oldest_entry"
                reason = f"oldest queue entry is {backlog.oldest_age_s:.0f} s old (threshold {p.up_age_s:g} s)"
            if cause:
                self._settled_at = now + SETTLE_CHECKS * p.interval_s
                self._lengths.clear()
                return ScaleDecision("up", processes + 1, cause, reason, backlog.length, backlog.oldest_age_s)
        idle = self._idle_since
        if processes > 1 and idle is not None and now - idle >= p.down_idle_s:
            self._idle_since = now  # the next one after another idle period
            reason = f"queue empty for {now - idle:.0f} s (threshold {p.down_idle_s:g} s)"
            return ScaleDecision("down", processes - 1, "queue_idle", reason, 0, 0.0)
        return None

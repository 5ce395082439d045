"""What the steps of a worker that keeps several partitions in hand (the runtime's task window,
`archiver.runtime`) take and answer: a failure's `RetryPolicy`, a finish's outcome (`Finished`) and a
beat's (`Beat`). The steps are `layers.active.core.ActiveCore`'s (`_finish`, `_beat`, `_release`), beside
the claim and the completion whose state they share."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, NamedTuple

from codec import PartArchiveError, PartitionInfo, ValidationError
from codec.validate import check_int, check_seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a partition whose processing failed is tried: ``max_attempts`` in all (1: never
    again), each failure but the last sending it back to pending after an exponential back-off
    (``backoff_s``, doubled at each failure, at most ``backoff_max_s``) with jitter (the back-off
    times a random factor from 0.5 to 1, so failures of one moment do not come back together).
    The failures are counted in Redis (`KeySchema.attempts`), whichever worker failed it."""

    max_attempts: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, 1, 1000)
        check_seconds("backoff_s", self.backoff_s)
        check_seconds("backoff_max_s", self.backoff_max_s)
        if self.backoff_max_s < self.backoff_s:
            raise ValidationError("backoff_max_s must be at least backoff_s")

    def args(self, rng: random.Random) -> list[Any]:
        """The finish script's arguments: attempts, back-off and its bound (ms), the jitter's draw."""
        draw = f"{rng.random():.6f}" if self.jitter else "1"
        return [self.max_attempts, int(self.backoff_s * 1000), int(self.backoff_max_s * 1000), draw]


class Finished(NamedTuple):
    """What a finish did (`ActiveLayer.complete_and_claim`, `ActiveLayer.fail_and_claim`); a tuple, as one
    is made a partition."""

    partition_id: int
    outcome: str  # 'completed' (queued for the archiver), 'held' (paused or outside the share),
    #              'already' (completed before), 'failed'
    entry_id: str | None = None  # the archive queue's entry of a completion
    record: PartitionInfo | None = None  # the failed record
    attempts: int = 0  # failures counted by the retry policy so far (0 without one)
    retry_at: float | None = None  # unix s when a failure goes back to pending; None: it stays failed
    next: PartitionInfo | None = None  # the next partition, claimed and started (running)
    claim_error: PartArchiveError | None = None  # the claim's refusal, after the finish was done


@dataclass(frozen=True, slots=True)
class Beat:
    """What a beat found (`ActiveLayer.beat`)."""

    renewed: list[int]
    lost: dict[int, str]  # pid -> why: 'not_found', 'not_owner', 'failed', 'pending', ...
    retried: int  # failed partitions sent back to pending, their back-off over
    next_retry_at: float | None  # unix s of the next back-off to end in the namespace, if any

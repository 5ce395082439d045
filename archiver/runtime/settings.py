"""What a worker runtime is told: its window, its times, its retry policy and circuit breaker, checked
once (a bad value is a `codec.ValidationError`, one line and exit 2 in the CLI).

elk_coordinator's ``Mgr`` defaults are kept where it has one: a window of 3 partitions, a heartbeat
every 10 s, a circuit breaker open after 3 failures in a row for 30 s, 3 attempts a partition. The
lease (Go's partition lock expiry, 3 min) is partarchive's own, ``PARTARCHIVE_LEASE_TIMEOUT_S``
(300 s), so that the runtime's workers and the SDK's agree on when a lease is stale.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from codec import ValidationError
from codec.validate import check_int, check_seconds, check_worker_id
from layers.active.window import RetryPolicy

#: The first wait between claims while nothing is pending; it doubles up to `WorkerSettings.idle_s`.
IDLE_FIRST_S = 0.05


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    window: int = 3  # partitions worked on at once (Go's task window)
    heartbeat_s: float = 10.0  # how often the process beats (its presence; its leases at least every third of one)
    lease_s: float = 300.0  # a lease not renewed for this long is taken over by another worker
    drain_timeout_s: float = 10.0  # after a stop: how long the partitions in hand may take before they are handed back
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker_failures: int = 3  # failures in a row that stop claims for a cool-down (0: never)
    breaker_cooldown_s: float = 30.0
    idle_s: float = 1.0  # the longest wait between claims while nothing is pending

    def __post_init__(self) -> None:
        check_int("window", self.window, 1, 10_000)
        for name in ("heartbeat_s", "lease_s", "drain_timeout_s", "breaker_cooldown_s", "idle_s"):
            check_seconds(name, getattr(self, name))
        check_int("breaker_failures", self.breaker_failures, 0, 1_000_000)
        if not isinstance(self.retry, RetryPolicy):
            raise ValidationError("retry must be a RetryPolicy")

    @property
    def beat_s(self) -> float:
        """How often the process beats: every heartbeat, and at least three times a lease."""
        return min(self.heartbeat_s, self.lease_s / 3)

    @property
    def presence_ttl_s(self) -> float:
        """A presence entry not refreshed for three beats is gone."""
        return max(3 * self.beat_s, 1.0)


def default_worker_id(prefix: str | None = None) -> str:
    """``[PREFIX-]HOST-PID-XXXXXX``: unique to the process and its start, as elk_coordinator's node ids
    (host, pid and a random part), so that no two live workers share one."""
    token = os.urandom(3).hex()
    base = f"{socket.gethostname()}-{os.getpid()}-{token}"
    return check_worker_id(f"{prefix}-{base}" if prefix else base)

"""How much maintenance (tier moves, expiry sweeps, statistics compaction) a round may do.

Maintenance yields to the live queue: a round that archived entries earns it a fifth of the
time the round took (so archiving keeps five sixths of the process), an idle round a slice of
``slice_s``. Steps are sized to the time earned from what a batch has cost so far, and time
spent beyond the credit is paid back by later rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Maintenance time allowed per unit of archiving time while entries flow (1/5: archiving keeps 5/6).
MAINTENANCE_SHARE = 0.2


class MaintenancePacer:
    def __init__(
        self,
        slice_s: float,
        most_batches: int,
        *,
        after_step: Callable[[], object] | None = None,
        recheck_s: float = 1.0,
    ) -> None:
        self.slice_s = slice_s
        self.most_batches = max(1, most_batches)
        self.recheck_s = recheck_s
        self.credit = 0.0  # seconds of maintenance earned and not spent
        self.batch_cost = 0.005  # seconds one batch of a step has taken, smoothed
        self._resting_until = 0.0  # found nothing to do: busy rounds do not ask again before this
        self._after_step = after_step  # the daemon's seam for the crash tests

    def run(self, busy_s: float, step: Callable[[int], int]) -> int:
        """Earn credit for ``busy_s`` seconds of archiving (none: an idle round), then call
        ``step(max_batches)`` while credit lasts; returns the items the steps did.

        When a step finds nothing to do, rounds that archived entries do not ask again for
        ``recheck_s`` (finding out costs a few round trips); idle rounds always ask."""
        if busy_s:
            if time.monotonic() < self._resting_until:
                return 0
            self.credit = min(self.credit + busy_s * MAINTENANCE_SHARE, self.slice_s)
        else:
            self.credit = max(self.credit, self.slice_s)
        done = 0
        while self.credit >= self.batch_cost:
            batches = max(1, min(self.most_batches, int(self.credit / self.batch_cost)))
            started = time.monotonic()
            items = step(batches)
            spent = time.monotonic() - started
            if not items:
                self.credit = 0.0  # nothing to do: no credit is saved up for later
                self._resting_until = time.monotonic() + self.recheck_s
                break
            done += items
            self.credit -= spent
            self.batch_cost = 0.8 * self.batch_cost + 0.2 * max(spent / batches, 1e-5)
            if self._after_step is not None:
                self._after_step()
        return done

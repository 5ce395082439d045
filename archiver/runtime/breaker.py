"""elk_coordinator's circuit breaker, for one worker process: after K failures of `process` in a row
it stops claiming for a cool-down, then tries again; one more failure before a success opens it
again at once (Go's half-open state), a success closes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CircuitBreaker:
    def __init__(self, failures: int, cooldown_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures  # 0: never opens
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._in_a_row = 0
        self._open_until = 0.0
        self._half_open = False  # the cool-down is over and no success has come since
        self.trips = 0

    def record(self, ok: bool) -> bool:
        """A finished partition; True when this failure opened the breaker."""
        if ok and not self._in_a_row and not self._half_open:
            return False  # closed, and stays so: no lock on the way of every completion
        with self._lock:
            if ok:
                self._in_a_row, self._half_open = 0, False
                return False
            self._in_a_row += 1
            if not self.failures or not (self._in_a_row >= self.failures or self._half_open):
                return False
            if self._clock() < self._open_until:  # open already: slots finishing what they had in hand
                return False
            self._open_until = self._clock() + self.cooldown_s
            self._half_open = True
            self.trips += 1
            return True

    def opens_on_failure(self) -> bool:
        """Whether one more failure would open it (a finish of a failure then claims nothing)."""
        with self._lock:
            return bool(self.failures) and (self._in_a_row + 1 >= self.failures or self._half_open)

    def wait_s(self) -> float:
        """Seconds until claims may resume (0: they may now)."""
        return max(0.0, self._open_until - self._clock())

    @property
    def in_a_row(self) -> int:
        return self._in_a_row

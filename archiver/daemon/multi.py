"""One archiver process serving several namespaces (``run --namespace a,b,c``).

Each namespace keeps its own `ArchiverDaemon` (consumer, commit buffer, maintenance lock,
liveness entry); one loop gives them rounds in turn, each round at most ``read_count``
entries, so a busy namespace cannot starve a quiet one. The loop waits on Redis only when a
whole turn found nothing to do, and then spreads ``block_ms`` over the namespaces, so a new
entry in any of them is picked up within about ``block_ms``. One stop event serves all: a
signal drains every namespace, then the deadline applies as for a single daemon.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import redis
import structlog

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon
from archiver.daemon.shutdown import GracefulShutdown

log = structlog.get_logger("partarchive.archiver")


class MultiArchiver:
    def __init__(self, client: redis.Redis, configs: Sequence[Config], consumer: str | None = None) -> None:
        if not configs:
            raise ValueError("at least one namespace")
        self.stop_event = threading.Event()
        self.daemons = [ArchiverDaemon(client, config, consumer, stop=self.stop_event) for config in configs]
        self.drain_timeout_s = max(c.drain_timeout_s for c in configs)
        self.idle_block_ms = max(1, configs[0].block_ms // len(configs))

    def stop(self) -> None:
        self.stop_event.set()

    def run(self, *, install_signals: bool = True) -> None:
        started: list[ArchiverDaemon] = []
        with GracefulShutdown(self.stop_event, self.drain_timeout_s).installed(install_signals):
            try:
                for daemon in self.daemons:
                    if not (daemon.when_reachable(daemon.check_settings) and daemon.when_reachable(daemon.start)):
                        return
                    started.append(daemon)
                idle = False
                while not self.stop_event.is_set():
                    idle = self.turn(self.idle_block_ms if idle else 0) == 0
            finally:
                for daemon in started:
                    daemon.finish()

    def turn(self, block_ms: int) -> int:
        """One round for each namespace; returns what they handled together."""
        handled = 0
        for daemon in self.daemons:
            if self.stop_event.is_set():
                break
            handled += daemon.round_with_retry(block_ms)
        return handled

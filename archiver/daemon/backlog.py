"""The archiver's answers to a backlog, checked once per maintenance interval.

Every archiver reads the two stored switches: whether compression is skipped (a critical
backlog, `layers.control.pressure`: its pages then go to the simple hash) and whether archival is paused
(`layers.control.switch`: it then imports nothing from elk_coordinator either). The one that took the
maintenance lock also decides the first from the queue's state, queues what a pause or the gray
release's share held once the switch lets it through (should a resume or a rollout have been
interrupted), and samples the job's progress
(`stats.progress`). Each change of mode is one log line with its reason.
"""

from __future__ import annotations

import time

import structlog

from archiver.namespace import Namespace
from layers.control.pressure import SKIP, observe_backlog
from layers.control.switch import parse_state
from layers.plumbing.replies import as_text
from stats.progress import SAMPLE_EVERY_S

log = structlog.get_logger("partarchive.archiver")


class BacklogModes:
    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self.settings = ns.config.pressure
        self.pressure = ns.pressure
        self.switch = ns.archival
        self.progress = ns.progress
        self.skipping = False  # store pages without sealing them
        self.paused = False  # archival paused: completions stay in the active hash
        self.held = 0
        self._next_sample = 0.0

    def tick(self, taken: bool) -> int:
        """Read the switches; with the maintenance lock ``taken``, decide and do what is due.
        Returns the items done."""
        done = 0
        if taken:
            backlog = observe_backlog(self.ns.redis, [self.ns.keys])
            change = self.pressure.decide(self.settings, backlog, self.ns.archive.tier())
            if change is not None:
                log.warning(
                    "compression skipped" if change.skipping else "compression resumed",
                    namespace=self.ns.keys.namespace,
                    reason=change.reason,
                    backlog=change.backlog,
                    oldest_age_s=round(change.oldest_age_s, 1),
                )
        k = self.ns.keys
        pipe = self.ns.redis.pipeline(transaction=False)
        pipe.hget(k.pressure, "mode")
        pipe.get(k.archival_paused)
        pipe.zcard(k.archival_held)
        pipe.get(k.archival_released)
        mode, paused, held, released = pipe.execute()
        state = parse_state(paused, held, released)
        self.skipping = as_text(mode or b"") == SKIP
        self.paused, self.held = state.paused, state.held
        if taken and not self.paused and self.held:
            step = self.switch.release_step()
            if step is not None and (step.queued or step.dropped):
                done += step.queued + step.dropped
                self.held = step.held
                log.info("queued held completions the switch now lets through", queued=step.queued, left=step.left)
                if step.unreadable:
                    log.error("held partitions whose records cannot be read stay in the active hash",
                              pids=step.unreadable[:20])  # fmt: skip
        now = time.monotonic()
        if taken and now >= self._next_sample:
            self._next_sample = now + SAMPLE_EVERY_S
            self.progress.sample()
        return done

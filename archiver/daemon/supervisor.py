"""``partarchive run --processes N|auto``: archiver processes under one supervisor.

The supervisor runs children (``partarchive run`` with the same arguments, less the supervisor's
own; forked from the supervisor where it can, `archiver.daemon.children`), restarts a child
that exits while the supervisor is running (after a pause that grows when it keeps failing, so a
child that cannot start is not restarted in a tight loop), and on SIGTERM
or SIGINT passes SIGTERM on: every child drains (its own deadline), and any child still running
after the drain deadline plus a grace period is killed. A second signal kills them at once.

With ``auto`` it starts one child and lets an `Autoscaler` add or stop one at a time as the
backlog says (`archiver.daemon.autoscale`); a child it stops gets SIGTERM, drains and is not
restarted. With ``--metrics-port`` the supervisor serves the whole group's metrics on that port
(`archiver.daemon.group_metrics`); the children serve none.

The worker runtime's processes (``partarchive worker --processes N``) run under the same supervisor
(``role="worker"``); with ``--until-empty`` a child that finds nothing left exits 0, is not
restarted, and the supervisor returns once every child has (``until_done``). A worker's second
signal is passed on as a second SIGTERM (each child hands its partitions back at once); a third
kills them.

Children are separate processes, not threads: each has its own interpreter, so N of them
use N cores.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from types import FrameType

import redis
import structlog

from archiver.daemon.autoscale import Autoscaler, ScaleDecision
from archiver.daemon.children import ChildProcess, Starter
from archiver.daemon.group_metrics import GroupMetrics
from archiver.daemon.shutdown import HANDLED_SIGNALS

log = structlog.get_logger("partarchive.supervisor")

RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0
GRACE_S = 5.0
HEALTHY_AFTER_S = 30.0  # a child that ran this long resets its restart pause


@dataclass
class Child:
    index: int
    process: ChildProcess | None = None
    started: float = 0.0
    restarts: int = 0
    pause_s: float = RESTART_PAUSE_S
    next_start: float = 0.0
    exit_codes: list[int] = field(default_factory=list)
    retiring: bool = False  # stopped by a scale-down: drains, exits, is not restarted

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(
        self,
        start: Starter,
        drain_timeout_s: float,
        processes: int = 1,
        *,
        scaler: Autoscaler | None = None,
        metrics: GroupMetrics | None = None,
        role: str = "archiver",
        until_done: bool = False,
    ) -> None:
        self.start = start
        self.role = role
        self.until_done = until_done  # a child that exits 0 is done: not restarted
        self.drain_timeout_s = drain_timeout_s
        self.scaler = scaler
        self.metrics = metrics
        self.max_processes = scaler.policy.max_processes if scaler is not None else processes
        self.children = [Child(i) for i in range(1 if scaler is not None else processes)]
        self.stopping = threading.Event()
        self.decisions: list[ScaleDecision] = []
        self._killing = False
        self._forwarded = False
        self._next_scale = 0.0
        self._backlog_unreadable = False

    @property
    def kept(self) -> int:
        """Children the supervisor keeps running (those being stopped by a scale-down aside)."""
        return sum(1 for c in self.children if not c.retiring)

    def run(self, *, poll_s: float = 0.2) -> int:
        """Supervise until a signal (or `stop()`); returns 0 after a clean stop."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            log.info("supervisor started", processes=len(self.children), max_processes=self.max_processes,
                     autoscale=self.scaler is not None)  # fmt: skip
            while not self.stopping.is_set():
                now = time.monotonic()
                for child in list(self.children):
                    self._tend(child, now)
                if self.until_done and not self.children:
                    log.info("every process finished", role=self.role)
                    break
                if self.scaler is not None and now >= self._next_scale:
                    self._next_scale = now + self.scaler.policy.interval_s
                    self._scale(self.scaler, now)
                if self.metrics is not None:
                    self.metrics.counted(self.kept, self.max_processes)
                self.stopping.wait(poll_s)
            return self._stop_children()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def stop(self) -> None:
        self.stopping.set()

    def _tend(self, child: Child, now: float) -> None:
        proc = child.process
        if child.running:
            return
        if child.retiring:
            self.children.remove(child)
            if proc is not None:
                log.info(f"{self.role} process stopped", child=child.index, pid=proc.pid, code=proc.returncode)
            return
        if proc is not None:  # it exited on its own
            code = proc.poll()
            assert code is not None  # not running
            if code == 0 and self.until_done:
                self.children.remove(child)
                log.info(f"{self.role} process finished", child=child.index, pid=proc.pid)
                return
            child.exit_codes.append(code)
            ran = now - child.started
            child.pause_s = RESTART_PAUSE_S if ran >= HEALTHY_AFTER_S else min(child.pause_s * 2, RESTART_PAUSE_MAX_S)
            child.next_start = now + child.pause_s
            child.process = None
            log.warning(f"{self.role} process exited, restarting", child=child.index, code=code, in_s=child.pause_s)
            return
        if now >= child.next_start:
            child.process = self.start()
            child.started = now
            if child.exit_codes:
                child.restarts += 1
            log.info(f"{self.role} process started", child=child.index, pid=child.process.pid)

    def _scale(self, scaler: Autoscaler, now: float) -> None:
        """One scaling decision, logged as one line with its reason, and carried out."""
        try:
            decision = scaler.decide(self.kept, now)
        except (redis.RedisError, OSError) as exc:
            if not self._backlog_unreadable:
                log.warning("cannot read the backlog; keeping the processes as they are", error=str(exc))
            self._backlog_unreadable = True
            return
        self._backlog_unreadable = False
        if decision is None:
            return
        self.decisions.append(decision)
        log.info(
            "scaling",
            direction=decision.direction,
            processes=decision.processes,
            cause=decision.cause,
            reason=decision.reason,
            backlog=decision.backlog,
            oldest_age_s=round(decision.oldest_age_s, 1),
        )
        if self.metrics is not None:
            self.metrics.decided(decision.direction, decision.cause)
        if decision.direction == "up":
            taken = {c.index for c in self.children}
            self.children.append(Child(next(i for i in range(len(taken) + 1) if i not in taken)))
            return
        newest = max((c for c in self.children if not c.retiring), key=lambda c: c.started)
        newest.retiring = True
        if newest.running:
            assert newest.process is not None
            newest.process.send_signal(signal.SIGTERM)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping.is_set() and self.role == "worker" and not self._forwarded:
            self._forwarded = True  # a worker's second signal hands its partitions back at once: passed on
            log.warning(f"second signal: {self.role} processes stop now", signal=signum)
            for child in self.children:
                if child.running:
                    assert child.process is not None
                    child.process.send_signal(signal.SIGTERM)
            return
        if self.stopping.is_set():
            self._killing = True
            for child in self.children:
                if child.running:
                    assert child.process is not None
                    child.process.kill()
            return
        log.info(f"stopping {self.role} processes", signal=signum, deadline_s=self.drain_timeout_s)
        self.stopping.set()

    def _stop_children(self) -> int:
        running = [c for c in self.children if c.running]
        for child in running:
            if not child.retiring:  # a retiring child has its SIGTERM: a second one would end it at once
                assert child.process is not None
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.drain_timeout_s + GRACE_S
        procs = [c.process for c in running if c.process is not None]
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(f"{self.role} process missed the drain deadline, killing it", pid=proc.pid)
                proc.kill()
                proc.wait()
        # -SIGTERM: a child that was still starting (no handler yet, nothing read) ended at once
        clean = all(proc.returncode in (0, -signal.SIGTERM) for proc in procs) and not self._killing
        log.info("supervisor stopped", clean=clean)
        return 0 if clean else 1

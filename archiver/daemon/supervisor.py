"""``partarchive run --processes N``: N archiver processes under one supervisor.

The supervisor starts N children (``partarchive run`` with the same arguments, less
``--processes``; each child ``i`` serves metrics on ``--metrics-port + i``), restarts a
child that exits while the supervisor is running (after a pause that grows when it keeps
failing, so a child that cannot start is not restarted in a tight loop), and on SIGTERM or
SIGINT passes SIGTERM on: every child drains (its own deadline), and any child still running
after the drain deadline plus a grace period is killed. A second signal kills them at once.

Children are separate processes, not threads: each has its own interpreter, so N of them
use N cores.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType

import structlog

from archiver.daemon.shutdown import HANDLED_SIGNALS

log = structlog.get_logger("partarchive.supervisor")

RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0
GRACE_S = 5.0
HEALTHY_AFTER_S = 30.0  # a child that ran this long resets its restart pause


@dataclass
class Child:
    index: int
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    pause_s: float = RESTART_PAUSE_S
    next_start: float = 0.0
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(self, child_args: Sequence[Sequence[str]], drain_timeout_s: float) -> None:
        self.children = [Child(i, list(args)) for i, args in enumerate(child_args)]
        self.drain_timeout_s = drain_timeout_s
        self.stopping = threading.Event()
        self._killing = False

    def run(self, *, poll_s: float = 0.2) -> int:
        """Supervise until a signal (or `stop()`); returns 0 after a clean stop."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            log.info("supervisor started", processes=len(self.children))
            while not self.stopping.is_set():
                now = time.monotonic()
                for child in self.children:
                    self._tend(child, now)
                self.stopping.wait(poll_s)
            return self._stop_children()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def stop(self) -> None:
        self.stopping.set()

    def _tend(self, child: Child, now: float) -> None:
        proc = child.process
        if proc is not None and proc.poll() is None:
            return
        if proc is not None:  # it exited on its own
            code = proc.returncode
            child.exit_codes.append(code)
            ran = now - child.started
            child.pause_s = RESTART_PAUSE_S if ran >= HEALTHY_AFTER_S else min(child.pause_s * 2, RESTART_PAUSE_MAX_S)
            child.next_start = now + child.pause_s
            child.process = None
            log.warning("archiver process exited, restarting", child=child.index, code=code, in_s=child.pause_s)
            return
        if now >= child.next_start:
            child.process = subprocess.Popen(child.args, start_new_session=False)
            child.started = now
            if child.exit_codes:
                child.restarts += 1
            log.info("archiver process started", child=child.index, pid=child.process.pid)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping.is_set():
            self._killing = True
            for child in self.children:
                if child.process is not None and child.process.poll() is None:
                    child.process.kill()
            return
        log.info("stopping archiver processes", signal=signum, deadline_s=self.drain_timeout_s)
        self.stopping.set()

    def _stop_children(self) -> int:
        running = [c.process for c in self.children if c.process is not None and c.process.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.drain_timeout_s + GRACE_S
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("archiver process missed the drain deadline, killing it", pid=proc.pid)
                proc.kill()
                proc.wait()
        # -SIGTERM: a child that was still starting (no handler yet, nothing read) ended at once
        clean = all(proc.returncode in (0, -signal.SIGTERM) for proc in running) and not self._killing
        log.info("supervisor stopped", clean=clean)
        return 0 if clean else 1


def child_commands(argv: Sequence[str], processes: int, metrics_port: int | None) -> list[list[str]]:
    """``partarchive run`` for each child: the supervisor's arguments less ``--processes``, and
    ``--metrics-port`` shifted by the child's index."""
    base: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--processes", "--metrics-port"):
            skip = True
            continue
        if arg.startswith(("--processes=", "--metrics-port=")):
            continue
        base.append(arg)
    commands = []
    for i in range(processes):
        extra = [] if metrics_port is None else ["--metrics-port", str(metrics_port + i)]
        commands.append([sys.executable, "-m", "archiver", *base, *extra])
    return commands

"""How the supervisor starts an archiver process: forked from itself, or as a new interpreter.

A forked child has every module the supervisor imported already, so it archives within
milliseconds instead of after the half second an interpreter takes to import the package: what
a burst of completions waits for when ``run --processes N`` starts. A new interpreter
(``python -m archiver run ...``) is kept where forking would carry the wrong state: where the
platform cannot fork, and when the supervisor serves the group's metrics, whose multiprocess mode
``prometheus_client`` fixes at import from the environment the children are given.

Either way the supervisor sees the same handle, the part of `subprocess.Popen` it uses.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.context import ForkProcess
from typing import Protocol

from archiver.daemon.shutdown import HANDLED_SIGNALS

#: The supervisor's own flags: not passed on to the children.
OWN_FLAGS = ("--processes", "--max-processes", "--metrics-port", "--metrics-host")


class ChildProcess(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


#: Starts one child.
Starter = Callable[[], ChildProcess]


def child_args(argv: Sequence[str]) -> list[str]:
    """The supervisor's arguments (after ``partarchive``) less its own flags."""
    base: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in OWN_FLAGS:
            skip = True
            continue
        if arg.startswith(tuple(f"{flag}=" for flag in OWN_FLAGS)):
            continue
        base.append(arg)
    return base


def child_command(argv: Sequence[str]) -> list[str]:
    """``partarchive run`` for a child started as a new interpreter."""
    return [sys.executable, "-m", "archiver", *child_args(argv)]


def spawner(argv: Sequence[str], env: Mapping[str, str]) -> Starter:
    command, environment = child_command(argv), dict(env)
    return lambda: subprocess.Popen(command, env=environment, start_new_session=False)


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def forker(argv: Sequence[str], main: Callable[[Sequence[str]], int]) -> Starter:
    """Children forked from this process, each running ``main`` (the CLI's, handed down by the
    command that starts the supervisor, so the daemon never imports its CLI) on ``argv`` less the
    supervisor's flags."""
    args = child_args(argv)
    context = multiprocessing.get_context("fork")

    def start() -> ChildProcess:
        process = context.Process(target=_forked_main, args=(main, args), name="partarchive-archiver")
        process.start()
        return ForkedChild(process)

    return start


def _forked_main(main: Callable[[Sequence[str]], int], args: list[str]) -> None:
    """A forked child's life: the supervisor's signal handlers (inherited) put back to the
    defaults first, so a SIGTERM before the daemon installs its own still ends the child."""
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    raise SystemExit(main(args))


class ForkedChild:
    """A forked child behind `subprocess.Popen`'s interface (``returncode`` is -N after signal N)."""

    def __init__(self, process: ForkProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired("partarchive run (forked)", timeout or 0.0)
        return code

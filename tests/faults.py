"""Fault injection for the crash tests: partarchive's command line with pauses at its seams.

    python -m tests.faults --pause after_read=60 [--pause WHERE=SECONDS ...] run --consumer victim

runs ``partarchive run --consumer victim`` with the daemon pausing 60 s after each page it reads,
long enough for a test to kill it while it holds entries. The seams are the production code's
``fault_point`` methods, which do nothing there: `ArchiverDaemon.fault_point` (``after_read``,
``after_step``: the pause ends at once when the daemon is asked to stop),
`ElkMigration.fault_point` (``before_commit``) and `ColdTier.fault_point` (``cold_written``: a cold
file renamed into place, not recorded; ``cold_recorded``: recorded, its batches still in Redis).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from archiver.cli.main import main as partarchive
from archiver.daemon.loop import ArchiverDaemon
from archiver.elk.migrate import ElkMigration
from layers.archive.cold import ColdTier


def install(pauses: dict[str, float]) -> None:
    """Make the seams named in ``pauses`` wait that many seconds."""

    def daemon_pause(daemon: ArchiverDaemon, where: str) -> None:
        if seconds := pauses.get(where):
            daemon._stop.wait(seconds)  # a stop (SIGTERM) ends the pause

    def migration_pause(_migration: ElkMigration, where: str) -> None:
        if seconds := pauses.get(where):
            time.sleep(seconds)

    def cold_pause(_tier: ColdTier, where: str) -> None:
        if seconds := pauses.get(where):
            time.sleep(seconds)

    ArchiverDaemon.fault_point = daemon_pause  # type: ignore[method-assign]
    ElkMigration.fault_point = migration_pause  # type: ignore[method-assign]
    ColdTier.fault_point = cold_pause  # type: ignore[method-assign]


def pause_args(pauses: dict[str, float]) -> list[str]:
    """``--pause WHERE=SECONDS`` for each pause, as `main` takes them."""
    return [arg for where, seconds in pauses.items() for arg in ("--pause", f"{where}={seconds}")]


def main(argv: Sequence[str]) -> int:
    args, pauses = list(argv), {}
    while args[:1] == ["--pause"] and len(args) > 1:
        where, _, seconds = args[1].partition("=")
        pauses[where] = float(seconds)
        del args[:2]
    install(pauses)
    return partarchive(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The short form of ``make chaos`` in CI: kill -9s of archivers and workers (SDK loops and runtime
processes), a server restart
from its AOF, a pause, maxmemory, and a server that comes back empty; nothing lost or counted
twice. It runs its own server: valkey-server, or redis-server in the run against Redis."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.chaos import SHORT, run

pytestmark = [pytest.mark.chaos, pytest.mark.engine]  # its own server


def test_short_chaos_run_loses_nothing_and_counts_nothing_twice() -> None:
    binary = shutil.which("redis-server") if os.environ.get("REDIS_URL") else None
    report = run(**SHORT, server_binary=binary)  # type: ignore[arg-type]
    assert report.errors == []
    assert (report.lost, report.double_counted, report.verify_ok) == (0, 0, True)
    assert report.archiver_kills >= 6 and report.worker_kills >= 1 and report.runtime_worker_kills >= 1
    assert report.server_restarts_aof == 1 and report.server_data_losses == 1 and report.pauses == 1
    assert report.oom_refusals > 0 and report.recovered_after_data_loss

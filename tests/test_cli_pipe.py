"""A reader that goes away (``partarchive ... | head -1``) is not an error: exit 0, nothing on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from tests.helpers import cli_env, complete_partitions


def _into_a_closed_pipe(url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the command with its stdout a pipe whose reader has already gone: every write fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "archiver", *args],
            env=cli_env(url, namespace),
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [("status",), ("export", "--format", "elk", "--output", "/dev/stdout"), ("export", "--output", "-")],
)
def test_a_reader_that_goes_away_is_not_an_error(
    engine_url: str, real_redis: redis.Redis, namespace: str, args: tuple[str, ...]
) -> None:
    complete_partitions(real_redis, namespace, 5)
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace)))
    done = _into_a_closed_pipe(engine_url, namespace, *args)
    assert done.returncode == 0, done.stderr
    assert b"Broken pipe" not in done.stderr and b"Traceback" not in done.stderr and b"Exception" not in done.stderr

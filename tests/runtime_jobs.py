"""`process` functions for the tests that run ``partarchive worker`` as real processes
(`tests/test_runtime_processes.py`, `tests/chaos.py`): imported by the worker from the repository's root."""

from __future__ import annotations

import asyncio
import os
import time

from archiver.runtime import Lease
from codec import PartitionInfo

#: Seconds each partition takes (``RUNTIME_JOB_SLEEP_S``), so a kill or a signal lands mid-work.
SLEEP_S = float(os.environ.get("RUNTIME_JOB_SLEEP_S", "0"))


def process(partition: PartitionInfo, lease: Lease) -> int:
    if SLEEP_S:
        time.sleep(SLEEP_S)
    return partition.max_id - partition.min_id + 1


async def aprocess(partition: PartitionInfo, lease: Lease) -> int:
    if SLEEP_S:
        await asyncio.sleep(SLEEP_S)
    return partition.max_id - partition.min_id + 1


def until_lost(partition: PartitionInfo, lease: Lease) -> None:
    """Works until its lease is lost (handed back at a stop, taken over), at most a minute."""
    lease.wait_lost(60)


async def auntil_lost(partition: PartitionInfo, lease: Lease) -> None:
    await asyncio.sleep(60)  # cancelled when the lease is lost


NOT_A_FUNCTION = 42


def broken_on_import() -> None:
    raise RuntimeError("never called")

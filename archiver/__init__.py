"""The processes and their faces: archiver daemon, worker runtime, query router, CLI, demo.

The names below are imported on first use, so that a command that needs none of them (``status``,
``stats``, ``get``) does not load the daemon and its logging with ``archiver.config``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from archiver.config import Config
    from archiver.daemon.loop import ArchiverDaemon
    from archiver.router import Answer, AsyncQueryRouter, QueryRouter, Source
    from archiver.runtime import AsyncWorker, LeaderSettings, Lease, RetryPolicy, Worker

_HOMES = {
    "Answer": "archiver.router",
    "ArchiverDaemon": "archiver.daemon.loop",
    "AsyncQueryRouter": "archiver.router",
    "AsyncWorker": "archiver.runtime",
    "LeaderSettings": "archiver.runtime",
    "Lease": "archiver.runtime",
    "RetryPolicy": "archiver.runtime",
    "Worker": "archiver.runtime",
    "Config": "archiver.config",
    "QueryRouter": "archiver.router",
    "Source": "archiver.router",
}

__all__ = [
    "Answer",
    "ArchiverDaemon",
    "AsyncQueryRouter",
    "AsyncWorker",
    "Config",
    "LeaderSettings",
    "Lease",
    "QueryRouter",
    "RetryPolicy",
    "Source",
    "Worker",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'archiver' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

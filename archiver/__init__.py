"""The processes and their faces: archiver daemon, query router, CLI, demo."""

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon
from archiver.router import Answer, QueryRouter, Source
from archiver.router_async import AsyncQueryRouter

__all__ = ["Answer", "ArchiverDaemon", "AsyncQueryRouter", "Config", "QueryRouter", "Source"]

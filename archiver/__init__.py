"""The processes and their faces: archiver daemon, query router, CLI, demo."""

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon
from archiver.router import Answer, QueryRouter, Source

__all__ = ["Answer", "ArchiverDaemon", "Config", "QueryRouter", "Source"]

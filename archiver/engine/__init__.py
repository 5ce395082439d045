"""Engines: a client for the Redis a URL names, a private embedded valkey-server, a local cluster."""

from archiver.engine.clients import async_client_for, async_twin, client_for
from archiver.engine.connect import (
    Engine,
    EngineError,
    EngineUnreachable,
    async_connect,
    connect,
)
from archiver.engine.embedded import open_engine
from codec.redact import redact_text, redact_url

__all__ = [
    "Engine",
    "EngineError",
    "EngineUnreachable",
    "async_client_for",
    "async_connect",
    "async_twin",
    "client_for",
    "connect",
    "open_engine",
    "redact_text",
    "redact_url",
]

"""Credentials kept out of what partarchive shows: URLs (a Redis server's, a cold store's) with
their password replaced, for logs, errors and status."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL with its password (and a user name that may be one) replaced, for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable Redis URL>"
    if parts.password is None and not parts.username:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:" if parts.username and parts.password is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}***@{host}"))


_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@'\"]*@")


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced (for messages that quote input)."""
    return _CREDENTIALS.sub(r"\1***@", text)


__all__ = ["redact_text", "redact_url"]

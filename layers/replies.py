"""Helpers for Redis replies, which are bytes or str depending on the client's decode_responses."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A reply value as str (undecodable bytes replaced, for names and ids that only get displayed)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

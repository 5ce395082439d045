"""Stored settings and counters of a namespace, read with their checks.

A value that is not what partarchive wrote (a hand edit, another program) becomes a
`CorruptMetadata` naming the key and field, at the read, instead of a ValueError somewhere
further on.
"""

from __future__ import annotations

from typing import Any

from layers.errors import CorruptMetadata
from layers.plumbing.replies import as_text


def stored_int(key: str, field: str, raw: Any, *, default: int, minimum: int = 0) -> int:
    """An integer field (``default`` when absent), at least ``minimum``."""
    if raw is None:
        return default
    text = as_text(raw)
    try:
        value = int(text)
    except ValueError:
        raise CorruptMetadata(f"{key} field {field} is not an integer: {text[:40]!r}") from None
    if value < minimum:
        raise CorruptMetadata(f"{key} field {field} is {value}, below {minimum}")
    return value


class StoredBatchSize:
    """The batch size a namespace's batches were written with, kept once read (it never changes);
    before that the configured one. A reader guesses with `known` and corrects with `read` (the
    query router reads the field beside the record, no round trip of its own)."""

    def __init__(self, key: str, configured: int) -> None:
        self.key = key
        self.configured = configured
        self.stored: int | None = None

    @property
    def known(self) -> int:
        return self.stored or self.configured

    def read(self, raw: Any) -> int:
        """The batch size in force given the field as just read (None before any batch was written)."""
        if raw is None:
            return self.known
        self.stored = stored_int(self.key, "batch_size", raw, default=0, minimum=1)
        return self.stored


def stored_float(key: str, field: str, raw: Any, *, default: float = 0.0) -> float:
    if raw is None:
        return default
    text = as_text(raw)
    try:
        return float(text)
    except ValueError:
        raise CorruptMetadata(f"{key} field {field} is not a number: {text[:40]!r}") from None

"""Stored settings and counters of a namespace, read with their checks; keys of a wrong type.

A value that is not what partarchive wrote (a hand edit, another program) becomes a
`CorruptMetadata` naming the key and field, at the read, instead of a ValueError somewhere
further on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from layers.archive.tiers import Tier, TierPolicy
from layers.errors import CorruptMetadata, WrongKeyType
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.steps import Batch, Steps, SyncIO

T = TypeVar("T")


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


def stored_tier(key: str, raw: Any) -> Tier:
    if raw is None:
        return Tier.SIMPLE
    text = as_text(raw)
    try:
        return Tier(text)
    except ValueError:
        names = ", ".join(t.value for t in Tier)
        raise CorruptMetadata(f"{key} field tier is {text[:40]!r}, not one of {names}") from None


def read_tier(client: redis.Redis, keys: KeySchema, policy: TierPolicy) -> Tier:
    """The tier in force: the stored one (it only moves up), or the policy's for the stored total
    if that is higher."""
    key = keys.archive_meta
    raw: Any = client.hmget(key, ["tier", "total"])
    return policy.tier_after(stored_tier(key, raw[0]), stored_int(key, "total", raw[1], default=0))


#: The type of every fixed-name key of a namespace (per-batch, per-range and per-day keys aside).
KEY_TYPES = (
    ("active", "hash"),
    ("pending", "zset"),
    ("leases", "zset"),
    ("failed", "zset"),
    ("meta", "hash"),
    ("done", "string"),
    ("queue", "stream"),
    ("dead_letter", "stream"),
    ("completed", "hash"),
    ("index", "string"),
    ("archive_meta", "hash"),
    ("expiry", "zset"),
    ("sealed_counted", "zset"),
    ("expired_batches", "string"),
    ("open_batches", "zset"),
    ("archivers", "hash"),
    ("maintenance_lock", "string"),
    ("workers", "hash"),
    ("workers_by_short", "hash"),
    ("stats_global", "hash"),
    ("stats_workers", "hash"),
    ("stats_minutes", "hash"),
    ("stats_meta", "hash"),
)


def find_wrong_type_steps(keys: KeySchema) -> Steps[WrongKeyType | None]:
    """The first key of the namespace that holds another type than partarchive writes, as the
    error naming it; None if every key is of its type or absent (one pipeline of TYPE)."""
    batch = Batch()
    for name, _ in KEY_TYPES:
        batch.type(getattr(keys, name))
    replies = yield batch
    for (name, kind), actual in zip(KEY_TYPES, replies, strict=True):
        actual = as_text(actual)
        if actual not in ("none", kind):
            return WrongKeyType(f"{getattr(keys, name)} is a {actual}, not a {kind}: not partarchive's data")
    return None


def wrong_type_error_steps(keys: KeySchema) -> Steps[WrongKeyType]:
    """After a WRONGTYPE reply (which names no key): the error naming the key."""
    found = yield from find_wrong_type_steps(keys)
    return found or WrongKeyType(f"a key of namespace {keys.namespace} holds another type than partarchive writes")


def find_wrong_type(client: redis.Redis, keys: KeySchema) -> WrongKeyType | None:
    return SyncIO(client).run(find_wrong_type_steps(keys))


def wrong_type_error(client: redis.Redis, keys: KeySchema) -> WrongKeyType:
    return SyncIO(client).run(wrong_type_error_steps(keys))


def is_wrong_type(exc: BaseException) -> bool:
    return isinstance(exc, redis.ResponseError) and "WRONGTYPE" in str(exc)


@contextmanager
def typed_errors(client: redis.Redis, keys: KeySchema) -> Iterator[None]:
    """Turn a WRONGTYPE reply into `WrongKeyType` naming the key."""
    try:
        yield
    except redis.ResponseError as exc:
        if is_wrong_type(exc):
            raise wrong_type_error(client, keys) from None
        raise


def typed_steps(keys: KeySchema, steps: Steps[T]) -> Steps[T]:
    """`typed_errors` for steps: a WRONGTYPE reply to any of them becomes `WrongKeyType` naming the key."""
    try:
        return (yield from steps)
    except redis.ResponseError as exc:
        if is_wrong_type(exc):
            raise (yield from wrong_type_error_steps(keys)) from None
        raise

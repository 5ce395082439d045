"""The type of each of a namespace's keys, and a WRONGTYPE reply turned into the error naming the key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis

from layers.errors import WrongKeyType
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.runners import SyncIO
from layers.plumbing.steps import Batch, Steps

T = TypeVar("T")


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

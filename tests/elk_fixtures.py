"""Loading elk_coordinator keyspace dumps (the fixtures beside FORMAT.md) under a private prefix."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from layers import KeySchema

FIXTURES = Path(__file__).parent / "fixtures" / "elk"
DUMP_PREFIX = "elk:my-app:"


def dump_lines(name: str = "small.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def load_dump(
    client: redis.Redis,
    key_prefix: str,
    lines: list[dict[str, Any]] | None = None,
    mutate: Callable[[str, str, bytes], bytes | None] | None = None,
) -> dict[str, dict[str, bytes]]:
    """Load a dump with ``elk:my-app:`` replaced by ``elk:<key_prefix>``; returns hash contents by key.

    ``mutate(key, field, value)`` may change a hash value or drop it (None).
    """
    hashes: dict[str, dict[str, bytes]] = {}
    pipe = client.pipeline(transaction=False)
    for obj in lines if lines is not None else dump_lines():
        key = f"elk:{key_prefix}" + obj["key"].removeprefix(DUMP_PREFIX)
        if obj["type"] == "hash":
            value: bytes | None = base64.b64decode(obj["value_b64"])
            if mutate is not None:
                value = mutate(key, obj["field"], value)  # type: ignore[arg-type]
            if value is None:
                continue
            hashes.setdefault(key, {})[obj["field"]] = value
            pipe.hset(key, obj["field"], value)
        elif obj["type"] == "zset":
            pipe.zadd(key, {base64.b64decode(obj["member_b64"]): float(obj["score"])})
        else:
            pipe.set(key, base64.b64decode(obj["value_b64"]))
    pipe.execute()
    return hashes


def delete_prefix(client: redis.Redis, key_prefix: str, namespace: str = "elk") -> None:
    """Every key under Go's prefix, and ``namespace``'s binding to it (the tests bind ``elk``)."""
    pattern = f"elk:{key_prefix}".translate(str.maketrans({c: f"\\{c}" for c in "{}[]*?\\"})) + "*"
    keys = list(client.scan_iter(match=pattern, count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    binding = KeySchema(namespace).elk_binding
    if client.get(binding) == key_prefix.encode():
        client.delete(binding)


def digest(client: redis.Redis, patterns: list[str]) -> str:
    """A digest of every key matching the patterns: names, types and DUMPed values."""
    h = hashlib.sha256()
    keys = sorted({k for p in patterns for k in client.scan_iter(match=p, count=1000)})
    for key in keys:
        h.update(key + b"\0" + (client.dump(key) or b"") + b"\0")  # type: ignore[operator]
    return f"{len(keys)}:{h.hexdigest()}"

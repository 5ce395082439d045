"""Storage tiers of the archive, the policy that picks one from the completed total, and the stored tier read."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import redis

from codec.errors import ValidationError
from layers.archive.places import batch_of
from layers.errors import CorruptMetadata
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.settings import stored_int


class Tier(enum.StrEnum):
    SIMPLE = "simple"
    COMPRESSED = "compressed"
    SUMMARY = "summary"

    @property
    def rank(self) -> int:
        return list(Tier).index(self)


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """Simple below ``compressed_from``, compressed from it, summary above ``summary_above``."""

    compressed_from: int = 100_000
    summary_above: int = 500_000
    batch_size: int = 100
    retention_s: int = 24 * 3600
    seal_idle_s: float = 60.0
    migrate_chunk: int = 2000

    def __post_init__(self) -> None:
        if not 0 <= self.compressed_from <= self.summary_above:
            raise ValidationError("thresholds must satisfy 0 <= compressed_from <= summary_above")
        if not 1 <= self.batch_size <= 100_000:
            raise ValidationError("batch_size must be in 1..100000")
        if self.retention_s < 0 or self.seal_idle_s < 0 or self.migrate_chunk < 1:
            raise ValidationError("retention, seal idle time and migrate chunk must be positive")

    def tier_for(self, total: int) -> Tier:
        """The tier rule, the one definition in Python (``commit.lua`` mirrors it, and a test holds
        the two to the same answers): simple below ``compressed_from``, compressed from it,
        summary above ``summary_above``."""
        if total > self.summary_above:
            return Tier.SUMMARY
        if total >= self.compressed_from:
            return Tier.COMPRESSED
        return Tier.SIMPLE

    def tier_after(self, stored: Tier, total: int) -> Tier:
        """The tier in force with ``total`` archived: the rule's, or the stored one if that is
        higher (a tier never moves down, even when the thresholds are raised later)."""
        wanted = self.tier_for(total)
        return wanted if wanted.rank > stored.rank else stored

    def batch_of(self, pid: int) -> int:
        return batch_of(pid, self.batch_size)

    def capacity(self, batch_no: int) -> int:
        """How many partitions batch ``batch_no`` holds when full (batch 0 has no pid 0)."""
        return self.batch_size - 1 if batch_no == 0 else self.batch_size


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

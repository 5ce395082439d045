"""Storage tiers of the archive and the policy that picks one from the completed total."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from codec.errors import ValidationError
from layers.archive.places import batch_of


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

"""Statistics layer: batched rollups counted exactly once, the merged view, verify and repair."""

from stats.compaction import StatsCompactor
from stats.reader import StatsReader
from stats.rollup import DEFAULT_RANGE_WIDTH, day_of, rollup_segments
from stats.verify import CheckReport, Difference, StatsChecker

__all__ = [
    "DEFAULT_RANGE_WIDTH",
    "CheckReport",
    "Difference",
    "StatsChecker",
    "StatsCompactor",
    "StatsReader",
    "day_of",
    "rollup_segments",
]

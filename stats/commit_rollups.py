"""The statistics' part of the archive's commit, and the commit wired with it.

The commit (`layers.archive.commit`) counts partitions, acknowledges their entries and applies their
statistics in one script call; which hashes those statistics touch and by how much is this
layer's business (`stats.rollup`). `CommitRollups` computes it for every call the commit builds
(again for a commit sent again without the partitions found counted), and holds the namespace
to one range width.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from codec import ValidationError, WorkerMap
from codec.page import Columns
from layers import ArchiveLayer, KeySchema
from layers.archive.commit import DEFAULT_FLUSH_COUNT, DEFAULT_FLUSH_INTERVAL_S, CommitBuffer, Committer
from layers.plumbing.settings import stored_int
from stats.rollup import DEFAULT_RANGE_WIDTH, rollup_segments


class CommitRollups:
    """`CommitStatistics` for one namespace: its rollups, per ``range_width`` partitions."""

    def __init__(self, client: redis.Redis, keys: KeySchema, range_width: int = DEFAULT_RANGE_WIDTH) -> None:
        if range_width < 1:
            raise ValidationError("range_width must be positive")
        self.redis = client
        self.keys = keys
        self.range_width = range_width

    def check(self) -> None:
        """Record the range width on first use; refuse a different one (it would split ranges)."""
        meta = self.keys.stats_meta
        self.redis.hsetnx(meta, "range_width", self.range_width)
        stored = stored_int(meta, "range_width", self.redis.hget(meta, "range_width"), default=0, minimum=1)
        if stored != self.range_width:
            raise ValidationError(
                f"namespace {self.keys.namespace} keeps statistics per {stored} partitions, "
                f"not {self.range_width}: set PARTARCHIVE_STATS_RANGE_WIDTH={stored}"
            )

    def segments(
        self, cols: Columns, workers: WorkerMap, now: int, first_key: int
    ) -> tuple[list[str], list[str | int]]:
        return rollup_segments(cols, self.keys, self.range_width, now, workers, first_key)


def committer(
    archive: ArchiveLayer, range_width: int = DEFAULT_RANGE_WIDTH, clock: Callable[[], float] = time.time
) -> Committer:
    """The archive's commit with this namespace's statistics."""
    return Committer(archive, CommitRollups(archive.redis, archive.keys, range_width), clock)


def commit_buffer(
    archive: ArchiveLayer,
    *,
    flush_count: int = DEFAULT_FLUSH_COUNT,
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    range_width: int = DEFAULT_RANGE_WIDTH,
    clock: Callable[[], float] = time.monotonic,
) -> CommitBuffer:
    """Entries waiting for the archive's commit with this namespace's statistics."""
    return CommitBuffer(
        committer(archive, range_width), flush_count=flush_count, flush_interval_s=flush_interval_s, clock=clock
    )

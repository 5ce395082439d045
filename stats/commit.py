"""The archiver's commit: archived entries counted exactly once and acknowledged.

Entries whose detail is written wait here, unacknowledged, until a flush: every
``flush_count`` entries or ``flush_interval_s`` seconds, whichever comes first. A flush calls
down, in one direction: it counts each partition of the flush once (`split_counted`), builds
their statistics (`stats.rollup_ops`, pure; ranges name workers by registry number) and runs
one commit script (`ArchiveLayer.commit`) that sets their index bits, applies those statistics
and acknowledges + deletes every entry.
The script writes nothing if a counted partition already has its bit (a redelivered entry,
another archiver) and names those; the flush moves them to the acknowledged-only entries and
builds the statistics again. So a partition is counted exactly once however often its entry
is delivered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from codec import ArchivedPartition, ValidationError
from layers import ArchiveLayer, CommitResult, StaleWorkerNumbers
from layers.meta import stored_int
from stats.rollup import DEFAULT_RANGE_WIDTH, rollup_ops

#: One commit per page the archiver reads (``read_count``, 500): the commit script's cost is mostly
#: the statistics fields it touches, about the same for 100 partitions as for 500, so a page per
#: commit halves Redis's time per partition (``make bench ARGS=archiver``). Statistics still lag
#: by at most ``DEFAULT_FLUSH_INTERVAL_S``.
DEFAULT_FLUSH_COUNT = 500
DEFAULT_FLUSH_INTERVAL_S = 30.0


def split_counted(
    entries: Sequence[tuple[str, ArchivedPartition]], already: set[int]
) -> tuple[list[tuple[str, ArchivedPartition]], list[str]]:
    """The entries to count (each pid once, none of ``already``) and those only to acknowledge."""
    if not already and len({part.partition_id for _, part in entries}) == len(entries):
        return list(entries), []  # the usual case: every pid new and once
    counted: list[tuple[str, ArchivedPartition]] = []
    ack_only: list[str] = []
    seen: set[int] = set()
    for entry_id, part in entries:
        if part.partition_id in seen or part.partition_id in already:
            ack_only.append(entry_id)
        else:
            seen.add(part.partition_id)
            counted.append((entry_id, part))
    return counted, ack_only


class CommitBuffer:
    def __init__(
        self,
        archive: ArchiveLayer,
        *,
        flush_count: int = DEFAULT_FLUSH_COUNT,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        range_width: int = DEFAULT_RANGE_WIDTH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if flush_count < 1 or flush_interval_s <= 0 or range_width < 1:
            raise ValidationError("flush_count, flush_interval_s and range_width must be positive")
        self.archive = archive
        self.flush_count = flush_count
        self.flush_interval_s = flush_interval_s
        self.range_width = range_width
        self._clock = clock
        self._entries: list[tuple[str, ArchivedPartition]] = []
        self._since = 0.0
        self.flushes = 0
        self.round_trips = 0
        self._width_checked = False

    @property
    def pending(self) -> int:
        return len(self._entries)

    def buffered_ids(self) -> set[str]:
        """Queue entry ids waiting here for the next flush (delivered to this process already)."""
        return {entry_id for entry_id, _ in self._entries}

    def add(self, entries: Sequence[tuple[str, ArchivedPartition]]) -> list[CommitResult]:
        """Buffer entries whose detail is written; flush ``flush_count`` at a time when that many wait."""
        if entries and not self._entries:
            self._since = self._clock()
        self._entries.extend(entries)
        results = []
        while len(self._entries) >= self.flush_count:
            results.append(self.flush(self.flush_count))
        return results

    def due(self) -> bool:
        return bool(self._entries) and self._clock() - self._since >= self.flush_interval_s

    def flush(self, limit: int | None = None) -> CommitResult:
        """Commit the oldest ``limit`` buffered entries, or all (one round trip; two if one of
        them was archived already). On failure they stay buffered, unacknowledged."""
        cut = len(self._entries) if limit is None else limit
        entries, self._entries = self._entries[:cut], self._entries[cut:]
        self.check_range_width()
        try:
            result = self._commit(entries)
        except BaseException:
            self._entries = entries + self._entries  # nothing was acknowledged; try again later
            raise
        self.flushes += 1
        if self._entries:
            self._since = self._clock()
        return result

    def _commit(self, entries: list[tuple[str, ArchivedPartition]]) -> CommitResult:
        already: set[int] = set()
        registry = self.archive.workers
        for _ in range(3):
            counted, ack_only = split_counted(entries, already)
            parts = [p for _, p in counted]
            workers, generation = registry.numbering({p.worker_id for p in parts})
            keys, ops = rollup_ops(parts, self.archive.keys, self.range_width, int(time.time()), workers)
            self.round_trips += 1
            try:
                result = self.archive.commit(counted, ack_only, keys, ops, generation if parts else None)
            except StaleWorkerNumbers:
                registry.reload()
                continue
            if isinstance(result, CommitResult):
                return result
            already.update(result)
        raise RuntimeError("commit kept finding new duplicates; is another archiver misconfigured?")

    def check_range_width(self) -> None:
        """Record the range width on first use; refuse a different one (it would split ranges)."""
        if self._width_checked:
            return
        meta = self.archive.keys.stats_meta
        redis = self.archive.redis
        redis.hsetnx(meta, "range_width", self.range_width)
        stored = stored_int(meta, "range_width", redis.hget(meta, "range_width"), default=0, minimum=1)
        if stored != self.range_width:
            raise ValidationError(
                f"namespace {self.archive.keys.namespace} keeps statistics per {stored} partitions, "
                f"not {self.range_width}: set PARTARCHIVE_STATS_RANGE_WIDTH={stored}"
            )
        self._width_checked = True

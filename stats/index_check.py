"""The archive checked against the index a few statistics ranges at a time, resumably.

The archiver runs this check once after its queue's consumer group was lost (Redis restarted
without its data): what the lost entries had completed is still marked in the index, and the
rollups must agree with it. `StatsChecker.check` (``partarchive stats verify``) reads every
partition's detail at once, which inside the daemon would stall archiving and hold the whole
archive in memory; this walk is a maintenance step instead, run under the maintenance lock and
paced like the tier moves.

Its state is one hash (`KeySchema.stats_index_check`): the next range, the last one, and the
running counts, so whichever archiver holds the lock next goes on where the last one stopped.
Each step reads only what its ranges cover (their slice of the index, their simple records, the
batches they span, their rollups) and checks each range as ``stats verify`` does (field by field
where every indexed partition has detail, else by count), and names the indexed partitions whose
detail is missing rather than expired (`stats.lost`); ranges merged into a coarse range go as
their whole group. Last, one MULTI reads the index's bit count and the global and per-worker
totals together (the commit script writes them together) and checks them against each other.
The result is logged and kept in the statistics meta hash (``index_check_at``, ``_ok``,
``_differences``). Day series are left to ``stats verify``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson
import redis
import structlog
from redis.client import Pipeline

from codec import ArchivedPartition
from layers import KeySchema, TierPolicy
from layers.archive.places import bit_set, byte_of
from layers.plumbing.replies import as_text
from layers.plumbing.resharding import run_transaction
from layers.plumbing.settings import stored_int
from stats.compaction import COARSE, coarse_of
from stats.fields import worker_ids
from stats.lost import lost_detail, marked, runs
from stats.verify import CheckReport, Difference, StatsChecker

log = structlog.get_logger("partarchive.stats")

#: Differences kept word for word in the walk's report (the rest are counted).
EXAMPLES_KEPT = 10
_COUNTS = ("ranges_checked", "ranges_count_only", "undecodable_batches", "differences", "detail_missing")


@dataclass(frozen=True, slots=True)
class IndexCheckReport:
    ok: bool
    ranges_checked: int
    ranges_count_only: int
    undecodable_batches: int
    differences: int
    detail_missing: int  # indexed partitions whose records are gone (`stats.lost`)
    detail_expired: int  # indexed partitions whose detail expired on purpose
    examples: list[str]
    indexed: int
    elapsed_s: float


class IndexCheck:
    def __init__(self, client: redis.Redis, keys: KeySchema, policy: TierPolicy | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.checker = StatsChecker(client, keys, policy=policy)
        self.key = keys.stats_index_check

    def request(self) -> None:
        """Start a walk from the first range; one already under way goes on."""
        self.redis.hsetnx(self.key, "started_at", f"{time.time():.3f}")

    def under_way(self) -> bool:
        """A walk has been requested and has not reached the last range."""
        return bool(self.redis.exists(self.key))

    def step(self, max_ranges: int) -> int:
        """Check up to ``max_ranges`` ranges (a coarse group whole), or finish the walk; returns the
        ranges handled plus one when it finished (0: no walk under way)."""
        state: Any = self.redis.hgetall(self.key)
        if not state:
            return 0
        state = {as_text(k): as_text(v) for k, v in state.items()}
        width = self.checker.reader.range_width()
        meta = self.keys.archive_meta
        if "last_range" not in state:
            max_pid = stored_int(meta, "max_pid", self.redis.hget(meta, "max_pid"), default=0)
            state["last_range"] = str(max_pid // width)
            self.redis.hset(self.key, "last_range", state["last_range"])
        cursor, last = int(state.get("cursor", 0)), int(state["last_range"])
        if cursor > last:
            self._finish(state)
            return 1
        merged_below = int(self.redis.hget(self.keys.stats_meta, "compact_range") or 0)  # type: ignore[arg-type]
        if cursor < merged_below:  # a coarse group goes whole: its hash holds all its members
            end = min((coarse_of(cursor) + 1) * COARSE, merged_below, last + 1)
        else:
            end = min(last + 1, cursor + max(1, max_ranges))
        report = self._check(range(cursor, end), width, merged_below)
        self._note(report, end)
        return end - cursor

    def _check(self, numbers: range, width: int, merged_below: int) -> CheckReport:
        checker, keys = self.checker, self.keys
        lo, hi = numbers.start * width, numbers.stop * width  # the pids these ranges cover
        first_byte = byte_of(lo)
        raw_index: Any = self.redis.getrange(keys.index, first_byte, byte_of(hi - 1))
        index = bytes(raw_index or b"")

        def indexed(pid: int) -> bool:
            return lo <= pid < hi and bit_set(index, pid, first_byte)

        report = CheckReport()
        found: dict[int, ArchivedPartition] = {}
        if self.redis.hlen(keys.completed):
            for start in range(lo, hi, 1000):
                names = [str(p) for p in range(start, min(hi, start + 1000))]
                values: Any = self.redis.hmget(keys.completed, names)
                for raw in values:
                    if raw is not None:
                        checker._keep(found, raw, indexed)
        batch_of = checker.batch_of
        checker._batch_detail(range(batch_of(lo), batch_of(hi - 1) + 1), indexed, report, False, found)
        first_mark = byte_of(batch_of(lo)) * 8
        raw_marks: Any = self.redis.getrange(keys.expired_batches, byte_of(first_mark), byte_of(batch_of(hi - 1)))
        marks = bytes(raw_marks or b"")
        report.lost = lost_detail(
            (p for p in range(lo, hi) if indexed(p)),
            found,
            batch_of,
            lambda b: marked(marks, b, first_mark),
            set(report.undecodable_batches),
        )
        by_range: dict[int, list[ArchivedPartition]] = defaultdict(list)
        for part in found.values():
            by_range[part.partition_id // width].append(part)
        counts = {r: sum(indexed(p) for p in range(r * width, (r + 1) * width)) for r in numbers}
        report.indexed = sum(counts.values())
        report.partitions_with_detail = len(found)

        pipe = self.redis.pipeline(transaction=False)
        for r in numbers:
            pipe.hgetall(keys.stats_range(r))
        pipe.hgetall(keys.workers_by_short)
        *raw_ranges, registry = pipe.execute()
        checker._worker_ids = worker_ids(registry)
        stored = {r: checker._stored(raw) for r, raw in zip(numbers, raw_ranges, strict=True)}
        rewrites: dict[str, dict[str, int]] = {}
        if numbers.start < merged_below:
            checker._check_coarse(
                report, coarse_of(numbers.start), list(numbers), stored, by_range, counts, width, rewrites
            )
        else:
            for r in numbers:
                checker._check_range(report, r, stored[r], counts[r], by_range.get(r, []), width, rewrites)
        return report

    def _note(self, report: CheckReport, cursor: int) -> None:
        def note(pipe: Pipeline) -> None:
            pipe.hset(self.key, "cursor", cursor)
            pipe.hincrby(self.key, "ranges_checked", report.ranges_checked)
            pipe.hincrby(self.key, "ranges_count_only", report.ranges_count_only)
            pipe.hincrby(self.key, "undecodable_batches", len(set(report.undecodable_batches)))
            pipe.hincrby(self.key, "differences", len(report.differences))
            pipe.hincrby(self.key, "indexed", report.indexed)
            pipe.hincrby(self.key, "detail_missing", len(report.lost.missing))
            pipe.hincrby(self.key, "detail_expired", report.lost.expired)
            examples = [str(d) for d in report.differences]
            if report.lost.missing:
                examples.append("detail missing: partitions " + ", ".join(runs(report.lost.missing)[:EXAMPLES_KEPT]))
            for example in examples[:EXAMPLES_KEPT]:
                pipe.rpush(self.key + ":examples", example)
            pipe.ltrim(self.key + ":examples", 0, EXAMPLES_KEPT - 1)

        run_transaction(self.redis, note, "index_check_progress")

    def _totals(self) -> list[Difference]:
        """The index's bit count, the global totals and the per-worker totals, read in one MULTI."""
        k = self.keys

        def reads(pipe: Pipeline) -> None:
            pipe.bitcount(k.index)
            pipe.hgetall(k.stats_global)
            pipe.hgetall(k.stats_workers)

        bits, raw_global, raw_workers = run_transaction(self.redis, reads, "index_check_totals")
        totals = {as_text(a): int(b) for a, b in raw_global.items() if as_text(a) != "last_updated"}
        by_kind: dict[str, int] = defaultdict(int)
        for name, value in raw_workers.items():
            by_kind[as_text(name).rpartition(":")[2]] += int(value)
        out = []
        if totals.get("completed", 0) != bits:
            out.append(Difference(k.stats_global, "completed", totals.get("completed"), bits, "index bitmap"))
        for kind, name in (("c", "completed"), ("p", "processed"), ("d", "duration")):
            if by_kind.get(kind, 0) != totals.get(name, 0):
                why = "sum of the workers' totals"
                out.append(Difference(k.stats_global, name, totals.get(name), by_kind.get(kind, 0), why))
        return out

    def _finish(self, state: dict[str, str]) -> IndexCheckReport:
        totals = self._totals()
        examples: Any = self.redis.lrange(self.key + ":examples", 0, -1)
        counts = {name: int(state.get(name, 0)) for name in (*_COUNTS, "indexed", "detail_expired")}
        counts["differences"] += len(totals)
        report = IndexCheckReport(
            ok=not counts["differences"] and not counts["undecodable_batches"] and not counts["detail_missing"],
            ranges_checked=counts["ranges_checked"],
            ranges_count_only=counts["ranges_count_only"],
            undecodable_batches=counts["undecodable_batches"],
            differences=counts["differences"],
            detail_missing=counts["detail_missing"],
            detail_expired=counts["detail_expired"],
            examples=([as_text(e) for e in examples] + [str(d) for d in totals])[:EXAMPLES_KEPT],
            indexed=counts["indexed"],
            elapsed_s=round(time.time() - float(state.get("started_at", time.time())), 1),
        )

        def done(pipe: Pipeline) -> None:
            pipe.hset(
                self.keys.stats_meta,
                mapping={
                    "index_check_at": int(time.time()),
                    "index_check_ok": int(report.ok),
                    "index_check_differences": report.differences,
                    "index_check_examples": orjson.dumps(report.examples),
                },
            )
            pipe.delete(self.key, self.key + ":examples")

        run_transaction(self.redis, done, "index_check_result")
        (log.info if report.ok else log.warning)("archive checked against the index", **_fields(report))
        return report


def _fields(report: IndexCheckReport) -> dict[str, Any]:
    return {name: getattr(report, name) for name in IndexCheckReport.__slots__}

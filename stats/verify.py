"""Consistency check and repair of the statistics.

What can be recomputed is: every partition whose archive detail still exists (simple hash,
staging, sealed batches) and the index bitmap, which proves how many partitions of each
range were counted. A range whose every indexed partition still has detail is checked
field by field; a range with expired detail only by its count. An indexed partition without
detail whose batch the summary tier's sweep did not expire is lost, and named (`stats.lost`).
Global and per-worker rollups must equal the sum of the ranges. Repair rewrites what the stored
data proves and never sets a count other than the index's; it cannot bring lost records back.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.client import Pipeline

from codec import ArchivedPartition, DecodeError
from codec.stored import as_archived, parse_archived
from layers import ArchiveLayer, KeySchema, TierPolicy
from layers.archive.places import batch_of, bit_set
from layers.plumbing.replies import as_text
from layers.plumbing.resharding import run_transaction
from layers.plumbing.roundtrip import RoundTrip, raised
from layers.plumbing.settings import stored_int
from stats.compaction import coarse_of, merge_fields
from stats.fields import by_worker_id, to_numbered, worker_ids
from stats.lost import LostDetail, indexed_pids, lost_detail, marked, runs
from stats.reader import StatsReader
from stats.rollup import RollupBuilder, add_partitions

Progress = Callable[[int, int], None]
_CHUNK = 256


@dataclass(frozen=True, slots=True)
class Difference:
    key: str
    field: str
    stored: int | None
    expected: int | None
    why: str

    def __str__(self) -> str:
        return f"{self.key} {self.field}: stored {self.stored}, expected {self.expected} ({self.why})"


@dataclass
class CheckReport:
    differences: list[Difference] = field(default_factory=list)
    ranges_checked: int = 0
    ranges_count_only: int = 0
    partitions_with_detail: int = 0
    indexed: int = 0
    undecodable_batches: list[int] = field(default_factory=list)
    repaired_keys: int = 0
    lost: LostDetail = field(default_factory=LostDetail)  # indexed partitions without detail (`stats.lost`)

    @property
    def ok(self) -> bool:
        """No difference, every sealed batch read and no detail missing: a batch that cannot be
        decoded hides what it held from the check, and missing detail is records lost."""
        return not self.differences and not self.undecodable_batches and not self.lost.missing

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "differences": [str(d) for d in self.differences],
            "ranges_checked": self.ranges_checked,
            "ranges_count_only": self.ranges_count_only,
            "partitions_with_detail": self.partitions_with_detail,
            "indexed": self.indexed,
            "undecodable_batches": self.undecodable_batches,
            "repaired_keys": self.repaired_keys,
            "detail_expired": self.lost.expired,
            "detail_missing": len(self.lost.missing),
            "detail_missing_partitions": runs(self.lost.missing),
        }


def _ints(raw: dict[Any, Any]) -> dict[str, int]:
    out = {}
    for k, v in raw.items():
        try:
            out[as_text(k)] = int(v)
        except ValueError:
            out[as_text(k)] = -1  # a non-number never equals what is expected: reported, repaired
    return out


class StatsChecker:
    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        policy: TierPolicy | None = None,
    ) -> None:
        self.redis = redis_client
        self.keys = KeySchema.of(namespace, cluster, client=redis_client)
        self.archive = ArchiveLayer(redis_client, self.keys, policy)
        self.reader = StatsReader(redis_client, self.keys)
        self._worker_ids: dict[int, str] = {}  # the registry, short -> ID, read by `check`

    def batch_of(self, pid: int) -> int:
        """A partition's batch as the namespace's batches were written: by the stored batch size,
        whatever this process is configured with (as the router finds them)."""
        return batch_of(pid, self.archive.stored_batch_size())

    def _index(self) -> bytes:
        raw = self.redis.get(self.keys.index)
        return raw if isinstance(raw, bytes) else b""

    def _detail(
        self, index: bytes, report: CheckReport, progress: Progress | None, repair: bool
    ) -> dict[int, ArchivedPartition]:
        """Every counted partition whose detail still exists, by pid."""
        k = self.keys
        found: dict[int, ArchivedPartition] = {}

        def indexed(pid: int) -> bool:
            return bit_set(index, pid)

        for _, raw in self.redis.hscan_iter(k.completed, count=1000):
            self._keep(found, raw, indexed)
        max_pid = stored_int(k.archive_meta, "max_pid", self.redis.hget(k.archive_meta, "max_pid"), default=0)
        last_batch = self.batch_of(max_pid)
        for start in range(0, last_batch + 1, _CHUNK):
            self._batch_detail(range(start, min(last_batch + 1, start + _CHUNK)), indexed, report, repair, found)
            if progress:
                progress(min(last_batch + 1, start + _CHUNK), last_batch + 1)
        return found

    def _batch_detail(
        self,
        numbers: range,
        indexed: Callable[[int], bool],
        report: CheckReport,
        repair: bool,
        found: dict[int, ArchivedPartition],
    ) -> None:
        """The indexed partitions of these batches (staged and sealed) into ``found``."""
        trip = RoundTrip.on(self.redis)
        staging = trip.part(raised)
        for b in numbers:
            staging.hvals(self.keys.staging(b))
        shelves = self.archive.shelves.add_reads(trip, numbers, repair=repair)
        trip.run()
        stored = shelves.value
        for b, staged in zip(numbers, staging.value, strict=True):
            if stored[b].damaged:
                report.undecodable_batches.append(b)
            for blob in stored[b].blobs:
                try:
                    for part in self.archive.sealing.decode_batch(blob):
                        if indexed(part.partition_id):
                            found.setdefault(part.partition_id, part)
                except DecodeError:
                    report.undecodable_batches.append(b)
            for raw in staged:
                self._keep(found, raw, indexed)

    def _keep(self, found: dict[int, ArchivedPartition], raw: bytes, indexed: Callable[[int], bool]) -> None:
        try:
            part = as_archived(parse_archived(raw))
        except DecodeError:
            return
        if indexed(part.partition_id):
            found.setdefault(part.partition_id, part)

    def check(self, *, repair: bool = False, progress: Progress | None = None) -> CheckReport:
        report = CheckReport()
        index = self._index()
        width = self.reader.range_width()
        detail = self._detail(index, report, progress, repair)
        report.partitions_with_detail = len(detail)
        indexed_per_range: dict[int, int] = defaultdict(int)
        for pid in indexed_pids(index):
            indexed_per_range[pid // width] += 1
        report.indexed = sum(indexed_per_range.values())
        marks: Any = self.redis.get(self.keys.expired_batches)  # read after the detail: a sweep meanwhile counts
        report.lost = lost_detail(
            indexed_pids(index),
            detail,
            self.batch_of,
            lambda b: marked(marks or b"", b),
            set(report.undecodable_batches),
        )
        by_range: dict[int, list[ArchivedPartition]] = defaultdict(list)
        for part in detail.values():
            by_range[part.partition_id // width].append(part)

        ranges = sorted(set(indexed_per_range) | set(self._stored_ranges(width)))
        pipe = self.redis.pipeline(transaction=False)
        for r in ranges:
            pipe.hgetall(self.keys.stats_range(r))
        pipe.hgetall(self.keys.workers_by_short)
        *raw_ranges, registry = pipe.execute()
        self._worker_ids = worker_ids(registry)  # ranges are compared with their workers named by ID
        stored_ranges = dict(zip(ranges, (self._stored(x) for x in raw_ranges), strict=True))
        merged_below = int(self.redis.hget(self.keys.stats_meta, "compact_range") or 0)  # type: ignore[arg-type]
        fully_backed = True
        rewrites: dict[str, dict[str, int]] = {}
        after: dict[str, dict[str, int]] = {}
        groups: dict[int, list[int]] = defaultdict(list)
        for r in ranges:
            if r < merged_below:
                groups[coarse_of(r)].append(r)
                continue
            key = self.keys.stats_range(r)
            backed = self._check_range(
                report, r, stored_ranges[r], indexed_per_range.get(r, 0), by_range.get(r, []), width, rewrites
            )
            fully_backed = fully_backed and backed
            after[key] = rewrites.get(key, stored_ranges[r])
        for c, members in sorted(groups.items()):
            backed = self._check_coarse(report, c, members, stored_ranges, by_range, indexed_per_range, width, rewrites)
            fully_backed = fully_backed and backed
            after[self.keys.stats_coarse(c)] = rewrites.get(
                self.keys.stats_coarse(c),
                merge_fields([self._stored(self.redis.hgetall(self.keys.stats_coarse(c)))]),
            )
            for r in members:
                after[self.keys.stats_range(r)] = rewrites.get(self.keys.stats_range(r), stored_ranges[r])
        self._check_sums(report, after, rewrites)
        if fully_backed:
            self._check_days(report, list(detail.values()), rewrites)
        if repair and rewrites:
            self._number_workers(rewrites)

            def rewrite(pipe: Pipeline) -> None:
                for key, fields in rewrites.items():
                    pipe.delete(key)
                    if fields:
                        pipe.hset(key, mapping=fields)  # type: ignore[arg-type]

            run_transaction(self.redis, rewrite, "stats_repair")
            report.repaired_keys = len(rewrites)
        self.redis.hset(
            self.keys.stats_meta,
            mapping={
                "last_check_at": int(time.time()),
                "last_check_ok": int(report.ok),
                "last_check_differences": len(report.differences),
            },
        )
        return report

    def _check_range(
        self,
        report: CheckReport,
        range_no: int,
        stored: dict[str, int],
        indexed: int,
        parts: list[ArchivedPartition],
        width: int,
        rewrites: dict[str, dict[str, int]],
    ) -> bool:
        """One range against what its detail proves (every indexed partition has detail: field by
        field), or else against the index's count alone; returns whether the detail backed it."""
        key = self.keys.stats_range(range_no)
        if len(parts) == indexed:
            report.ranges_checked += 1
            expected = self._expected_range(range_no, parts, width)
            for name in sorted(set(stored) | set(expected)):
                if stored.get(name) != expected.get(name):
                    report.differences.append(
                        Difference(key, name, stored.get(name), expected.get(name), "recomputed from detail")
                    )
            if stored != expected:
                rewrites[key] = expected
            return True
        report.ranges_count_only += 1
        if stored.get("count") != indexed:
            report.differences.append(Difference(key, "count", stored.get("count"), indexed, "index bitmap"))
            rewrites[key] = {**stored, "count": indexed}
        return False

    def _check_coarse(
        self,
        report: CheckReport,
        coarse_no: int,
        members: list[int],
        stored_ranges: dict[int, dict[str, int]],
        by_range: dict[int, list[ArchivedPartition]],
        indexed_per_range: dict[int, int],
        width: int,
        rewrites: dict[str, dict[str, int]],
    ) -> bool:
        """Ranges merged into a coarse range are checked together: the coarse hash plus any fine
        hash of late completions against what the detail (or the index) proves for all of them."""
        key = self.keys.stats_coarse(coarse_no)
        stored = merge_fields([self._stored(self.redis.hgetall(key)), *(stored_ranges[r] for r in members)])
        indexed = sum(indexed_per_range.get(r, 0) for r in members)
        backed = all(len(by_range.get(r, [])) == indexed_per_range.get(r, 0) for r in members)
        if backed:
            report.ranges_checked += len(members)
            expected = merge_fields([self._expected_range(r, by_range.get(r, []), width) for r in members])
            for name in sorted(set(stored) | set(expected)):
                if stored.get(name) != expected.get(name):
                    report.differences.append(
                        Difference(key, name, stored.get(name), expected.get(name), "recomputed from detail")
                    )
        else:
            report.ranges_count_only += len(members)
            expected = {**stored, "count": indexed}
            if stored.get("count") != indexed:
                report.differences.append(Difference(key, "count", stored.get("count"), indexed, "index bitmap"))
        if stored != expected:
            rewrites[key] = expected
            for r in members:
                rewrites[self.keys.stats_range(r)] = {}
        return backed

    def _expected_range(self, range_no: int, parts: list[ArchivedPartition], width: int) -> dict[str, int]:
        """A range's fields as ``parts`` imply them, workers named by ID."""
        builder = RollupBuilder()
        add_partitions(builder, parts, self.keys, width, None)
        return _expected_fields(builder, self.keys.stats_range(range_no))

    def _stored(self, raw: Any) -> dict[str, int]:
        """A stored range or coarse hash with its workers named by ID (`stats.fields`)."""
        return by_worker_id(_ints(raw), self._worker_ids)

    def _number_workers(self, rewrites: dict[str, dict[str, int]]) -> None:
        """Range and coarse rewrites as they are stored: workers named by registry number."""
        range_prefix, coarse_prefix = self.keys.stats_range(0)[:-1], self.keys.stats_coarse(0)[:-1]

        def shorts(ids: Any) -> dict[str, int]:
            numbers = self.archive.workers.register(ids)
            return {w: numbers.short_id(w) for w in ids}

        for key, fields in rewrites.items():
            if key.startswith((range_prefix, coarse_prefix)):
                rewrites[key] = to_numbered(fields, shorts)

    def _stored_ranges(self, width: int) -> list[int]:
        meta = self.keys.archive_meta
        max_pid = stored_int(meta, "max_pid", self.redis.hget(meta, "max_pid"), default=0)
        return list(range(0, max_pid // width + 1)) if max_pid else []

    def _check_sums(
        self, report: CheckReport, ranges: dict[str, dict[str, int]], rewrites: dict[str, dict[str, int]]
    ) -> None:
        """Global and per-worker rollups must be the sums of the ranges."""
        g_key, w_key = self.keys.stats_global, self.keys.stats_workers
        stored_g = _ints(self.redis.hgetall(g_key))  # type: ignore[arg-type]
        stored_w = _ints(self.redis.hgetall(w_key))  # type: ignore[arg-type]
        expected_g = {"completed": 0, "processed": 0, "duration": 0}
        expected_w: dict[str, int] = defaultdict(int)
        for fields in ranges.values():
            expected_g["completed"] += fields.get("count", 0)
            expected_g["processed"] += fields.get("data", 0)
            expected_g["duration"] += fields.get("duration", 0)
            for name, value in fields.items():
                if ":" in name:
                    expected_w[name] += value
        for name, value in expected_g.items():
            if stored_g.get(name, 0) != value:
                report.differences.append(Difference(g_key, name, stored_g.get(name), value, "sum of the ranges"))
                rewrites[g_key] = {**stored_g, **expected_g}
        if {k: v for k, v in stored_w.items() if v} != {k: v for k, v in expected_w.items() if v}:
            for name in sorted(set(stored_w) | set(expected_w)):
                if stored_w.get(name, 0) != expected_w.get(name, 0):
                    report.differences.append(
                        Difference(w_key, name, stored_w.get(name), expected_w.get(name), "sum of the ranges")
                    )
            rewrites[w_key] = dict(expected_w)

    def _check_days(
        self, report: CheckReport, parts: list[ArchivedPartition], rewrites: dict[str, dict[str, int]]
    ) -> None:
        builder = RollupBuilder()
        add_partitions(builder, parts, self.keys, 10**12, None)
        day_prefix = self.keys.stats_day("")
        expected: dict[str, dict[str, int]] = defaultdict(dict)
        keys, ops = builder.build()
        for pos, op, name, value in ops:
            if keys[pos].startswith(day_prefix) and op == "+":
                expected[keys[pos]][name] = value
        stored_keys = {
            as_text(k) for k in self.redis.scan_iter(match=day_prefix.replace("{", "\\{").replace("}", "\\}") + "*")
        }
        for key in sorted(stored_keys | set(expected)):
            stored = _ints(self.redis.hgetall(key))  # type: ignore[arg-type]
            if "d" in stored:  # hours rolled into the day: compare the day's total and its workers
                stored = _rolled(stored)
                expected[key] = _rolled(expected.get(key, {}))
            if stored != expected.get(key, {}):
                report.differences.append(
                    Difference(
                        key, "*", sum(stored.values()), sum(expected.get(key, {}).values()), "recomputed from detail"
                    )
                )
                rewrites[key] = expected.get(key, {})


def _rolled(fields: dict[str, int]) -> dict[str, int]:
    """A day's fields with its hours added into ``d``, as the statistics retention keeps old days."""
    out = {name: value for name, value in fields.items() if not (name.startswith("h") and name[1:].isdigit())}
    out["d"] = out.get("d", 0) + sum(v for name, v in fields.items() if name.startswith("h") and name[1:].isdigit())
    return out


def _expected_fields(builder: RollupBuilder, key: str) -> dict[str, int]:
    keys, ops = builder.build()
    return {name: value for pos, _op, name, value in ops if keys[pos] == key}

"""``find``: partitions searched by worker, completion time, duration, ids and status, in
partition order, a page at a time, across every layer that holds them.

A search walks the partition ids in windows (`WINDOW_BATCHES` batches). For each window it reads
the index bits and, per statistics range, the rollup's completion time bounds and the searched
worker's count (`stats.reader.range_bounds_commands`): a range they rule out is not read at all.
Of the rest it reads the sealed blobs (`layers.archive.scan`, bounded and paced calls), decodes
first only the columns its filters need (`codec.framing.blob_rows`), and adds staged records, the
simple hash's, and rows of cold files (`layers.archive.cold`) where a batch went there. A batch whose
detail has left Redis and is in no cold file (or whose cold file cannot be read) is answered by
its range's statistics instead of rows, and the page says so (`Page.statistics`). Active
partitions (pending, claimed, running, failed) come from the active layer's indexes.

A page ends after ``limit`` partitions, or when its time budget is spent; ``next_cursor`` resumes
there (a cursor belongs to the filters it was made with). Completions that wait in the archive
queue, or that a pause or gray release holds in the active hash, are not searched: a page counts
them in ``not_searched``.

Filters: ``completed_after`` is inclusive, ``completed_before`` exclusive; durations and ids are
closed ranges. Completion time and duration filters match completed partitions only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from codec import DecodeError, PartitionInfo, ValidationError
from codec.columnar import RowFilter
from codec.framing import SHELF_SLOTS, blob_rows
from codec.stored import as_archived, parse_active, parse_archived
from codec.validate import MAX_DURATION, MAX_PARTITION_ID, MAX_TIMESTAMP, check_worker_id
from layers import ArchiveLayer, KeySchema
from layers.archive.cold_store import ColdReads, name_of
from layers.archive.places import batch_of
from layers.archive.scan import ArchiveScan, ArchiveState, ReadPacer, Window, command
from layers.errors import ColdFileDamaged, ColdStoreUnavailable
from layers.plumbing.replies import as_text
from stats.compaction import COARSE
from stats.reader import RangeBounds, range_bounds_commands
from stats.rollup import DEFAULT_RANGE_WIDTH

STATUSES = ("pending", "claimed", "running", "failed", "completed")
ACTIVE_STATUSES = STATUSES[:4]
#: Batches a window covers (64,000 partitions at the default batch size: ten shelves).
WINDOW_BATCHES = 640
MAX_LIMIT = 1_000_000
_CURSOR = re.compile(r"^([0-9]{1,10})\.([0-9a-f]{12})$")
_IDS = re.compile(r"^\s*([0-9]{1,10})\s*(?:-\s*([0-9]{1,10})\s*)?$")


def parse_time(name: str, text: str) -> int:
    """Unix seconds, or an ISO 8601 date or time (without a zone: UTC)."""
    text = text.strip()
    if re.fullmatch(r"[0-9]{1,13}", text):
        value = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValidationError(
                f"{name} takes ISO 8601 (2024-06-24T13:00:00Z) or unix seconds, got {text!r}"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        value = int(when.timestamp())
    if not 0 <= value <= MAX_TIMESTAMP:
        raise ValidationError(f"{name} is out of range: {text!r}")
    return value


def _seconds(name: str, text: str | int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} takes whole seconds, got {text!r}") from None
    if not 0 <= value <= MAX_DURATION:
        raise ValidationError(f"{name} must be 0..{MAX_DURATION} seconds, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Filters:
    worker: str | None = None
    completed_after: int | None = None  # inclusive
    completed_before: int | None = None  # exclusive
    min_duration: int | None = None
    max_duration: int | None = None
    ids: tuple[int, int] | None = None
    statuses: tuple[str, ...] = STATUSES

    def __post_init__(self) -> None:
        if self.worker is not None:
            check_worker_id(self.worker)
        after, before = self.completed_after, self.completed_before
        if after is not None and before is not None and after >= before:
            raise ValidationError("completed_after must be before completed_before")
        low, high = self.min_duration, self.max_duration
        if low is not None and high is not None and low > high:
            raise ValidationError("min_duration must not be above max_duration")
        if self.ids is not None and not 1 <= self.ids[0] <= self.ids[1] <= MAX_PARTITION_ID:
            raise ValidationError(f"ids must be a range A-B of partition ids 1..{MAX_PARTITION_ID}, A <= B")
        if not self.statuses or any(s not in STATUSES for s in self.statuses):
            raise ValidationError(f"status must be one or more of {', '.join(STATUSES)} (or any)")

    @classmethod
    def parse(
        cls,
        *,
        worker: str | None = None,
        completed_after: str | None = None,
        completed_before: str | None = None,
        min_duration: str | int | None = None,
        max_duration: str | int | None = None,
        ids: str | None = None,
        status: str | None = None,
    ) -> Filters:
        """Filters from text as the command line and the HTTP API take it; `ValidationError` naming
        the bad one."""
        span = None
        if ids is not None:
            match = _IDS.fullmatch(ids)
            if not match:
                raise ValidationError(f"ids takes A-B (or one id A), got {ids!r}")
            span = (int(match[1]), int(match[2] or match[1]))
        statuses: tuple[str, ...] = STATUSES
        if status is not None and status.strip() not in ("", "any"):
            statuses = tuple(dict.fromkeys(s.strip() for s in status.split(",")))
        return cls(
            worker=worker,
            completed_after=None if completed_after is None else parse_time("completed_after", completed_after),
            completed_before=None if completed_before is None else parse_time("completed_before", completed_before),
            min_duration=None if min_duration is None else _seconds("min_duration", min_duration),
            max_duration=None if max_duration is None else _seconds("max_duration", max_duration),
            ids=span,
            statuses=statuses,
        )

    @property
    def completion(self) -> bool:
        """Whether a filter only completed partitions can match is set."""
        return any(v is not None for v in (self.completed_after, self.completed_before, self.min_duration,
                                           self.max_duration))  # fmt: skip

    def row_filter(self, shorts: frozenset[int] | None) -> RowFilter | None:
        completed = None
        if self.completed_after is not None or self.completed_before is not None:
            completed = (self.completed_after or 0, (self.completed_before or MAX_TIMESTAMP + 1) - 1)
        duration = None
        if self.min_duration is not None or self.max_duration is not None:
            duration = (self.min_duration or 0, MAX_DURATION if self.max_duration is None else self.max_duration)
        if shorts is None and completed is None and duration is None:
            return None
        return RowFilter(shorts=shorts, completed=completed, duration=duration)

    def keeps(self, worker: str, at: int, duration: int) -> bool:
        return (
            (self.worker is None or worker == self.worker)
            and (self.completed_after is None or at >= self.completed_after)
            and (self.completed_before is None or at < self.completed_before)
            and (self.min_duration is None or duration >= self.min_duration)
            and (self.max_duration is None or duration <= self.max_duration)
        )

    def digest(self) -> str:
        """What a cursor carries of the filters it belongs to."""
        text = repr((self.worker, self.completed_after, self.completed_before, self.min_duration,
                     self.max_duration, self.ids, sorted(self.statuses)))  # fmt: skip
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "completed_after": self.completed_after,
            "completed_before": self.completed_before,
            "min_duration": self.min_duration,
            "max_duration": self.max_duration,
            "ids": None if self.ids is None else list(self.ids),
            "status": list(self.statuses),
        }


def cursor_of(pid: int, filters: Filters) -> str:
    return f"{pid}.{filters.digest()}"


def cursor_pid(cursor: str, filters: Filters) -> int:
    """Where a cursor resumes; `ValidationError` for a malformed one or one of other filters."""
    match = _CURSOR.fullmatch(cursor.strip()) if isinstance(cursor, str) else None
    if not match or not 1 <= int(match[1]) <= MAX_PARTITION_ID + 1:
        raise ValidationError(f"not a cursor of find: {cursor!r}")
    if match[2] != filters.digest():
        raise ValidationError("the cursor belongs to a search with other filters: give the same filters, or no cursor")
    return int(match[1])


@dataclass(slots=True)
class Found:
    """Archived partitions found, one list per field, in partition order, with the layer each came
    from; workers by number (``names``: number -> worker ID, the registry's, and negative numbers for
    workers the registry does not name), named only when a row is asked for."""

    names: dict[int, str] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    mins: list[int] = field(default_factory=list)
    maxs: list[int] = field(default_factory=list)
    shorts: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    durations: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    _numbers: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.pids)

    def extend(self, pids: list[int], mins: list[int], maxs: list[int], shorts: list[int], times: list[int],
               durations: list[int], source: str) -> None:  # fmt: skip
        self.pids += pids
        self.mins += mins
        self.maxs += maxs
        self.shorts += shorts
        self.times += times
        self.durations += durations
        self.sources += [source] * len(pids)

    def number(self, worker: str) -> int:
        """The number of a worker named by a record (the registry's, else one of our own)."""
        if not self._numbers:
            self._numbers = {name: short for short, name in self.names.items()}
        short = self._numbers.get(worker)
        if short is None:
            short = self._numbers[worker] = -1 - len(self._numbers)
            self.names[short] = worker
        return short

    def cut(self, count: int) -> None:
        for column in (self.pids, self.mins, self.maxs, self.shorts, self.times, self.durations, self.sources):
            del column[count:]

    @property
    def workers(self) -> list[str]:
        names = self.names
        return [names[s] for s in self.shorts]

    def row(self, i: int) -> dict[str, Any]:
        return {
            "partition_id": self.pids[i],
            "min_id": self.mins[i],
            "max_id": self.maxs[i],
            "worker_id": self.names[self.shorts[i]],
            "completed_at": self.times[i],
            "duration": self.durations[i],
            "status": "completed",
            "source": self.sources[i],
        }


@dataclass(slots=True)
class Page:
    filters: Filters
    found: Found
    active: list[PartitionInfo]  # in partition order
    next_cursor: str | None
    searched: list[str]
    statistics: list[dict[str, Any]]  # ranges answered from the statistics, and why
    not_searched: dict[str, int]
    scanned: tuple[int, int]  # the partition ids this page went through
    redis_calls: int = 0
    longest_call_s: float = 0.0

    def __len__(self) -> int:
        return len(self.found) + len(self.active)

    def items(self) -> Iterator[dict[str, Any]]:
        """Every partition of the page, in partition order: an archived one's fields, its status
        (completed) and source; an active one's record, its source (active)."""
        found, active = self.found, self.active
        i = j = 0
        while i < len(found) or j < len(active):
            if j >= len(active) or (i < len(found) and found.pids[i] < active[j].partition_id):
                yield found.row(i)
                i += 1
            else:
                yield active[j].to_dict() | {"source": "active"}
                j += 1

    def summary(self) -> dict[str, Any]:
        """The page without its partitions: where to resume, what was searched, what the statistics answered."""
        return {
            "next_cursor": self.next_cursor,
            "searched": self.searched,
            "statistics": self.statistics,
            "not_searched": self.not_searched,
            "scanned": list(self.scanned),
            "filters": self.filters.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"items": list(self.items()), "count": len(self)} | self.summary()


class Search:
    """Searches one namespace (`page`), its Redis reads paced by a `ReadPacer`."""

    def __init__(
        self,
        client: redis.Redis,
        archive: ArchiveLayer,
        cold: ColdReads | None = None,
        *,
        budget_s: float | None = None,
        clock: Any = time.time,
    ) -> None:
        self.redis = client
        self.archive = archive
        self.keys: KeySchema = archive.keys
        self.cold = cold or ColdReads(None, self.keys.namespace)
        self.budget_s = budget_s
        self._clock = clock

    def page(self, filters: Filters, *, cursor: str | None = None, limit: int = 100) -> Page:
        """One page of the search (see the module's docstring)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValidationError(f"limit must be 1..{MAX_LIMIT}")
        start = cursor_pid(cursor, filters) if cursor else (filters.ids[0] if filters.ids else 1)
        return _PageSearch(self, filters, start, limit).run()

    def pages(self, filters: Filters, *, cursor: str | None = None, limit: int = 100) -> Iterator[Page]:
        """Every page from ``cursor`` on, ``limit`` partitions each."""
        while True:
            page = self.page(filters, cursor=cursor, limit=limit)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


class _PageSearch:
    """The state of one page's search."""

    def __init__(self, search: Search, filters: Filters, start: int, limit: int) -> None:
        self.search = search
        self.filters = filters
        self.start = start
        self.limit = limit
        self.keys = search.keys
        self.pacer = ReadPacer(search.redis)
        self.scan = ArchiveScan(search.redis, self.keys, self.pacer)
        self.found = Found()
        self.active: list[PartitionInfo] = []
        self.statistics: dict[tuple[str, int], dict[str, Any]] = {}
        self.searched: set[str] = set()
        self.hidden: set[int] = set()  # batches past their retention, not swept yet (no cold store)
        self.now = search._clock()
        self.archived = "completed" in filters.statuses
        self.actives = [s for s in filters.statuses if s in ACTIVE_STATUSES] if not filters.completion else []

    def run(self) -> Page:
        k, f = self.keys, self.filters
        started = time.monotonic()
        state = self.scan.state(self.search.archive.policy.batch_size)
        size = state.batch_size
        replies = self.pacer.send(
            command("hmget", k.stats_meta, ["range_width", "compact_range"]),
            command("hget", k.meta, "last_pid"),
            command("xlen", k.queue),
            command("zcard", k.archival_held),
            command("hget", k.workers, f.worker or ""),
            command("hget", k.workers, ""),
        )
        (width_raw, merged_raw), last_pid, queued, held, short_raw, generation = replies
        self.width = int(width_raw or DEFAULT_RANGE_WIDTH)
        self.merged_below = int(merged_raw or 0)
        workers = self.search.archive.workers
        if not workers.is_current(generation) or not len(workers.map):  # else the numbering read for the last page
            workers.refresh()
        self.found.names = workers.map.lookup_table()
        short = None if short_raw is None or f.worker is None else int(short_raw)
        self.shorts = None if f.worker is None else frozenset({short} if short is not None else ())
        self.keep = f.row_filter(self.shorts)
        leases = self._leases() if self.actives and set(self.actives) & {"claimed", "running"} else []
        last = max(state.max_pid, int(last_pid or 0)) if self.actives else state.max_pid
        if f.ids is not None:
            last = min(last, f.ids[1])
        pid = self.start
        next_pid: int | None = None
        while pid <= last:
            first_batch = batch_of(pid, size)
            last_batch = min(batch_of(last, size), (first_batch // WINDOW_BATCHES + 1) * WINDOW_BATCHES - 1)
            if self.keep is None and not self.actives:  # every row matches: a window the size of the room left
                room = self.limit - len(self.found)
                last_batch = min(last_batch, first_batch + max(SHELF_SLOTS, -(-room // size)))
            window_last = min(last, (last_batch + 1) * size - 1)
            if self.archived:
                self._archive_window(state, first_batch, last_batch, pid, window_last)
            if self.actives:
                self._active_window(pid, window_last, leases)
            if len(self.found) + len(self.active) >= self.limit:
                next_pid = self._cut() + 1
                break
            pid = window_last + 1
            if self.search.budget_s is not None and time.monotonic() - started > self.search.budget_s and pid <= last:
                next_pid = pid
                break
        if self.archived:
            self.searched.update(_layers(state))
        if self.actives:
            self.searched.add("active")
        if self.statistics:
            self.searched.add("statistics")
        done = next_pid is None or next_pid > MAX_PARTITION_ID
        not_searched = {"queue": int(queued), "held": int(held)} if self.archived else {}
        return Page(
            filters=f,
            found=self.found,
            active=self.active,
            next_cursor=None if done else cursor_of(next_pid or 0, f),
            searched=sorted(self.searched, key=LAYER_ORDER.index),
            statistics=[self.statistics[key] for key in sorted(self.statistics, key=lambda x: x[1])],
            not_searched=not_searched,
            scanned=(self.start, (next_pid - 1) if next_pid is not None else max(self.start - 1, last)),
            redis_calls=self.pacer.calls,
            longest_call_s=self.pacer.longest_s,
        )

    def _cut(self) -> int:
        """Keep the first ``limit`` partitions (archived and active merged in order); the last pid kept."""
        found, active = self.found, self.active
        if not active:
            found.cut(self.limit)
            return found.pids[-1]
        i = j = 0
        last = 0
        while i + j < self.limit:
            if j >= len(active) or (i < len(found) and found.pids[i] < active[j].partition_id):
                last = found.pids[i]
                i += 1
            else:
                last = active[j].partition_id
                j += 1
        found.cut(i)
        del active[j:]
        return last

    def _ruled_out(self, bounds: RangeBounds | None) -> bool:
        """Whether a range's rollup shows none of its partitions can match."""
        if bounds is None:
            return False  # no rollup (or not readable): read the detail
        f = self.filters
        if bounds.worker_count is not None and bounds.worker_count == 0:
            return True
        if f.completed_after is not None and bounds.last_at is not None and bounds.last_at < f.completed_after:
            return True
        return f.completed_before is not None and bounds.first_at is not None and bounds.first_at >= f.completed_before

    def _archive_window(self, state: ArchiveState, first_batch: int, last_batch: int, lo: int, hi: int) -> None:
        f, size, width = self.filters, state.batch_size, self.width
        window = self.scan.window(state, first_batch, last_batch)
        ranges = list(range(lo // width, hi // width + 1))
        names = [] if f.worker is None else [f"{f.worker}:c"] + [f"#{s}c" for s in sorted(self.shorts or ())]
        commands, parse = range_bounds_commands(self.keys, ranges, names, self.merged_below)
        bounds = parse(self.pacer.each(commands))
        if f.worker is not None or f.completed_after is not None or f.completed_before is not None:
            self.searched.add("statistics")
        retention = state.retention_s if state.retention_s is not None else self.search.archive.policy.retention_s
        candidates: list[int] = []
        simple_pids: list[int] = []
        redis_batches: list[int] = []
        for b in range(first_batch, last_batch + 1):
            b_lo, b_hi = max(lo, b * size), min(hi, (b + 1) * size - 1)
            if b_lo > b_hi:
                continue
            if not window.any_indexed(b_lo, b_hi):
                continue
            if all(self._ruled_out(bounds.get(r)) for r in range(b_lo // width, b_hi // width + 1)):
                continue
            candidates.append(b)
            if state.simple:
                simple_pids += window.indexed_in(b_lo, b_hi)
            if state.cold_store is None and b in window.expiry and window.expiry[b] + retention <= self.now:
                self.hidden.add(b)  # past its retention: the sweep has not deleted it yet, reads already do not see it
            else:
                redis_batches.append(b)
        # at most a shelf's worth of batches at a time, and no more than the page still has room for
        # (when nothing filters the rows), so a page that fills up reads and decodes no more than it needs
        reading = set(redis_batches)
        start = 0
        while start < len(candidates):
            room = self.limit - len(self.found) - len(self.active)
            step = SHELF_SLOTS if self.keep is not None else max(1, min(SHELF_SLOTS, -(-room // size)))
            chunk = candidates[start : start + step]
            start += step
            c_lo, c_hi = max(lo, chunk[0] * size), min(hi, (chunk[-1] + 1) * size - 1)
            simple = [p for p in simple_pids if c_lo <= p <= c_hi]
            self.scan.read_detail(state, window, [b for b in chunk if b in reading], simple)
            cold_rows = self._cold_rows(state, window, chunk, c_lo, c_hi, bounds)
            for b in chunk:
                self._batch(state, window, b, max(lo, b * size), min(hi, (b + 1) * size - 1), cold_rows.get(b), bounds)
            if len(self.found) + len(self.active) >= self.limit:
                return

    def _batch(
        self,
        state: ArchiveState,
        window: Window,
        b: int,
        lo: int,
        hi: int,
        cold: dict[int, tuple[Any, ...]] | None,
        bounds: dict[int, RangeBounds | None],
    ) -> None:
        """The rows of one batch: its cold rows, overridden by its blobs', its staged records' and
        the simple hash's (as the router orders them)."""
        keep = self.keep
        if keep is not None or lo % state.batch_size or hi % state.batch_size != state.batch_size - 1:
            keep = (keep or _EVERY)._replace(pids=(lo, hi))
        rows: dict[int, tuple[Any, ...]] = dict(cold) if cold else {}
        blobs = window.blobs.get(b, [])
        only_blob = not rows and len(blobs) == 1 and b not in window.staged and not window.simple
        problem = window.damaged.get(b)
        for blob in reversed(blobs):  # the shelf's last: it wins
            try:
                cols = self._decoded(blob, keep)
            except DecodeError as exc:
                problem = f"batch {b} cannot be decoded: {exc}"
                continue
            names = self.found.names
            if not names.keys() >= set(cols.shorts):
                names.update(self.search.archive.workers.refresh().lookup_table())
                self.found._numbers = {}
                if not names.keys() >= set(cols.shorts):
                    problem = f"batch {b} names a worker the registry does not"
                    continue
            if only_blob:
                pids, mins, maxs, shorts, times, durations = cols
                self.found.extend(pids, mins, maxs, shorts, times, durations, "archive:batch")
                return
            for row in zip(*cols, strict=True):
                rows[row[0]] = (*row, "archive:batch")
        simple = [window.simple[p] for p in range(lo, hi + 1) if p in window.simple] if window.simple else []
        for source, records in (("archive:staging", window.staged.get(b, {}).values()), ("archive:simple", simple)):
            for raw in records:
                try:
                    part = as_archived(parse_archived(raw))
                except DecodeError:
                    continue
                if lo <= part.partition_id <= hi and self.filters.keeps(*part[3:]):
                    pid, low, high, worker, at, duration = part
                    rows[pid] = (pid, low, high, self.found.number(worker), at, duration, source)
        gone = (b in window.expired or b in self.hidden) and not window.cold.get(b) and not blobs
        if problem is not None or gone:
            self._from_statistics(state, b, problem or "its detail has expired", bounds)
        if rows:
            for pid in sorted(rows):
                row = rows[pid]
                self.found.extend([row[0]], [row[1]], [row[2]], [row[3]], [row[4]], [row[5]], row[6])

    def _decoded(self, blob: bytes, keep: RowFilter | None) -> Any:
        try:
            return blob_rows(blob, self.search.archive.workers.map, keep)
        except DecodeError:
            self.found.names.update(self.search.archive.workers.refresh().lookup_table())  # registered meanwhile
            self.found._numbers = {}
            return blob_rows(blob, self.search.archive.workers.map, keep)

    def _cold_rows(
        self,
        state: ArchiveState,
        window: Window,
        candidates: list[int],
        lo: int,
        hi: int,
        bounds: dict[int, RangeBounds | None],
    ) -> dict[int, dict[int, tuple[Any, ...]]]:
        """batch -> pid -> row of the candidates a cold file holds (only rows of batches whose cold
        map entry names that file), filtered."""
        size = state.batch_size
        by_file: dict[int, list[int]] = defaultdict(list)
        for b in candidates:
            number = window.cold.get(b, 0)
            if number:
                by_file[number].append(b)
        out: dict[int, dict[int, tuple[Any, ...]]] = defaultdict(dict)
        f = self.filters
        for number, batches in sorted(by_file.items()):
            self.searched.add("cold")
            first, last = max(lo, batches[0] * size), min(hi, (batches[-1] + 1) * size - 1)
            try:
                rows = self.search.cold.store(state.cold_store).rows_between(name_of(number), first, last)
            except (ColdStoreUnavailable, ColdFileDamaged) as exc:
                for b in batches:
                    if b not in window.blobs:
                        self._from_statistics(state, b, str(exc), bounds)
                continue
            mine = set(batches)
            for row in zip(*rows.columns(), strict=True):
                pid, batch_no = row[0], batch_of(row[0], size)
                if batch_no in mine and f.keeps(row[3], row[4], row[5]):
                    out[batch_no][pid] = (pid, row[1], row[2], self.found.number(row[3]), row[4], row[5], "cold")
        return out

    def _from_statistics(self, state: ArchiveState, b: int, why: str, bounds: dict[int, RangeBounds | None]) -> None:
        """Note the range of batch ``b`` as answered from the statistics."""
        size, width = state.batch_size, self.width
        for r in range(b * size // width, ((b + 1) * size - 1) // width + 1):
            got = bounds.get(r)
            level, number = (got.level, got.number) if got is not None else ("range", r)
            entry = self.statistics.get((level, number))
            if entry is None:
                span = width * (COARSE if level == "coarse" else 1)
                f = self.filters
                plain = f.completed_after is None and f.completed_before is None and not f.completion
                matching = None
                if got is not None and plain:
                    matching = got.worker_count if f.worker is not None else got.completed
                entry = self.statistics[(level, number)] = {
                    "level": level,
                    level: number,
                    "partitions": [number * span, number * span + span - 1],
                    "count": None if got is None else got.completed,
                    "matching": matching,
                    "completed_time_range": None if got is None else {"start": got.first_at, "end": got.last_at},
                    "batches_without_detail": 0,
                    "why": why,
                }
            entry["batches_without_detail"] += 1

    def _leases(self) -> list[int]:
        """The claimed and running partitions (the leases: one per working worker), sorted."""
        k = self.keys
        (count,) = self.pacer.send(command("zcard", k.leases))
        pids: list[int] = []
        for start in range(0, int(count), 1000):
            (page,) = self.pacer.send(command("zrange", k.leases, start, start + 999))
            pids += [int(p) for p in page if as_text(p).isdigit()]
        return sorted(pids)

    def _active_window(self, lo: int, hi: int, leases: list[int]) -> None:
        k, f = self.keys, self.filters
        pids: list[int] = []
        for status, zset in (("pending", k.pending), ("failed", k.failed)):
            if status not in self.actives:
                continue
            offset = 0
            while True:
                (page,) = self.pacer.send(command("zrangebyscore", zset, lo, hi, start=offset, num=1000))
                pids += [int(p) for p in page if as_text(p).isdigit()]
                if len(page) < 1000:
                    break
                offset += 1000
        pids += [p for p in leases if lo <= p <= hi]
        if f.ids is not None:
            pids = [p for p in pids if f.ids[0] <= p <= f.ids[1]]
        pids = sorted(set(pids))
        commands = [command("hmget", k.active, [str(p) for p in pids[i : i + 200]]) for i in range(0, len(pids), 200)]
        for raw in (record for reply in self.pacer.each(commands, [200 * 500] * len(commands)) for record in reply):
            if raw is None:
                continue
            try:
                part = parse_active(raw)
            except (DecodeError, ValidationError):
                continue
            if part.status.value in self.actives and (f.worker is None or part.worker_id == f.worker):
                self.active.append(part)


_EVERY = RowFilter()
#: The layers a page names as searched, in the order the query router asks them.
LAYER_ORDER = ["active", "archive:simple", "archive:staging", "archive:batch", "cold", "statistics"]


def _layers(state: ArchiveState) -> list[str]:
    """The archive's layers a search of it reads."""
    found = ["archive:simple"]
    if state.open_batches:
        found.append("archive:staging")
    if state.tier != "simple":
        found.append("archive:batch")
    return found


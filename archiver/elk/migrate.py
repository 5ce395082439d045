"""Taking over an elk_coordinator deployment: survey, import, verify, delete the source; adopt.

Every completed partition is imported once, in Go's precedence (active hash, then
``elk_archived``, then the compressed batches), through the archiver's own exactly-once path:
its detail is written first (idempotent), then one commit script sets its index bit and
counts its statistics, refusing any partition whose bit is already set. So a run killed at
any point and run again imports nothing twice, and sources are read in the same order again.

Where the detail goes depends on the tier the namespace reaches: below the compressed tier a
partition keeps its whole Go record (given back byte for byte by ``export``); from it on,
records are staged per batch and every batch is sealed once at the end, whatever order the
sources hold them in.

The source is deleted only with ``delete_source``, after a second pass has found every
completed source record's index bit set, and record by record only while it still holds the
bytes that were imported. Records that cannot be represented are never imported nor deleted:
they go to the reject list with the reason.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby, islice
from typing import Any, NamedTuple, TypeVar

import orjson
import redis

from archiver.config import Config
from archiver.namespace import Namespace
from codec import ArchivedPartition
from layers import Tier
from layers.archive.commit import CommitBuffer
from layers.elk import ElkSource, FamilySurvey, Item, Rejected
from stats.rollup import commit_buffer

SOURCES = ("active", "archived", "batch")
CHUNK = 2000
Progress = Callable[[int], object]
T = TypeVar("T")


@dataclass
class MigrationReport:
    prefix: str
    namespace: str
    dry_run: bool
    survey: dict[str, FamilySurvey] = field(default_factory=dict)
    found: Counter[str] = field(default_factory=Counter)
    imported: int = 0
    already: int = 0
    copies: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    flagged: int = 0
    widened: int = 0
    verified: int | None = None
    deleted: Counter[str] = field(default_factory=Counter)
    tier: str = ""
    import_s: float = 0.0
    elapsed_s: float = 0.0

    @property
    def completed_found(self) -> int:
        return sum(self.found.values())

    @property
    def ok(self) -> bool:
        return self.dry_run or self.verified is None or self.verified == self.completed_found

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "namespace": self.namespace,
            "dry_run": self.dry_run,
            "survey": {name: fam.to_dict() for name, fam in self.survey.items()},
            "completed_found": dict(self.found),
            "imported": self.imported,
            "already_imported": self.already,
            "duplicate_copies": self.copies,
            "rejected": [{"source": r.source, "field": r.field, "reason": r.reason} for r in self.rejected],
            "flagged_workers": self.flagged,
            "flagged_ranges": self.widened,
            "verified": self.verified,
            "deleted": dict(self.deleted),
            "tier": self.tier,
            "import_s": self.import_s,
            "elapsed_s": self.elapsed_s,
            "ok": self.ok,
        }


class _Imported(NamedTuple):
    imported: int  # by this call
    already: int  # found in the index


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


class ElkMigration:
    def __init__(self, client: redis.Redis, config: Config, key_prefix: str, *, chunk: int = CHUNK) -> None:
        self.redis = client
        self.chunk = chunk
        self.config = config
        self.keys = config.keys
        self.source = ElkSource(client, key_prefix)
        self.namespace = Namespace(client, config)
        self.archive = self.namespace.archive
        self._buffers = threading.local()  # one CommitBuffer per importing thread

    def fault_point(self, where: str) -> None:
        """A seam for the crash tests, called between writing a chunk's detail and its commit
        (``before_commit``); `tests.faults` makes it pause there. Does nothing here."""

    def _items(self, source: str, keep_detail: bool = True) -> Iterator[Item | Rejected]:
        for page in self._pages(source, keep_detail):
            yield from page

    def _pages(self, source: str, keep_detail: bool = True) -> Iterator[list[Item | Rejected]]:
        if source == "batch":
            return _chunks(self.source.completed_in_batches(keep_detail), self.chunk)
        return self.source.completed_in_hash_pages(source, keep_detail)

    def run(
        self, *, dry_run: bool = False, delete_source: bool = False, progress: Progress | None = None
    ) -> MigrationReport:
        started = time.monotonic()
        report = MigrationReport(self.source.keys.key_prefix, self.config.namespace, dry_run)
        report.survey = self.source.survey()
        if dry_run:
            report.elapsed_s = round(time.monotonic() - started, 2)
            return report
        self.namespace.remember_binding()
        importing = time.monotonic()
        families = ("partitions", "archived", "compressed")
        completed = sum(report.survey[n].by_status.get("completed", 0) for n in families)
        projected = self.archive.archived_total() + completed
        batched = self.config.policy.tier_for(projected) is not Tier.SIMPLE or self.archive.tier() is not Tier.SIMPLE
        with _no_cyclic_gc():  # millions of small tuples, none in a cycle: the collector would only rescan them
            found = self._collect(report, keep_detail=not batched)
            chunks = ([found.pop(pid) for pid in chunk] for chunk in self._batch_aligned(sorted(found)))
            for done in self._in_two_threads(chunks, batched):
                report.already += done.already
                report.imported += done.imported
                if progress:
                    progress(done.already + done.imported)
        if batched:
            self.archive.sealing.seal_all()  # what an interrupted earlier run left staged
        report.import_s = round(time.monotonic() - importing, 3)
        report.verified = self.verify(report)
        if delete_source and report.ok:
            self.delete_source(report)
        report.tier = self.archive.tier().value
        report.elapsed_s = round(time.monotonic() - started, 2)
        self._note(report)
        return report

    def _collect(self, report: MigrationReport, *, keep_detail: bool) -> dict[int, Item]:
        """Every importable completed partition by id, the first source in Go's precedence winning.

        Without ``keep_detail`` (a batch tier takes the import) only the archived fields are
        kept: a few hundred bytes of memory per partition.
        """
        found: dict[int, Item] = {}
        for source in SOURCES:
            for page in self._pages(source, keep_detail):
                before, flagged, widened = len(found), 0, 0
                for got in page:
                    if isinstance(got, Rejected):
                        report.rejected.append(got)
                    elif got.archived.partition_id in found:
                        report.copies += 1  # a lower-precedence copy of a partition met already
                    else:
                        found[got.archived.partition_id] = got
                        flagged += got.flag is not None
                        widened += got.widened
                report.found[source] += len(found) - before
                report.flagged += flagged
                report.widened += widened
        return found

    def _batch_aligned(self, pids: list[int]) -> Iterator[list[int]]:
        """Chunks of about ``chunk`` sorted ids that never split a batch, so each is sealed once."""
        batch_of = self.config.policy.batch_of
        start = 0
        while start < len(pids):
            end = min(len(pids), start + self.chunk)
            while end < len(pids) and batch_of(pids[end]) == batch_of(pids[end - 1]):
                end += 1
            yield pids[start:end]
            start = end

    def _in_two_threads(self, chunks: Iterator[list[Item]], batched: bool) -> Iterator[_Imported]:
        """Import the chunks, two at a time: while one waits for Redis the other runs.

        Chunks hold disjoint ids and whole batches, so they are independent: like two
        archivers, each writes its detail, then commits (statistics are counted in the
        commit script, atomically). Results come back in chunk order; the first failure is
        raised once the chunk in flight beside it has finished.
        """
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="partarchive-import") as pool:
            inflight: deque[Future[_Imported]] = deque()
            for items in chunks:
                inflight.append(pool.submit(self._import, items, batched=batched))
                if len(inflight) == 2:
                    yield inflight.popleft().result()
            while inflight:
                yield inflight.popleft().result()

    def _commit_buffer(self) -> CommitBuffer:
        buffer: CommitBuffer | None = getattr(self._buffers, "buffer", None)
        if buffer is None:  # flushed by `_import`, one commit per chunk
            buffer = self._buffers.buffer = commit_buffer(
                self.archive, flush_count=2**62, flush_interval_s=3600, range_width=self.config.stats_range_width
            )
        return buffer

    def _import(self, items: list[Item], *, batched: bool) -> _Imported:
        """Write the detail of the items not in the index yet, then commit them (index bits and
        statistics in one script). Afterwards every item is archived, here or before."""
        bits = self.archive.indexed([it.archived.partition_id for it in items])
        new = [it for it, bit in zip(items, bits, strict=True) if not bit]
        if new:
            if batched:
                policy = self.config.policy
                by_batch: dict[int, list[ArchivedPartition]] = {}
                runs = groupby(new, key=lambda it: policy.batch_of(it.archived.partition_id))  # a run per batch
                for batch, run in runs:
                    by_batch.setdefault(batch, []).extend(it.archived for it in run)
                self.archive.sealing.seal_many(by_batch)
            elif self.archive.tier() is Tier.SIMPLE:
                self.archive.write_simple({it.archived.partition_id: it.detail for it in new})
            else:
                self.archive.write_detail([it.record or it.archived for it in new])
            self.fault_point("before_commit")
            stats = self._commit_buffer()
            stats.add([("-", it.archived) for it in new])
            stats.flush()
            flags = {str(it.archived.partition_id): note for it in new if (note := it.note)}
            if flags:
                self.redis.hset(self.keys.migrate_flags, mapping=flags)  # type: ignore[arg-type]
        return _Imported(len(new), len(items) - len(new))

    def verify(self, report: MigrationReport) -> int:
        """Second pass over the sources: how many completed source records have their index bit set."""
        seen: set[int] = set()
        verified = 0
        for source in SOURCES:
            for chunk in _chunks(self.source.completed_pids(source), self.chunk):
                pids = [pid for pid, _, _ in chunk]
                for pid, bit in zip(pids, self.archive.indexed(pids), strict=True):
                    if pid not in seen:
                        seen.add(pid)
                        verified += bit
        return verified

    def delete_source(self, report: MigrationReport) -> None:
        """Delete imported records from the source, each only while it holds the imported bytes."""
        for source in ("active", "archived"):
            for chunk in _chunks(self.source.completed_pids(source), self.chunk):
                bits = self.archive.indexed([pid for pid, _, _ in chunk])
                pairs = [(fld, raw) for (_, fld, raw), bit in zip(chunk, bits, strict=True) if bit]
                report.deleted[source] += self.source.delete_if_unchanged(source, pairs)
        batches: dict[str, bytes] = {}
        keep: set[str] = {r.field.split("/")[0] for r in report.rejected if r.source == "batch"}
        for chunk in _chunks(self.source.completed_pids("batch"), self.chunk):
            for (_, fld, raw), bit in zip(chunk, self.archive.indexed([pid for pid, _, _ in chunk]), strict=True):
                if bit:
                    batches.setdefault(fld, raw)
                else:
                    keep.add(fld)
        pairs = [(name, raw) for name, raw in batches.items() if name not in keep]
        report.deleted["batch"] += self.source.delete_if_unchanged("batch", pairs)

    def adopt_step(self, report: MigrationReport | None = None) -> int:
        """Import what Go workers have completed since the last step and delete it from the source.

        For running beside Go workers: completed records in the active hash and ``elk_archived``
        (and batches, should a Go process still compress) are imported and removed as soon as
        their index bits are set. Returns the partitions imported.
        """
        report = report or MigrationReport(self.source.keys.key_prefix, self.config.namespace, False)
        self.source.check_types()
        before = report.imported
        for source in SOURCES:
            for chunk in _chunks(self._items(source), self.chunk):
                items = []
                for got in chunk:
                    if isinstance(got, Rejected):
                        report.rejected.append(got)
                    else:
                        items.append(got)
                        report.found[source] += 1
                # the active hash, then elk_archived: a copy already archived is only acknowledged
                if items:
                    done = self._import(items, batched=False)
                    report.imported += done.imported
                    report.already += done.already
                if source == "batch":
                    continue
                bits = self.archive.indexed([it.archived.partition_id for it in items])
                pairs = [(it.field, it.raw) for it, bit in zip(items, bits, strict=True) if bit]
                report.deleted[source] += self.source.delete_if_unchanged(source, pairs)
        self._note(report)
        return report.imported - before

    def _note(self, report: MigrationReport) -> None:
        """Keep the reject list and the uncertain workers in Redis beside the archive."""
        pipe = self.redis.pipeline(transaction=False)
        for r in report.rejected:
            pipe.hset(self.keys.migrate_rejects, f"{r.source}:{r.field}", r.reason)
        pipe.execute()


def rejected_lines(report: MigrationReport) -> list[bytes]:
    return [orjson.dumps({"source": r.source, "field": r.field, "reason": r.reason}) for r in report.rejected]

"""The archiver's hot path: a page of queue entries read, its detail written, its commit sent.

A page (up to ``read_count`` entries) is read into columns (`codec.page`); entries that cannot be
archived go to the dead letters; the detail of the rest is written in the current tier, and they
wait in the `CommitBuffer` for their commit (`layers.archive.commit`: counted once, acknowledged in the
same script). In a batch tier the detail is sealed before the commit; in the simple tier (and in
a batch tier storing unsealed in a critical backlog) it travels inside the commit when the page
makes a commit due, and is written at once otherwise, so a partition waiting for its commit is
still found in the archive.

On one server the commit that a page makes due goes out with the next page, on a connection of
its own (`archiver.daemon.readahead`), and its reply is read once that page is handled: Redis runs the
commit while this process decodes and encodes the next page and builds the commit after it. It
goes out once that page's reads are in (in a batch tier, after its staging and slots are read,
`ArchiveLayer.stage_page`), since Redis answers a read sent after the commit only once the commit
has run.
Entries taken over from a dead archiver, re-read at start, or read on Redis Cluster are handled in
turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import compress
from typing import TypeVar

import redis
import structlog

from archiver.daemon.backlog import BacklogGuard
from archiver.daemon.readahead import ReadAhead
from archiver.metrics import STATS_FLUSHES
from archiver.namespace import Namespace
from codec.page import Columns, read_payloads
from layers import QueueEntry, StaleWorkerNumbers, Tier
from layers.archive.commit import CommitCall, CommitResult, Detail, Pending

log = structlog.get_logger("partarchive.archiver")
T = TypeVar("T")


class PageArchiver:
    def __init__(
        self, ns: Namespace, consumer: str, backlog: BacklogGuard, *, after_read: Callable[[], object] | None = None
    ) -> None:
        """``after_read``: the daemon's seam for the crash tests, called after each page is read."""
        self.ns = ns
        self.config = ns.config
        self.consumer = consumer
        self.queue = ns.queue
        self.archive = ns.archive
        self.backlog = backlog
        self.commit_buffer = ns.commit_buffer()
        self.committer = self.commit_buffer.committer
        usable = ReadAhead.usable(ns.redis)
        self.reader = ReadAhead(ns.redis, ns.keys, consumer, ns.config.read_count) if usable else None
        self.tier: Tier | None = None  # as the last commit left it (read once before the first)
        self.archived = 0
        self.dead_lettered = 0
        self._after_read = after_read
        self.read_wait_s = 0.0  # how long the last read waited for new entries (idle time)
        self._prepared: tuple[Pending, CommitCall] | None = None  # the next commit, built, not sent yet
        self._unsent: tuple[Pending, CommitCall] | None = None  # the commit to send once this page's reads are in
        self._sent: Pending | None = None  # what the commit sent with this page commits (reply not read yet)
        self._unwritten_ids: list[str] = []  # entries of pages whose seals are deferred (`ArchiveLayer.seal_page`)
        self._flushes = STATS_FLUSHES.labels(namespace=ns.keys.namespace)

    # reading

    def read(self, block_ms: int) -> int:
        """Read new entries (waiting up to ``block_ms`` when no commit is due) and archive them; a
        commit that is due goes out once they are read. Returns the entries handled."""
        started = time.monotonic()
        if self.reader is None:
            entries = self.queue.read_new(self.consumer, self.config.read_count, block_ms)
            self.read_wait_s = time.monotonic() - started
            handled = self.archive_entries(entries)
            self.commit_if_due()
            return handled
        prepared, self._prepared = self._prepared, None
        due = prepared is not None or self.commit_buffer.due()
        try:
            ids, payloads = self.reader.read(0 if due else block_ms)
        except BaseException:
            self._restore(prepared)
            raise
        self.read_wait_s = 0.0 if due else time.monotonic() - started
        if len(ids) >= self.config.read_count:  # the queue holds more: Redis reads the next page meanwhile
            try:
                self.reader.prefetch()
            except BaseException:
                self._restore(prepared)
                raise
        if prepared is None and due:
            prepared = self._prepare()
        self._unsent, self._sent = prepared, None
        now = False
        try:
            handled = self._archive(ids, payloads)
            self._send_unsent()
            if self.commit_buffer.due():
                if len(ids) < self.config.read_count:
                    now = True  # the queue has run dry for now: commit at once
                else:  # more to read: built while Redis runs the one sent, sent with the next read
                    self._prepared = self._prepare()
        finally:
            if self._unsent is not None:  # failed before it went out: nothing of it ran
                self._restore(self._unsent)
                self._unsent = None
            elif self._sent is not None:
                sent, self._sent = self._sent, None
                self._settle(sent)
        if now:
            self.commit()
        return handled

    def archive_entries(self, entries: list[QueueEntry]) -> int:
        """Archive entries read one way or another (taken over, re-read at start, on Redis Cluster):
        those delivered more than ``max_deliveries`` times go to the dead letters, unless they wait
        here for their commit (claimed back from this archiver while a commit kept failing: a slot
        move or an outage that outlasted ``claim_idle_ms``; they are not poison)."""
        if not entries:
            return 0
        held = self._held()
        limit = self.config.max_deliveries
        for entry in entries:
            if entry.deliveries > limit and entry.entry_id not in held:
                self._dead_letter(entry, f"not archived after {entry.deliveries - 1} deliveries")
        good = [e for e in entries if e.deliveries <= limit or e.entry_id in held]
        return self._archive([e.entry_id for e in good], [e.payload for e in good]) + len(entries) - len(good)

    def _held(self) -> set[str]:
        """Ids of the entries read here and waiting for their commit (buffered, or in a commit built)."""
        held = self.commit_buffer.buffered_ids() if self.commit_buffer.pending else set()
        for built in (self._prepared, self._unsent):
            if built is not None:
                held.update(built[0].entry_ids)
        return held

    def _archive(self, ids: list[str], payloads: list[bytes]) -> int:
        if not ids:
            return 0
        handled = len(ids)
        if self.commit_buffer.pending or self._prepared or self._unsent:  # claimed back while waiting here
            held = self._held()
            if not held.isdisjoint(ids):
                keep = [entry_id not in held for entry_id in ids]
                ids, payloads = list(compress(ids, keep)), list(compress(payloads, keep))
        cols, taken, refused = read_payloads(payloads)
        for i, reason in refused.items():
            self._dead_letter(QueueEntry(ids[i], payloads[i]), reason)
        if self._after_read is not None:
            self._after_read()
        if taken:
            self._write(ids if len(taken) == len(ids) else [ids[i] for i in taken], cols)
        return handled

    def _write(self, entry_ids: list[str], cols: Columns) -> None:
        """Write the detail of a page in the tier in force and buffer its entries for the commit."""
        if self.tier is None:
            self.tier = self.archive.tier()
        unsealed = self.tier is not Tier.SIMPLE and self.backlog.skipping
        detail: Detail = "simple" if self.tier is Tier.SIMPLE else "unsealed" if unsealed else ""
        travels = bool(detail) and self.commit_buffer.pending + len(cols) >= self.commit_buffer.flush_count
        if not travels and not detail:  # sealed: the commit built before goes out between the halves
            staged = self._writing_deferred(lambda: self.archive.stage_page(cols.records()))
            self._send_unsent()
            defer = self.reader is not None
            self.archive.seal_page(staged, self.tier, defer=defer)
            if defer:
                self._unwritten_ids += entry_ids
        elif not travels:
            self.archive.write_detail(cols, unsealed=unsealed, tier=self.tier)
        self.commit_buffer.add_page(entry_ids, cols, detail if travels else "")
        self.archived += len(cols)

    def _dead_letter(self, entry: QueueEntry, reason: str) -> None:
        self.queue.dead_letter(entry, reason)
        self.dead_lettered += 1
        log.error("dead-lettered queue entry", entry=entry.entry_id, reason=reason)

    @property
    def waiting(self) -> int:
        """Entries read and not committed yet (buffered, or in a commit built and not sent)."""
        built = (self._prepared, self._unsent)
        return self.commit_buffer.pending + sum(len(b[0]) for b in built if b is not None)

    # committing

    def commit_if_due(self) -> None:
        if self.commit_buffer.due():
            self.commit()

    def commit(self) -> None:
        """Commit everything buffered now, in turn (on failure it stays buffered), and finish the
        bookkeeping of the seals written (`ArchiveLayer.seal_page`): the queue has run dry, or
        the archiver stops (a page read ahead is archived first: delivered here, it is this
        archiver's to finish)."""
        if self.reader is not None and self.reader.prefetched:
            ids, payloads = self.reader.read(0)
            self._archive(ids, payloads)
        self._writing_deferred(self.archive.flush_seals)
        self._restore(self._prepared)
        self._prepared = None
        if self.commit_buffer.pending:
            self._note(self.commit_buffer.flush())

    def _prepare(self) -> tuple[Pending, CommitCall]:
        """Take everything buffered and build its commit (given back to the buffer on failure)."""
        pending = self.commit_buffer.take()
        try:
            self.committer.check_statistics()
            return pending, self.committer.call(pending)
        except BaseException:
            self.commit_buffer.restore(pending)
            raise

    def _writing_deferred(self, step: Callable[[], T]) -> T:
        """Run a step that writes the seals deferred by earlier pages. If it fails with some still
        unwritten, their pages' entries leave what waits for a commit: never acknowledged, they
        stay pending in the queue and are archived again (taken over after ``claim_idle_ms``), as
        the entries of a page whose detail could not be written are."""
        try:
            done = step()
        except BaseException:
            if self.archive.unwritten_seals:
                self._forget_unwritten()
            raise
        if not self.archive.unwritten_seals:
            self._unwritten_ids.clear()
        return done

    def _forget_unwritten(self) -> None:
        self.archive.drop_unwritten_seals()
        lost, self._unwritten_ids = set(self._unwritten_ids), []
        for built in (self._unsent, self._prepared):
            self._restore(built)
        self._unsent = self._prepared = None
        self.commit_buffer.discard(lost)
        log.warning("seals could not be written: their entries are left to be archived again", entries=len(lost))

    def _send_unsent(self) -> None:
        """Send the commit due with this page, if not sent yet: once the page's reads are in (they
        would wait for the commit in Redis otherwise), which also wrote the seals of the page
        before (`ArchiveLayer.seal_page`), before this page is encoded."""
        if self._unsent is not None:
            if self.archive.unwritten_seals:  # the detail of what it commits is written first
                self._writing_deferred(lambda: self.archive.flush_seals(bookkeeping=False))
            prepared, self._unsent = self._unsent, None
            self._send(prepared)  # given back to the buffer if it fails
            self._sent = prepared[0]

    def _send(self, prepared: tuple[Pending, CommitCall]) -> None:
        """Send a commit without waiting (its reply: `_settle`)."""
        assert self.reader is not None
        pending, call = prepared
        try:
            self.reader.send(("commit", call.keys, call.args))
        except BaseException:
            self.commit_buffer.restore(pending)
            raise

    def _restore(self, prepared: tuple[Pending, CommitCall] | None) -> None:
        if prepared is not None:
            self.commit_buffer.restore(prepared[0])

    def _settle(self, sent: Pending) -> None:
        """Read the reply of the commit sent with a read; commit again in turn if it found
        partitions counted already, a changed worker registry, or no script (after SCRIPT FLUSH)."""
        assert self.reader is not None
        try:
            result = self.committer.result(self.reader.reply())
            if isinstance(result, list):
                result = self.committer.commit(sent, already=set(result))
        except (StaleWorkerNumbers, redis.exceptions.NoScriptError):
            try:
                self.archive.workers.reload()
                result = self.committer.commit(sent)
            except BaseException:
                self.commit_buffer.restore(sent)
                raise
        except BaseException:
            self.commit_buffer.restore(sent)  # it may have run: the next commit finds those counted
            self._restore(self._prepared)
            self._prepared = None
            raise
        self._note(result)

    def _note(self, result: CommitResult) -> None:
        self._flushes.inc()
        if result.tier is not self.tier:
            if self.tier is not None:
                log.info("tier changed", tier=result.tier.value, total=result.total)
            self.tier = result.tier

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

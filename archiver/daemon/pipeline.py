"""One page's writes, round trip by round trip, and their recovery.

A page of queue entries takes these round trips, in this order:

1. **its reads**: the page itself (`PageConnections.read`; while the queue holds full pages the next
   read goes out at once, `PageConnections.prefetch`, so Redis reads it while this page is handled);
2. in a batch tier, **its staging and slot reads**, which carry the previous page's seals
   (written) and their bookkeeping (`ArchiveLayer.stage_page`, `BatchSealing.add_reads`);
3. **the commit** the pages before made due (`layers.archive.commit`), built while Redis ran the
   one before it and sent once this page's reads are in, without waiting: Redis answers a read
   sent after a commit only once the commit has run, so it goes out after them, and runs while
   this process decodes and encodes the page;
4. **the bookkeeping after**: the commit's reply read once the page is handled (`_settle`), the
   tier it reports kept for the next page, and the next commit built if one is due.

In the simple tier (and in a batch tier storing unsealed in a critical backlog) the detail
travels inside the commit when the page makes one due, and is written at once otherwise, so a
partition waiting for its commit is still found in the archive.

Recovery is here too: a commit built and not run goes back to the buffer (`_restore`); seals
that could not be written take their pages' entries out of what waits for a commit (`_forget`:
never acknowledged, they are archived again); a commit's reply that names partitions counted
already, a changed worker registry or a lost script is committed again in turn (`_settle`).

Redis Cluster has no single connection to overlap on (`PageConnections.usable`): there a page is read,
written and committed in turn, the commit when one is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis
import structlog

from archiver.daemon.readahead import PageConnections
from archiver.metrics import STATS_FLUSHES
from archiver.namespace import Namespace
from codec.page import Columns
from layers import StaleWorkerNumbers, Tier
from layers.archive.commit import CommitCall, CommitResult, Detail, Uncommitted
from layers.archive.sealing import UnwrittenSeals

log = structlog.get_logger("partarchive.archiver")
T = TypeVar("T")
#: A commit built: what it commits and its call.
Built = tuple[Uncommitted, CommitCall]


class WritePipeline:
    """The write plan of an archiver's pages: `read`, then `write` (each good page), then
    `finish` (or `abandon` when handling the page failed); `commit` when the queue runs dry or
    the archiver stops. ``skipping``: whether a critical backlog has batch tiers store unsealed."""

    def __init__(self, ns: Namespace, consumer: str, skipping: Callable[[], bool]) -> None:
        self.archive = ns.archive
        self.queue = ns.queue
        self.consumer = consumer
        self.read_count = ns.config.read_count
        self.commit_buffer = ns.commit_buffer()
        self.committer = self.commit_buffer.committer
        usable = PageConnections.usable(ns.redis)
        self.reader = PageConnections(ns.redis, ns.keys, consumer, self.read_count) if usable else None
        self.tier: Tier | None = None  # as the last commit left it (read once before the first)
        self.read_wait_s = 0.0  # how long the last read waited for new entries (idle time)
        self._skipping = skipping
        self._full = False  # the page in hand filled its read: more wait in the queue
        self._prepared: Built | None = None  # the next commit, built, not sent yet
        self._unsent: Built | None = None  # the commit to send once this page's reads are in
        self._sent: Uncommitted | None = None  # what the commit sent with this page commits (reply not read yet)
        self._seals = UnwrittenSeals()  # the last page's seals, written with this page's reads (`seal_page`)
        self._unwritten_ids: list[str] = []  # the entries of the pages whose seals those are
        self._flushes = STATS_FLUSHES.labels(namespace=ns.keys.namespace)

    # a page's round trips

    def read(self, block_ms: int) -> tuple[list[str], list[bytes]]:
        """The next page of new entries (ids, payloads), waiting up to ``block_ms`` for one when
        no commit is due; a commit that is due goes out with it (`write`, `finish`)."""
        started = time.monotonic()
        if self.reader is None:
            entries = self.queue.read_new(self.consumer, self.read_count, block_ms)
            self.read_wait_s = time.monotonic() - started
            return [e.entry_id for e in entries], [e.payload for e in entries]
        prepared, self._prepared = self._prepared, None
        due = prepared is not None or self.commit_buffer.due()
        try:
            ids, payloads = self.reader.read(0 if due else block_ms)
            self.read_wait_s = 0.0 if due else time.monotonic() - started
            self._full = len(ids) >= self.read_count
            if self._full:  # the queue holds more: Redis reads the next page meanwhile
                self.reader.prefetch()
            if prepared is None and due:
                prepared = self._prepare()
        except BaseException:
            self._restore(prepared)
            raise
        self._unsent, self._sent = prepared, None
        return ids, payloads

    def write(self, entry_ids: list[str], cols: Columns) -> None:
        """Write the detail of a page's partitions in the tier in force and let them wait for
        their commit. In a batch tier the page is staged and read first, the commit due goes out
        once those reads are in, then the batches are sealed, written with the next round trip."""
        if self.tier is None:
            self.tier = self.archive.tier()
        unsealed = self.tier is not Tier.SIMPLE and self._skipping()
        detail: Detail = "simple" if self.tier is Tier.SIMPLE else "unsealed" if unsealed else ""
        travels = bool(detail) and self.commit_buffer.buffered + len(cols) >= self.commit_buffer.flush_count
        if not travels and not detail:
            staged = self._writing_deferred(lambda: self.archive.stage_page(cols.records(), self._seals))
            self._send_unsent()
            defer = self._seals if self.reader is not None else None
            self.archive.seal_page(staged, self.tier, defer=defer)
            if defer is not None:
                self._unwritten_ids += entry_ids
        elif not travels:
            self.archive.write_detail(cols, unsealed=unsealed, tier=self.tier)
        self.commit_buffer.add_page(entry_ids, cols, detail if travels else "")

    def finish(self) -> None:
        """The page is handled: the commit due with it goes out if it has not, its reply is read,
        and the next commit is built (sent with the next page's reads), or run now if the queue
        has run dry."""
        if self.reader is None:
            if self.commit_buffer.due():
                self.commit()
            return
        now = False
        try:
            self._send_unsent()
            if self.commit_buffer.due():
                if self._full:  # more to read: built while Redis runs the one sent, sent with the next read
                    self._prepared = self._prepare()
                else:
                    now = True
        finally:
            self.abandon()
        if now:
            self.commit()

    def abandon(self) -> None:
        """End the page in hand: a commit not sent yet goes back to the buffer (nothing of it
        ran), the reply of one sent is read."""
        if self._unsent is not None:
            unsent, self._unsent = self._unsent, None
            self._restore(unsent)
        elif self._sent is not None:
            sent, self._sent = self._sent, None
            self._settle(sent)

    def commit(self) -> None:
        """Write the seals deferred and do their bookkeeping, then commit everything waiting, in
        turn (on failure it stays waiting). A page read ahead must be handled before (`take_prefetched`)."""
        self.write_seals()
        self._restore(self._prepared)
        self._prepared = None
        if self.commit_buffer.buffered:
            self._note(self.commit_buffer.flush())

    def write_seals(self) -> None:
        """Write the last page's seals now, and the bookkeeping of every seal written."""
        self._writing_deferred(lambda: self.archive.sealing.flush(self._seals))

    @property
    def prefetched(self) -> bool:
        return self.reader is not None and self.reader.prefetched

    def take_prefetched(self) -> tuple[list[str], list[bytes]]:
        """The page a prefetch read (delivered to this archiver, so its to finish)."""
        assert self.reader is not None
        return self.reader.read(0)

    # what waits

    def awaiting_commit(self) -> set[str]:
        """Ids of the entries read here and waiting for their commit (buffered, or in a commit built)."""
        awaiting = self.commit_buffer.buffered_ids() if self.commit_buffer.buffered else set()
        for built in (self._prepared, self._unsent):
            if built is not None:
                awaiting.update(built[0].entry_ids)
        return awaiting

    @property
    def holds(self) -> bool:
        """Whether any entry waits here for its commit (no round trip, no set built)."""
        return bool(self.commit_buffer.buffered or self._prepared or self._unsent)

    @property
    def waiting(self) -> int:
        """Entries read and not committed yet (buffered, or in a commit built and not sent)."""
        built = (self._prepared, self._unsent)
        return self.commit_buffer.buffered + sum(len(b[0]) for b in built if b is not None)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    # the commit's round trip

    def _prepare(self) -> Built:
        """Take everything buffered and build its commit (given back to the buffer on failure)."""
        pending = self.commit_buffer.take()
        try:
            self.committer.check_statistics()
            return pending, self.committer.call(pending)
        except BaseException:
            self.commit_buffer.restore(pending)
            raise

    def _send_unsent(self) -> None:
        """Send the commit due with this page, if not sent yet: once the page's reads are in (they
        would wait for the commit in Redis otherwise), which also wrote the seals of the page
        before, before this page is encoded."""
        if self._unsent is None:
            return
        if self._seals:  # the detail of what it commits is written first
            self._writing_deferred(lambda: self.archive.sealing.flush(self._seals, bookkeeping=False))
        built, self._unsent = self._unsent, None
        assert self.reader is not None
        pending, call = built
        try:
            self.reader.send(("commit", call.keys, call.args))
        except BaseException:
            self.commit_buffer.restore(pending)
            raise
        self._sent = pending

    def _settle(self, sent: Uncommitted) -> None:
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

    # recovery

    def _restore(self, built: Built | None) -> None:
        if built is not None:
            self.commit_buffer.restore(built[0])

    def _writing_deferred(self, step: Callable[[], T]) -> T:
        """Run a step that writes the seals deferred by earlier pages. If it fails with some still
        unwritten, their pages' entries leave what waits for a commit (`_forget`)."""
        try:
            done = step()
        except BaseException:
            if self._seals:
                self._forget()
            raise
        if not self._seals:
            self._unwritten_ids.clear()
        return done

    def _forget(self) -> None:
        """Seals that could not be written: their pages' entries are not committed. Never
        acknowledged, they stay pending in the queue and are archived again (taken over after
        ``claim_idle_ms``), as the entries of a page whose detail could not be written are."""
        self._seals.drop()
        lost, self._unwritten_ids = set(self._unwritten_ids), []
        for built in (self._unsent, self._prepared):
            self._restore(built)
        self._unsent = self._prepared = None
        self.commit_buffer.discard(lost)
        log.warning("seals could not be written: their entries are left to be archived again", entries=len(lost))

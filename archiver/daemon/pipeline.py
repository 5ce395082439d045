"""One page's writes, round trip by round trip, and their recovery.

A page of queue entries takes these round trips, in this order:

1. **its reads**: the page itself (`PageConnections.read`; while the queue holds full pages the next
   read goes out at once, `PageConnections.prefetch`, so Redis reads it while this page is handled);
2. in a batch tier, **its staging and slot reads**, which carry the previous page's seals
   (written) and the bookkeeping owed for the seals before (`PageWrites.stage_page`);
3. **the commit** the pages before made due (`layers.archive.commit`), built while Redis ran the
   one before it and sent once this page's reads are in, without waiting: Redis answers a read
   sent after a commit only once the commit has run, so it goes out after them, and runs while
   this process decodes and encodes the page;
4. **the bookkeeping after**: the commit's reply read once the page is handled (`_settle`), the
   tier it reports kept for the next page, and the next commit built if one is due.

What a page leaves for the round trips after it (its seals deferred, the bookkeeping owed, the
commit in flight and its `CommitStage`) is one object's, `PageWrites`.

In the simple tier (and in a batch tier storing unsealed in a critical backlog) the detail
travels inside the commit when the page makes one due, and is written at once otherwise, so a
partition waiting for its commit is still found in the archive.

Recovery is here too: a commit built and not run goes back to the buffer (`PageWrites.restore`);
seals that could not be written take their pages' entries out of what waits for a commit
(`PageWrites.writing`: never acknowledged, they are archived again); a commit's reply that names
partitions counted already or a changed worker registry is committed again in turn (`_settle`).

Redis Cluster has no single connection to overlap on (`PageConnections.usable`): there a page is
read, written and committed in turn, the commit when one is due.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import structlog

from archiver.daemon.readahead import PageConnections
from archiver.metrics import STATS_FLUSHES
from archiver.namespace import Namespace
from codec import ArchivedPartition
from codec.elk import ElkRecord
from codec.page import Columns
from layers import ArchiveLayer, StaleWorkerNumbers, Tier
from layers.archive.commit import CommitBuffer, CommitCall, CommitResult, Detail, Uncommitted
from layers.archive.layer import StagedPage
from layers.archive.sealing import SealBookkeeping, SealGroup
from layers.plumbing.roundtrip import RoundTrip

log = structlog.get_logger("partarchive.archiver")
T = TypeVar("T")
#: A commit built: what it commits and its call.
Built = tuple[Uncommitted, CommitCall]


class CommitStage(enum.Enum):
    """Where the commit in flight stands (`PageWrites.stage`)."""

    NONE = "none"  # no commit built
    BUILT = "built"  # built while Redis ran the one before: goes out after the next page's reads
    DUE = "due"  # the page in hand took it with its reads: sent once they are in
    SENT = "sent"  # sent with the page in hand: its reply not read yet


class PageWrites:
    """What the pages handled leave for the round trips after them, in one place: the seals a page
    encoded and deferred (written with the next page's reads, `stage`), the bookkeeping owed for
    seals written (sent with the reads after, ``owed``), and the commit in flight with its stage.
    Until its seals are written a page's records are neither in their slots nor, for a batch whole
    in hand, staged: nothing commits them before (a commit due is sent after them, `send_due`),
    and if they cannot be written their entries are not committed at all (`writing`)."""

    def __init__(self, archive: ArchiveLayer, buffer: CommitBuffer) -> None:
        self.archive = archive
        self.buffer = buffer
        self.stage = CommitStage.NONE
        self.owed = SealBookkeeping(archive.redis, archive.keys)
        self._commit: Built | None = None  # the commit in flight, in every stage but NONE
        self._deferred: list[SealGroup] = []  # seals encoded, not written
        self._deferred_ids: list[str] = []  # the entries of the pages whose seals those are

    # the seals

    def stage_page(self, parts: Sequence[ArchivedPartition | ElkRecord]) -> StagedPage:
        """`ArchiveLayer.stage_page`, the seals deferred and the bookkeeping owed riding with it."""
        return self.writing(lambda: self.archive.stage_page(parts, self._carry))

    def defer(self, page: StagedPage, tier: Tier, entry_ids: list[str]) -> None:
        """Encode the seals of a page staged, to be written with the next page's reads: two round
        trips less a page."""
        if page.to_seal:
            writes, _ = self.archive.sealing.encode(page.to_seal, page.read, tier)
            if writes:
                self._deferred.append((writes, tier))
                self._deferred_ids += entry_ids

    def write_now(self, *, bookkeeping: bool = True) -> None:
        """Write the seals deferred now, and (with ``bookkeeping``) do the bookkeeping owed."""
        if self._deferred:
            trip = RoundTrip.on(self.archive.redis)
            self._add_writes(trip)
            self.writing(trip.run)
        if bookkeeping:
            self.owed.run()

    def _carry(self, trip: RoundTrip) -> None:
        if self.owed:
            self.owed.add(trip)
        if self._deferred:
            self._add_writes(trip)

    def _add_writes(self, trip: RoundTrip) -> None:
        groups = list(self._deferred)  # left there until written: `writing` sees them unwritten
        written = self.archive.sealing.add_writes(trip, groups)

        def wrote() -> None:
            del self._deferred[: len(groups)]
            for group, tier in written.value:
                self.owed.owe(group, tier)
            if not self._deferred:
                self._deferred_ids.clear()

        trip.after(wrote)

    def writing(self, step: Callable[[], T]) -> T:
        """Run a step that writes the seals deferred. If it fails with some still unwritten, their
        pages' entries are not committed: never acknowledged, they stay unacknowledged in the
        queue and are archived again (taken over after ``claim_idle_ms``), as the entries of a page
        whose detail could not be written are. A commit built and not sent goes back to the
        buffer without them."""
        try:
            return step()
        except BaseException:
            if self._deferred:
                lost = set(self._deferred_ids)
                self._deferred.clear()
                self._deferred_ids.clear()
                self.restore()
                self.buffer.discard(lost)
                log.warning("seals could not be written: their entries are left to archive again", entries=len(lost))
            raise

    # the commit

    def build(self) -> Built:
        """Take everything buffered and build its commit (given back to the buffer on failure)."""
        uncommitted = self.buffer.take()
        try:
            self.buffer.committer.check_statistics()
            return uncommitted, self.buffer.committer.call(uncommitted)
        except BaseException:
            self.buffer.restore(uncommitted)
            raise

    def keep(self, built: Built, stage: CommitStage) -> None:
        """Keep a commit built, BUILT or DUE."""
        self._commit, self.stage = built, stage

    def take_built(self) -> Built | None:
        """The commit BUILT, if any, taken out (the caller keeps it DUE or gives it back)."""
        if self.stage is not CommitStage.BUILT:
            return None
        built, self._commit, self.stage = self._commit, None, CommitStage.NONE
        return built

    def send_due(self, send: Callable[[CommitCall], object]) -> None:
        """Send the commit DUE, if any: the seals deferred, whose detail it may commit, first."""
        if self.stage is not CommitStage.DUE:
            return
        self.write_now(bookkeeping=False)
        assert self._commit is not None
        try:
            send(self._commit[1])
        except BaseException:
            self.restore()
            raise
        self.stage = CommitStage.SENT

    def take_sent(self) -> Uncommitted | None:
        """What the commit SENT commits, if any (its reply is the caller's to read)."""
        if self.stage is not CommitStage.SENT:
            return None
        assert self._commit is not None
        sent, self._commit, self.stage = self._commit[0], None, CommitStage.NONE
        return sent

    def restore(self) -> None:
        """A commit BUILT or DUE goes back to the buffer: nothing of it ran."""
        if self.stage in (CommitStage.BUILT, CommitStage.DUE):
            self.give_back(self._commit)
            self._commit, self.stage = None, CommitStage.NONE

    def give_back(self, built: Built | None) -> None:
        if built is not None:
            self.buffer.restore(built[0])

    # what waits

    def _kept(self) -> Uncommitted | None:
        return self._commit[0] if self._commit is not None and self.stage is not CommitStage.SENT else None

    def awaiting_commit(self) -> set[str]:
        """Ids of the entries read here and waiting for their commit (buffered, or in a commit built)."""
        awaiting = self.buffer.buffered_ids() if self.buffer.buffered else set()
        kept = self._kept()
        if kept is not None:
            awaiting.update(kept.entry_ids)
        return awaiting

    @property
    def any_uncommitted(self) -> bool:
        """Whether any entry waits here for its commit (no round trip, no set built)."""
        return bool(self.buffer.buffered or self._kept())

    @property
    def uncommitted(self) -> int:
        """Entries read and not committed yet (buffered, or in a commit built and not sent)."""
        kept = self._kept()
        return self.buffer.buffered + (len(kept) if kept is not None else 0)


class WritePipeline:
    """The write plan of an archiver's pages: `read`, then `write` (each good page), then
    `finish` (or `abandon` when handling the page failed); `flush` when the queue runs dry or
    the archiver stops. ``skipping``: whether a critical backlog has batch tiers store unsealed.

    Two words, one thing each: a *commit* is one run of the commit script (`layers.archive.commit`)
    over what it takes from the buffer; to *flush* is to write the seals deferred and commit
    everything waiting, now (`flush`, `CommitBuffer.flush`, the daemon's ``flush`` at its stop)."""

    def __init__(self, ns: Namespace, consumer: str, skipping: Callable[[], bool]) -> None:
        self.archive = ns.archive
        self.queue = ns.queue
        self.consumer = consumer
        self.read_count = ns.config.read_count
        self.commit_buffer = ns.commit_buffer()
        self.committer = self.commit_buffer.committer
        usable = PageConnections.usable(ns.redis)
        self.reader = PageConnections(ns.redis, ns.keys, consumer, self.read_count) if usable else None
        self.writes = PageWrites(self.archive, self.commit_buffer)
        self.tier: Tier | None = None  # as the last commit left it (read once before the first)
        self.read_wait_s = 0.0  # how long the last read waited for new entries (idle time)
        self._skipping = skipping
        self._full = False  # the page in hand filled its read: more wait in the queue
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
        built = self.writes.take_built()
        due = built is not None or self.commit_buffer.due()
        try:
            ids, payloads = self.reader.read(0 if due else block_ms)
            self.read_wait_s = 0.0 if due else time.monotonic() - started
            self._full = len(ids) >= self.read_count
            if self._full:  # the queue holds more: Redis reads the next page meanwhile
                self.reader.prefetch()
            if built is None and due:
                built = self.writes.build()
        except BaseException:
            self.writes.give_back(built)
            raise
        if built is not None:
            self.writes.keep(built, CommitStage.DUE)
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
            staged = self.writes.stage_page(cols.records())
            self._send_due()
            if self.reader is not None:
                self.writes.defer(staged, self.tier, entry_ids)
            elif staged.to_seal:
                self.archive.sealing.seal_from_reads(staged.to_seal, staged.read, self.tier)
        elif not travels:
            self.archive.write_detail(cols, unsealed=unsealed, tier=self.tier)
        self.commit_buffer.add_page(entry_ids, cols, detail if travels else "")

    def finish(self) -> None:
        """The page is handled: the commit due with it goes out if it has not, its reply is read,
        and the next commit is built (sent with the next page's reads), or everything waiting is
        flushed now if the queue has run dry."""
        if self.reader is None:
            if self.commit_buffer.due():
                self.flush()
            return
        built: Built | None = None
        now = False
        try:
            self._send_due()
            if self.commit_buffer.due():
                if self._full:  # more to read: built while Redis runs the one sent, sent with the next read
                    built = self.writes.build()
                else:
                    now = True
        finally:
            try:
                self.abandon()
            except BaseException:
                self.writes.give_back(built)
                raise
        if built is not None:
            self.writes.keep(built, CommitStage.BUILT)
        if now:
            self.flush()

    def abandon(self) -> None:
        """End the page in hand: a commit not sent yet goes back to the buffer (nothing of it
        ran), the reply of one sent is read."""
        self.writes.restore()
        sent = self.writes.take_sent()
        if sent is not None:
            self._settle(sent)

    def flush(self) -> None:
        """Write the seals deferred and do their bookkeeping, then commit everything waiting, in
        turn (on failure it stays waiting). A page read ahead must be handled before (`take_prefetched`)."""
        self.writes.write_now()
        self.writes.restore()
        if self.commit_buffer.buffered:
            self._note(self.commit_buffer.flush())

    @property
    def prefetched(self) -> bool:
        return self.reader is not None and self.reader.prefetched

    def take_prefetched(self) -> tuple[list[str], list[bytes]]:
        """The page a prefetch read (delivered to this archiver, so its to finish)."""
        assert self.reader is not None
        return self.reader.read(0)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    # the commit's round trip

    def _send_due(self) -> None:
        """Send the commit due with this page, if not sent yet: once the page's reads are in (they
        would wait for the commit in Redis otherwise), which also wrote the seals of the page
        before, before this page is encoded."""
        reader = self.reader
        if reader is not None:
            self.writes.send_due(lambda call: reader.send(("commit", call.keys, call.args)))

    def _settle(self, sent: Uncommitted) -> None:
        """Read the reply of the commit sent with a read; commit again in turn if it found
        partitions counted already or a changed worker registry (a script the server lacked, after
        SCRIPT FLUSH, is loaded and run again by `Scripts.reply`)."""
        assert self.reader is not None
        try:
            result = self.committer.result(self.reader.reply())
            if isinstance(result, list):
                result = self.committer.commit(sent, already=set(result))
        except StaleWorkerNumbers:
            try:
                self.archive.workers.reload()
                result = self.committer.commit(sent)
            except BaseException:
                self.commit_buffer.restore(sent)
                raise
        except BaseException:
            self.commit_buffer.restore(sent)  # it may have run: the next commit finds those counted
            raise
        self._note(result)

    def _note(self, result: CommitResult) -> None:
        self._flushes.inc()
        if result.tier is not self.tier:
            if self.tier is not None:
                log.info("tier changed", tier=result.tier.value, total=result.total)
            self.tier = result.tier

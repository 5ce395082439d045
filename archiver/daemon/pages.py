"""The archiver's hot path, as a loop: a page of queue entries read, decoded, its detail written.

A page (up to ``read_count`` entries) is read into columns (`codec.page`); entries that cannot be
archived go to the dead letters; the rest are handed to the page-write pipeline
(`archiver.daemon.pipeline.WritePipeline`), which owns the page's round trips (its reads, the
previous page's seals, its commit, the bookkeeping after) and their recovery. Entries taken over
from a dead archiver, re-read at start, or read on Redis Cluster are handled the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress

import structlog

from archiver.daemon.backlog import BacklogModes
from archiver.daemon.pipeline import WritePipeline
from archiver.namespace import Namespace
from codec.page import read_payloads
from layers import QueueEntry

log = structlog.get_logger("partarchive.archiver")


class PageIntake:
    def __init__(
        self, ns: Namespace, consumer: str, backlog: BacklogModes, *, after_read: Callable[[], object] | None = None
    ) -> None:
        """``after_read``: the daemon's seam for the crash tests, called after each page is read."""
        self.config = ns.config
        self.queue = ns.queue
        self.pipeline = WritePipeline(ns, consumer, lambda: backlog.skipping)
        self.archived = 0
        self.dead_lettered = 0
        self._after_read = after_read

    @property
    def read_wait_s(self) -> float:
        """How long the last read waited for new entries (idle time)."""
        return self.pipeline.read_wait_s

    @property
    def uncommitted(self) -> int:
        """Entries read and not committed yet."""
        return self.pipeline.writes.uncommitted

    def read(self, block_ms: int) -> int:
        """Read new entries (waiting up to ``block_ms`` when no commit is due) and archive them.
        Returns the entries handled."""
        ids, payloads = self.pipeline.read(block_ms)
        try:
            handled = self._archive(ids, payloads)
        except BaseException:
            self.pipeline.abandon()
            raise
        self.pipeline.finish()
        return handled

    def archive_entries(self, entries: list[QueueEntry]) -> int:
        """Archive entries read one way or another (taken over, re-read at start): those
        delivered more than ``max_deliveries`` times go to the dead letters, unless they wait
        here for their commit (claimed back from this archiver while a commit kept failing: a slot
        move or an outage that outlasted ``claim_idle_ms``; they are not poison)."""
        if not entries:
            return 0
        awaiting = self.pipeline.writes.awaiting_commit()
        limit = self.config.max_deliveries
        for entry in entries:
            if entry.deliveries > limit and entry.entry_id not in awaiting:
                self._dead_letter(entry, f"not archived after {entry.deliveries - 1} deliveries")
        good = [e for e in entries if e.deliveries <= limit or e.entry_id in awaiting]
        return self._archive([e.entry_id for e in good], [e.payload for e in good]) + len(entries) - len(good)

    def _archive(self, ids: list[str], payloads: list[bytes]) -> int:
        if not ids:
            return 0
        handled = len(ids)
        if self.pipeline.writes.any_uncommitted:  # claimed back while waiting here
            awaiting = self.pipeline.writes.awaiting_commit()
            if not awaiting.isdisjoint(ids):
                keep = [entry_id not in awaiting for entry_id in ids]
                ids, payloads = list(compress(ids, keep)), list(compress(payloads, keep))
        cols, taken, refused = read_payloads(payloads)
        for i, reason in refused.items():
            self._dead_letter(QueueEntry(ids[i], payloads[i]), reason)
        if self._after_read is not None:
            self._after_read()
        if taken:
            self.pipeline.write(ids if len(taken) == len(ids) else [ids[i] for i in taken], cols)
            self.archived += len(cols)
        return handled

    def _dead_letter(self, entry: QueueEntry, reason: str) -> None:
        self.queue.dead_letter(entry, reason)
        self.dead_lettered += 1
        log.error("dead-lettered queue entry", entry=entry.entry_id, reason=reason)

    def flush_if_due(self) -> None:
        if self.pipeline.commit_buffer.due():
            self.flush()

    def flush(self) -> None:
        """Commit everything waiting now (`WritePipeline.flush`; on failure it stays waiting): the
        queue has run dry, or the archiver stops. A page read ahead is archived first: delivered here, it is this
        archiver's to finish."""
        if self.pipeline.prefetched:
            self._archive(*self.pipeline.take_prefetched())
        self.pipeline.flush()

    def close(self) -> None:
        self.pipeline.close()

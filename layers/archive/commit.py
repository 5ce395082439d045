"""The exactly-once commit: the one step in which archived partitions count.

Invariant: a partition is counted in the statistics and in the archived total exactly once,
however often its queue entry is delivered, and a queue entry is acknowledged (and deleted) only
by the step that counts its partition or finds it counted already. Nothing else acknowledges.

That step is one call of ``layers/archive/lua/commit.lua``. For the partitions it is asked to count it
reads their index bits; if none is set it sets them, applies their statistics, adds them to the
total (moving the tier up at a threshold), writes their detail when the detail travels with the
commit (the simple tier, or a batch tier storing records unsealed in a critical backlog), and
acknowledges + deletes every entry. If any bit is set already (a redelivered entry, another
archiver) it writes nothing and names those partitions; `Committer` moves them to the
acknowledge-only entries and builds the statistics again. Statistics naming workers by the
numbers of a registry rebuilt meanwhile are refused the same way (`StaleWorkerNumbers`) and built
again after a reload. A batch tier's detail is written before its commit: a crash between the two
redelivers the entries, and the detail is written again, the same.

This module owns the contract: its input (`Uncommitted`: entry ids and their partitions as columns),
the script's keys and arguments (`Committer.call`), its reply (`Committer.result`), its retry
(`Committer.commit`) and when a commit is due (`CommitBuffer`).

When: the seed's rule, statistics committed every `DEFAULT_FLUSH_COUNT` updates or
`DEFAULT_FLUSH_INTERVAL_S` seconds. A commit is due as soon as that many entries wait or the
oldest has waited that long, and it takes everything waiting then: a page of 500 entries read at
once is one commit (one script call), and a trickle of completions is still committed every 100
entries or 30 seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from codec import ArchivedPartition, ValidationError, WorkerNumbering
from codec.page import Columns
from layers import ArchiveLayer, StaleWorkerNumbers
from layers.archive.places import bits_as_bytes, byte_of
from layers.archive.tiers import Tier
from layers.keys import ARCHIVER_GROUP
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.scripts import Scripts

DEFAULT_FLUSH_COUNT = 100
DEFAULT_FLUSH_INTERVAL_S = 30.0
#: Where the detail of the counted partitions goes in the commit: nowhere (written already), into
#: the simple hash, or into the simple hash with their batches noted for a later seal-up.
Detail = Literal["", "simple", "unsealed"]
_RETRIES = 3


@dataclass(frozen=True, slots=True)
class CommitResult:
    total: int
    tier: Tier
    newly_archived: int


@dataclass(slots=True)
class Uncommitted:
    """Entries waiting for their commit: queue entry ids ('-' for an import, which has none) and
    their partitions, as columns in the same order."""

    entry_ids: list[str]
    cols: Columns
    detail: Detail = ""  # where the detail of these entries must travel with their commit ('': written)
    newest: str = ""  # the newest of the entry ids ('' when none is a queue entry)

    def __len__(self) -> int:
        return len(self.entry_ids)

    def add(self, entry_ids: list[str], cols: Columns, newest: str | None = None) -> None:
        """Entries as the queue handed them over: a page in id order, whose last is its newest,
        unless ``newest`` says which it is."""
        self.entry_ids.extend(entry_ids)
        self.cols.extend(cols)
        self.note_newest(entry_ids[-1] if newest is None and entry_ids else newest or "")

    def note_newest(self, entry_id: str) -> None:
        if entry_id not in ("", "-") and (not self.newest or _id_order(entry_id) > _id_order(self.newest)):
            self.newest = entry_id

    @classmethod
    def of(cls, entries: Sequence[tuple[str, ArchivedPartition]]) -> Uncommitted:
        """Entries in any order (tests, imports)."""
        ids = [entry_id for entry_id, _ in entries]
        queued = [entry_id for entry_id in ids if entry_id != "-"]
        return cls(ids, Columns.of([part for _, part in entries]), newest=max(queued, key=_id_order, default=""))


def _id_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``ms-seq``) as numbers, in the order of the stream."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class CommitCall(NamedTuple):
    """One call of commit.lua: its keys and arguments."""

    keys: list[str]
    args: list[Any]


class CommitStatistics(Protocol):
    """The statistics' part of a commit, computed by the statistics layer
    (`stats.rollup.CommitRollups`) and asked for here each time a call is built: a commit
    sent again without the partitions found counted, or after the worker registry was reloaded,
    carries other statistics than the first."""

    def check(self) -> None:
        """Refuse to commit into statistics the namespace keeps otherwise (`ValidationError`)."""

    def segments(
        self, cols: Columns, workers: WorkerNumbering, now: int, first_key: int
    ) -> tuple[list[str], list[str | int]]:
        """The statistics hashes that ``cols`` update and commit.lua's segments for them, naming
        workers by ``workers``' numbers and each hash by its position in KEYS from ``first_key``."""
        ...


class Committer:
    """Builds, runs and reads commit.lua calls for one namespace's archive."""

    #: KEYS before the statistics hashes: index, queue, meta, registry, simple hash, unsealed set.
    FIXED_KEYS = 6

    def __init__(
        self, archive: ArchiveLayer, statistics: CommitStatistics, clock: Callable[[], float] = time.time
    ) -> None:
        self.archive = archive
        self.statistics = statistics
        self._clock = clock
        self._checked = False
        self._scripts = Scripts.of(archive.redis)
        self.commits = 0
        self.round_trips = 0

    def call(self, uncommitted: Uncommitted, already: set[int] | frozenset[int] = frozenset()) -> CommitCall:
        """The call that commits ``uncommitted``, each pid counted once and none of ``already``."""
        counted, ack_only = _split(uncommitted, already)
        workers, generation = self.archive.workers.numbering(set(counted.cols.workers))
        stats_keys, segments = self.statistics.segments(counted.cols, workers, int(self._clock()), self.FIXED_KEYS + 1)
        return self._call(counted, ack_only, uncommitted.detail, generation, stats_keys, segments)

    def _call(
        self,
        counted: Uncommitted,
        ack_only: list[str],
        detail: Detail,
        generation: str | None,
        stats_keys: list[str],
        segments: list[str | int],
    ) -> CommitCall:
        k, policy = self.archive.keys, self.archive.policy
        pids = counted.cols.pids
        unsealed = ""
        if detail == "unsealed" and pids:
            batches = sorted({policy.batch_of(pid) for pid in pids})
            unsealed = ",".join(map(str, [int(self._clock() * 1000), *batches]))
        args: list[Any] = [
            ARCHIVER_GROUP,
            policy.compressed_from,
            policy.summary_above,
            len(pids),
            *index_bits(pids),
            ",".join([entry_id for entry_id in counted.entry_ids if entry_id != "-"]),
            ",".join([entry_id for entry_id in ack_only if entry_id != "-"]),
            max(pids, default=0),
            generation if segments and generation else "",
            detail if pids else "",
            unsealed,
            counted.newest,
        ]
        if detail and pids:
            args += [x for pair in zip(pids, counted.cols.details, strict=True) for x in pair]
        args += segments
        return CommitCall([k.index, k.queue, k.archive_meta, k.workers, k.completed, k.unsealed, *stats_keys], args)

    def result(self, reply: Any) -> CommitResult | list[int]:
        """The script's reply: the result, or the pids already counted (nothing was written)."""
        status = as_text(reply[0])
        if status == "ok":
            self.commits += 1
            return CommitResult(int(reply[1]), Tier(as_text(reply[2])), int(reply[3]))
        if status == "dup":
            return [int(p) for p in reply[1:]]
        k = self.archive.keys
        if status == "stale_workers":
            raise StaleWorkerNumbers(f"the worker registry {k.workers} changed meanwhile; nothing was committed")
        refused = script_error(reply, meta_key=k.archive_meta, unchanged="nothing was committed")
        raise RuntimeError(f"commit refused: {refused}")

    def commit(self, uncommitted: Uncommitted, already: set[int] | None = None) -> CommitResult:
        """Run the commit, again without the partitions found counted already (one round trip;
        two if one of them was), or after reloading a registry that changed meanwhile."""
        self.check_statistics()
        found = set(already or ())
        for _ in range(_RETRIES):
            try:
                result = self.result(self._run(self.call(uncommitted, found)))
            except StaleWorkerNumbers:
                self.archive.workers.reload()
                continue
            if isinstance(result, CommitResult):
                return result
            found.update(result)
        raise RuntimeError("commit kept finding new duplicates; is another archiver misconfigured?")

    def statistics_only(self, parts: Sequence[ArchivedPartition]) -> CommitResult:
        """Apply the statistics of partitions that a bulk writer has already marked in the index
        (the benchmarks' storage writers), through the same script, counting nothing."""
        cols = Columns.of(parts)
        workers, generation = self.archive.workers.numbering(set(cols.workers))
        now = max(cols.completed_at, default=0)
        stats_keys, segments = self.statistics.segments(cols, workers, now, self.FIXED_KEYS + 1)
        nothing = Uncommitted([], Columns())
        result = self.result(self._run(self._call(nothing, [], "", generation, stats_keys, segments)))
        if not isinstance(result, CommitResult):
            raise RuntimeError("a commit that counts nothing found duplicates")
        return result

    def _run(self, call: CommitCall) -> Any:
        self.round_trips += 1
        return self._scripts("commit", call.keys, call.args)

    def check_statistics(self) -> None:
        """`CommitStatistics.check`, once."""
        if not self._checked:
            self.statistics.check()
            self._checked = True


#: The widest byte range of the index bitmap a commit sends its bits as (``commit.lua``'s 'bytes'):
#: a page of completions, nearly in order, spans a few dozen bytes; pids further apart go as a list.
INDEX_SPAN = 4000


def index_bits(pids: Sequence[int]) -> tuple[str, int | str, bytes]:
    """``commit.lua``'s ARGV[5..7] for the index bits of ``pids`` (each once): 'bytes', the
    offset of the first byte and the bytes to OR in from there, when they lie within
    `INDEX_SPAN` bytes; else 'bits' and the pids, comma-separated."""
    if not pids:
        return "bits", "", b""
    first, last = byte_of(min(pids)), byte_of(max(pids))
    if last - first >= INDEX_SPAN:
        return "bits", ",".join(map(str, pids)), b""
    return "bytes", first, bits_as_bytes(pids, first, last)


def _split(uncommitted: Uncommitted, already: set[int] | frozenset[int]) -> tuple[Uncommitted, list[str]]:
    """The entries to count (each pid once, none of ``already``) and the ids only to acknowledge."""
    pids = uncommitted.cols.pids
    if not already and len(set(pids)) == len(pids):
        return uncommitted, []  # the usual case: every pid new and once
    keep: list[bool] = []
    ack_only: list[str] = []
    seen: set[int] = set()
    for entry_id, pid in zip(uncommitted.entry_ids, pids, strict=True):
        fresh = pid not in seen and pid not in already
        keep.append(fresh)
        if fresh:
            seen.add(pid)
        else:
            ack_only.append(entry_id)
    counted_ids = [entry_id for entry_id, k in zip(uncommitted.entry_ids, keep, strict=True) if k]
    return Uncommitted(counted_ids, uncommitted.cols.select(keep), uncommitted.detail, uncommitted.newest), ack_only


class CommitBuffer:
    """Entries whose detail is written (or travels with the commit), waiting for their commit."""

    def __init__(
        self,
        committer: Committer,
        *,
        flush_count: int = DEFAULT_FLUSH_COUNT,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if flush_count < 1 or flush_interval_s <= 0:
            raise ValidationError("flush_count and flush_interval_s must be positive")
        self.committer = committer
        self.flush_count = flush_count
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._waiting = Uncommitted([], Columns())
        self._since = 0.0

    @property
    def archive(self) -> ArchiveLayer:
        return self.committer.archive

    @property
    def buffered(self) -> int:
        return len(self._waiting)

    @property
    def flushes(self) -> int:
        return self.committer.commits

    def buffered_ids(self) -> set[str]:
        """Queue entry ids waiting here for the next commit (delivered to this process already)."""
        return set(self._waiting.entry_ids)

    def add_page(self, entry_ids: list[str], cols: Columns, detail: Detail = "", newest: str | None = None) -> None:
        """Buffer entries whose detail is written, or (``detail``) is to travel with their commit:
        then the whole commit carries the detail of what it commits (written twice is the same).
        The entries come in id order (a page as read) unless ``newest`` names the newest."""
        if entry_ids and not self._waiting.entry_ids:
            self._since = self._clock()
        self._waiting.add(entry_ids, cols, newest)
        if detail and self._waiting.detail != "unsealed":
            self._waiting.detail = detail

    def add(self, entries: Sequence[tuple[str, ArchivedPartition]]) -> list[CommitResult]:
        """Buffer entries whose detail is written; commit everything waiting once a commit is due."""
        uncommitted = Uncommitted.of(entries)
        self.add_page(uncommitted.entry_ids, uncommitted.cols, newest=uncommitted.newest)
        return [self.flush()] if len(self._waiting) >= self.flush_count else []

    def due(self) -> bool:
        """Whether a commit is due: ``flush_count`` entries wait, or the oldest waited ``flush_interval_s``."""
        waiting = len(self._waiting)
        return waiting >= self.flush_count or (waiting > 0 and self._clock() - self._since >= self.flush_interval_s)

    def take(self) -> Uncommitted:
        """Everything waiting, to commit (`restore` it if the commit fails)."""
        taken, self._waiting = self._waiting, Uncommitted([], Columns())
        return taken

    def restore(self, uncommitted: Uncommitted) -> None:
        """Entries a commit did not take back in front (nothing of them was acknowledged)."""
        rest = self._waiting
        self._waiting = uncommitted
        self.add_page(rest.entry_ids, rest.cols, rest.detail)
        self._waiting.note_newest(rest.newest)
        self._since = self._clock() - self.flush_interval_s if len(self._waiting) else 0.0

    def discard(self, entry_ids: set[str]) -> None:
        """Take these entries out of what waits (they are not to be committed now)."""
        waiting = self._waiting
        keep = [entry_id not in entry_ids for entry_id in waiting.entry_ids]
        if all(keep):
            return
        ids = [entry_id for entry_id, k in zip(waiting.entry_ids, keep, strict=True) if k]
        queued = [entry_id for entry_id in ids if entry_id != "-"]
        newest = max(queued, key=_id_order, default="")
        self._waiting = Uncommitted(ids, waiting.cols.select(keep), waiting.detail if ids else "", newest)
        if not ids:
            self._since = 0.0

    def flush(self) -> CommitResult:
        """Commit everything waiting (one round trip; two if some was archived already). On
        failure it stays buffered, unacknowledged."""
        uncommitted = self.take()
        try:
            return self.committer.commit(uncommitted)
        except BaseException:
            self.restore(uncommitted)
            raise


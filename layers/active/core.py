"""The worker SDK's operations over the active hash (`KeySchema.active`), as steps (`layers.plumbing.steps`).

`layers.active.sdk.ActiveLayer` runs them blocking, `layers.active.sdk_async.AsyncActiveLayer` awaits
them on a `redis.asyncio` client: both check the same arguments, send the same scripts and
commands, read the replies alike and raise the same typed errors.

Every state change is one Lua script, so the record, the pending/lease/failed indexes
and the per-status counts change together. Each change bumps ``version``; callers may
pass ``expected_version`` to make an update conditional (optimistic concurrency).

Records are written in the namespace's record format: ``native`` (integer times, a claim
time) or ``elk`` (elk_coordinator's PartitionInfo, so Go workers can read them). Every script
reads both, so a namespace bound to a Go deployment (`KeySchema.elk_prefix`) shares its active
hash with Go workers: each side can claim, heartbeat, fail, retry and complete partitions the
other created. Go workers do not keep our pending/lease/failed indexes, so in a bound
namespace a claim first rebuilds them from the hash (`sync`, at most once a second).

The worker's four steps (claim, start, heartbeat, complete) cost Redis about what the original
scheme's HSETs cost: their scripts splice the members they change into the record as it is
stored (`layers/active/lua/_layout.lua`) instead of parsing it. A record in another layout (one
written by an earlier release) makes a step answer ``upgrade``: `_upgrade` rewrites it in the
layout of its format, saying nothing new, and the step runs again.

The steps of a worker that keeps several partitions in hand (the runtime's task window, `archiver.runtime`;
their values are `layers.active.window`'s):

- `_finish`: a partition finished (completed, or failed with a retry policy) and the worker's next
  one claimed and started, in one atomic call (``finish.lua``): one round trip a partition in
  steady state, as BullMQ's worker takes its next job in the call that finishes the last. The
  finish keeps every guarantee of `complete` and `fail` (exactly-once hand-off to the archive
  queue, the archival switch and its share, typed refusals with nothing written, Go's records
  byte for byte), the claim every one of `claim` and `start` (lowest pending first, a stale lease
  taken over). A refused finish writes nothing and claims nothing; a claim refused after the
  finish leaves the finish done (each is all or nothing, the finish first).
- `_beat`: every lease a worker holds renewed in one call, the leases found lost named, the
  worker's presence entry refreshed (`layers.active.presence`) and failed partitions whose
  back-off is over sent back to pending (``beat.lua``).
- `_release`: partitions handed back to pending at once (a worker that stops), ``release.lua``.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis

from codec import ACTIVE_STATUSES, ArchivedPartition, DecodeError, PartArchiveError, PartitionInfo, ValidationError
from codec.elk import decode_elk
from codec.gojson import GoTime, go_string
from codec.stored import parse_active
from codec.validate import (
    MAX_ERROR_BYTES,
    check_int,
    check_partition_id,
    check_seconds,
    check_text,
    check_worker_id,
)
from layers.active.latencies import LatencyBuffer, latency_argument, sdk_complete_seconds
from layers.active.leader import ActiveLeader
from layers.active.presence import WorkerPresence, presence_from
from layers.active.reads import ActiveReads, add_counts, typed
from layers.active.window import Beat, Finished, RetryPolicy
from layers.errors import (
    InvalidTransition,
    NotOwner,
    OutOfMemory,
    PartitionNotFound,
    VersionConflict,
)
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.roundtrip import RoundTrip
from layers.plumbing.steps import Batch, Call, Script, Steps, one

RECORD_FORMATS = ("native", "elk")
_SYNC_EVERY_S = 1.0
_SEEN_MAX = 4096  # records remembered (`ActiveCore._seen`): more partitions than a process holds at once
#: How often at most a claim looks for stale leases (`ActiveCore._claim`).
STALE_LOOK_S = 1.0
#: Partitions a beat sends back to pending at most per call (the rest go with the next beat).
RETRIES_PER_BEAT = 100
#: The refusals of a finish (nothing written, nothing claimed): a reply's first element.
_REFUSALS = frozenset({"err", "upgrade", "elk_time"})

#: Unix seconds, as a float: a plain function, or a coroutine function for the asyncio SDK (or a function
#: that gives either, `layers.active.clock.AsyncServerClock`).
Clock = Callable[[], float] | Callable[[], Awaitable[float]] | Callable[[], float | Awaitable[float]]


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of `ActiveLayer.complete`."""

    partition_id: int
    already_completed: bool
    archived: ArchivedPartition | None = None  # None also for a completion whose record was tampered with
    entry_id: str | None = None
    held: bool = False  # paused or outside the share (`layers.control.switch`): kept in the active hash, queued later


class ActiveCore:
    """The state and the steps of the worker SDK (no client: the flavours bring the I/O), with its
    reads (``reads``) and the leader's steps (``leader``)."""

    def __init__(self, keys: KeySchema, clock: Clock, *, lease_timeout: float, record_format: str | None) -> None:
        self.keys = keys
        if record_format is None:
            record_format = "native" if self.keys.elk_prefix is None else "elk"
        if record_format not in RECORD_FORMATS:
            raise ValidationError(f"record_format must be native or elk, got {record_format!r}")
        self.record_format = record_format
        self.lease_timeout = check_seconds("lease_timeout", lease_timeout)
        self._clock = clock  # leases compare times of several hosts: the server's clock by default
        self._next_sync = 0.0
        self._stale_ms = int(self.lease_timeout * 1000)
        self._stale_look_ms = int(min(STALE_LOOK_S, self.lease_timeout / 10) * 1000)
        self._next_stale_look = 0  # unix ms: the first claim looks
        # Go's times are sent only where Go's records can be; a step that meets one asks for them
        self._elk_times = record_format == "elk" or keys.elk_prefix is not None
        self._elk_second: tuple[int, str] = (-1, "")  # a second and its date and time, one object: threads share it
        self._workers: dict[str, str] = {}  # worker ids checked, as the JSON text the scripts compare
        # pid -> the native record as this SDK's last step on it answered (and parsed): sent with the
        # next step, whose script then need not check the record whole again (`_layout.lua`'s native_at)
        self._seen: dict[int, bytes | str] = {}
        k = self.keys  # each step's keys, named once (a key name is built at each ask)
        self._step_keys = {
            "claim": [k.active, k.pending, k.leases, *k.go_stats],
            "start": [k.active, k.leases, *k.go_stats],
            "heartbeat": [k.active],
            "complete": [*k.complete_keys, *k.go_stats],
            "complete_running": k.complete_keys[:5],  # archived, no latencies handed, not bound
            "complete_holding": k.complete_keys[:6],  # the same where completions may be held
            "finish": [*k.finish_keys, *k.go_stats],  # the task window's finish (`_finish`)
        }
        self._latencies = LatencyBuffer()  # handed to Redis with a later completion: archived ones
        self._held_latencies = LatencyBuffer()  # and held ones (the gray release's other cohort)
        # a completion was held: later ones send what holding needs at once rather than on a retry
        self._holding = keys.elk_prefix is not None  # a bound namespace sends every key (Go's stats last)
        self._complete_seconds: Any = None
        self.reads = ActiveReads(keys)
        self.leader = ActiveLeader(keys, record_format, clock_args=self._clock_args, run=self._run, sync=self._sync)

    def _now(self) -> Steps[float]:
        return float((yield Call(self._clock)))

    def _clock_args(self) -> Steps[tuple[int, int, str]]:
        """Now as unix ms, unix seconds, and RFC 3339 JSON text (UTC, to the microsecond; the
        date and time of a second are formatted once)."""
        now = float((yield Call(self._clock)))  # `_now`, one generator less on every step's way
        seconds = int(now)
        if not self._elk_times:
            return int(now * 1000), seconds, ""
        second = self._elk_second
        if seconds != second[0]:
            second = self._elk_second = (seconds, '"' + GoTime(seconds, 0).format()[:-1])
        micros = int((now - seconds) * 1e6)
        fraction = f".{micros:06d}".rstrip("0") if micros else ""
        return int(now * 1000), seconds, f'{second[1]}{fraction}Z"'

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Steps[Any]:
        """Run a script of this layer; its typed error replies become exceptions here."""
        try:
            reply = yield Script(script, keys, args)
        except redis.exceptions.OutOfMemoryError:  # refused at the script's first write: nothing written
            raise OutOfMemory(f"redis is at maxmemory and refuses writes; nothing was changed ({script})") from None
        refused = script_error(reply)
        if refused is not None and refused.code == "corrupt":
            raise DecodeError(f"the stored record of partition {refused.detail or '?'} is corrupt")
        return reply

    # worker side

    def _claim(self, worker_id: str) -> Steps[PartitionInfo | None]:
        """Take the lowest pending partition, or one whose worker stopped heartbeating.

        Stale leases are looked for on the first claim and then at most every `STALE_LOOK_S`
        (a tenth of the lease timeout when that is shorter), and whenever nothing is pending: a
        dead worker's partition is taken over within the lease timeout and that much, as a
        queue's stalled-job check runs every so often rather than on every fetch.
        """
        worker = self._checked_worker(worker_id)
        k = self.keys
        if k.elk_prefix is not None and (yield from self._now()) >= self._next_sync:
            yield from self._sync()
        keys = self._step_keys["claim"]
        upgraded: set[str] = set()
        while True:
            now_ms, now_s, now_elk = yield from self._clock_args()
            look = now_ms >= self._next_stale_look
            cutoff = now_ms - self._stale_ms
            args = [worker, now_ms, now_s, *((cutoff, -cutoff) if look else ("", "")), *_trailing(now_elk)]
            got = yield from self._run("claim", keys, args)
            if look:
                self._next_stale_look = now_ms + self._stale_look_ms
            if not isinstance(got, list):
                try:
                    return self._read(got)
                except DecodeError:  # claimed, and then found unreadable here: set aside, the next one claimed
                    yield from self._upgrade([_pid_of(got)], aside=True)
                    continue
            head = as_text(got[0])
            if head == "none":
                if look:
                    return None
                self._next_stale_look = 0  # nothing pending: the leases are looked at before saying so
            elif head == "elk_time":
                self._elk_times = True
            else:  # 'upgrade': records of an earlier release, or unreadable ones, met first
                pids = [as_text(pid) for pid in got[1:]]
                if upgraded.intersection(pids):  # rewritten, and met again in no layout
                    raise DecodeError(f"the stored records of partitions {', '.join(pids)} stay in no layout")
                yield from self._upgrade(pids)
                upgraded.update(pids)

    def _read(self, raw: bytes | str) -> PartitionInfo:
        """The record a step answered, parsed; a native one is remembered for the next step on it."""
        part = parse_active(raw)
        if raw[:10] in (b'{"status":', '{"status":'):
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen[part.partition_id] = raw
        return part

    @typed
    def _requeue_unreadable(self, pids: list[int]) -> Steps[list[int]]:
        """Put records set aside as unreadable (`_unreadable`) back in the index of their status,
        those that read now (mended by hand); returns the pids still unreadable, which stay aside.
        A pid with no record leaves the set."""
        for pid in pids:
            check_partition_id(pid)
        still: list[int] = []
        for start in range(0, len(pids), 500):
            still += [int(p) for p in (yield from self._upgrade([str(p) for p in pids[start : start + 500]]))]
        return still

    def _upgrade(self, pids: list[str], *, aside: bool = False) -> Steps[list[str]]:
        """Rewrite records in the layout of their format and in the index of their status, and set
        the unreadable ones aside (`layers/active/lua/upgrade.lua`), or (``aside``) set them all
        aside; returns the pids whose records cannot be read."""
        k = self.keys
        now_ms = int((yield from self._now()) * 1000)
        keys = [k.active, k.leases, k.pending, k.failed, k.unreadable]
        got = yield from self._run("upgrade", keys, [now_ms, "aside" if aside else "", *pids])
        return [as_text(pid) for pid in got]

    def _step(self, script: str, keys: list[str], args: list[Any], pid: int, op: str) -> Steps[Any]:
        """Run a step on one partition's record, upgrading the record once if the script asks to.
        Returns the script's result: the record (or entry) as text, or a list for the others; None
        when the step is to be sent again with Go's times (`_elk_times`)."""
        got = yield from self._run(script, keys, args)
        if isinstance(got, list) and as_text(got[0]) == "upgrade":
            if (yield from self._upgrade([str(pid)])):
                raise DecodeError(f"the stored record of partition {pid} is corrupt")
            got = yield from self._run(script, keys, args)
            if isinstance(got, list) and as_text(got[0]) == "upgrade":
                raise DecodeError(f"the stored record of partition {pid} is in no layout partarchive writes")
        if isinstance(got, list) and as_text(got[0]) == "elk_time":
            self._elk_times = True  # a Go record where none was expected: the caller runs the step again
            return None
        _raise_for(got, pid, op)
        return got

    @typed
    def _sync(self) -> Steps[dict[str, int]]:
        """Rebuild the pending/lease/failed indexes from the active hash.

        Needed where other writers (elk_coordinator's Go workers) change the hash without
        them. Records are read with HSCAN; an index entry added for a record that moved on in
        the meantime is dropped by the next script that meets it. Returns the counts.
        """
        k = self.keys
        pending: dict[str, int] = {}
        failed: dict[str, int] = {}
        leases: dict[str, int] = {}
        unreadable: set[str] = set()
        counts: Counter[str] = Counter()
        cursor = 0
        while True:
            cursor, page = yield one().hscan(k.active, cursor, count=1000)
            for field, raw in page.items():
                pid = as_text(field)
                try:
                    part = parse_active(raw)
                except (DecodeError, ValidationError):
                    unreadable.add(pid)
                    continue
                status = part.status.value
                counts[status] += 1
                if status == "pending":
                    pending[pid] = part.partition_id
                elif status == "failed":
                    failed[pid] = part.partition_id
                elif status == "claimed":
                    leases[pid] = _heartbeat_ms(raw, part)
                elif status == "running":
                    leases[pid] = -_heartbeat_ms(raw, part)
                # completed: held by the archival switch (`archival_held`), in none of these indexes
            if not int(cursor):
                break
        set_aside = {as_text(pid) for pid in (yield one().zrange(k.unreadable, 0, -1))}
        now_ms = int((yield from self._now()) * 1000)
        batch = Batch(transaction=True)
        batch.delete(k.pending, k.failed, k.leases)
        for zset, members in ((k.pending, pending), (k.failed, failed), (k.leases, leases)):
            if members:
                batch.zadd(zset, members)  # type: ignore[arg-type,misc]
        if set_aside - unreadable:  # mended, or gone
            batch.zrem(k.unreadable, *(set_aside - unreadable))
        if unreadable - set_aside:
            batch.zadd(k.unreadable, dict.fromkeys(unreadable - set_aside, now_ms), nx=True)  # type: ignore[misc]
        yield batch
        self._next_sync = (yield from self._now()) + _SYNC_EVERY_S
        return {s.value: counts.get(s.value, 0) for s in ACTIVE_STATUSES}

    @typed
    def _counts(self) -> Steps[dict[str, int]]:
        """Active partitions per status (recounted from the hash in a namespace bound to Go's)."""
        if self.keys.elk_prefix is not None:
            return (yield from self._sync())
        trip = RoundTrip(Batch())
        counts = add_counts(trip, self.keys)
        trip.hand((yield trip.commands))
        return counts.value

    def _start(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Steps[PartitionInfo]:
        check_partition_id(pid)
        worker, expected = self._checked_worker(worker_id), _version_arg(expected_version)
        while True:
            now_ms, now_s, now_elk = yield from self._clock_args()
            args = [pid, worker, now_s, -now_ms, *_trailing(now_elk, expected, self._seen.get(pid, ""))]
            got = yield from self._step("start", self._step_keys["start"], args, pid, "start")
            if got is not None:
                return self._read(got)

    def _heartbeat(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Steps[PartitionInfo]:
        check_partition_id(pid)
        worker, expected = self._checked_worker(worker_id), _version_arg(expected_version)
        while True:
            _, now_s, now_elk = yield from self._clock_args()
            args = [pid, worker, now_s, *_trailing(now_elk, expected, self._seen.get(pid, ""))]
            got = yield from self._step("heartbeat", self._step_keys["heartbeat"], args, pid, "heartbeat")
            if got is not None:
                return self._read(got)

    def _fail(
        self, pid: int, worker_id: str, error: str, *, expected_version: int | None = None
    ) -> Steps[PartitionInfo]:
        check_partition_id(pid)
        check_worker_id(worker_id)
        check_text("error", error, MAX_ERROR_BYTES, allow_empty=True, multiline=True)
        k = self.keys
        _, now_s, now_elk = yield from self._clock_args()
        self._seen.pop(pid, None)
        got = yield from self._run(
            "fail",
            [k.active, k.leases, k.failed, *k.go_stats],
            [pid, worker_id, _version_arg(expected_version), now_s, now_elk, go_string(error)],
        )
        _raise_for(got, pid, "fail")
        return parse_active(got[1])

    def _complete(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Steps[Completion]:
        """Remove the partition from the active layer and queue it for the archiver, atomically."""
        check_partition_id(pid)
        k = self.keys
        worker, expected = self._checked_worker(worker_id), _version_arg(expected_version)
        latencies, held_latencies = self._latencies.take_due(), self._held_latencies.take_due()
        handed, held_handed = latency_argument(latencies), latency_argument(held_latencies)
        seen = self._seen.pop(pid, "")
        started = time.perf_counter()
        try:
            while True:
                now_ms, now_s, now_elk = yield from self._clock_args()
                holding = self._holding
                keys = self._step_keys["complete_holding" if holding else "complete_running"]
                if handed or held_handed or k.elk_prefix is not None:
                    keys = self._step_keys["complete"]
                args = [
                    pid,
                    worker,
                    now_s,
                    *_trailing(now_elk, expected, now_ms if holding else "", handed, held_handed, seen),
                ]
                got = yield from self._step("complete", keys, args, pid, "complete")
                if isinstance(got, list) and as_text(got[0]) == "paused" and not holding:
                    self._holding = True  # sent again with what a completion held needs
                elif got is not None:
                    break
        except BaseException:
            self._latencies.give_back(latencies)
            self._held_latencies.give_back(held_latencies)
            raise
        elapsed = time.perf_counter() - started
        if self._complete_seconds is None:  # created on the first completion: importing registers nothing
            self._complete_seconds = sdk_complete_seconds().labels(namespace=k.namespace)
        self._complete_seconds.observe(elapsed)
        held = isinstance(got, list) and as_text(got[0]) == "held"
        (self._held_latencies if held else self._latencies).observe(elapsed)
        if not isinstance(got, list):  # '<entry id> <queue entry>'
            text = got.decode() if isinstance(got, bytes) else got
            entry_id, _, payload = text.partition(" ")
            return Completion(pid, False, _archived(payload), entry_id)
        if held:  # paused or outside the share: kept in the active hash, status completed
            return Completion(pid, False, held=True)
        self._latencies.give_back(latencies)  # the script adds them only when it completes
        self._held_latencies.give_back(held_latencies)
        return Completion(pid, already_completed=True)

    def _checked_worker(self, worker_id: str) -> str:
        """``worker_id`` checked, as JSON text (Go's escaping); a worker's own id is checked once."""
        found = self._workers.get(worker_id) if type(worker_id) is str else None
        if found is None:
            found = go_string(check_worker_id(worker_id))
            if len(self._workers) >= 1024:
                self._workers.clear()
            self._workers[worker_id] = found
        return found

    # the task window's steps

    def _ready(self, worker_id: str) -> Steps[None]:
        """A finish of nothing, claiming nothing: the scripts loaded where the server lacks them, before a
        window's slots all call at once."""
        yield from self._finish("", 0, worker_id, claim=False)

    def _claim_and_start(self, worker_id: str) -> Steps[PartitionInfo | None]:
        """Take the lowest pending partition (or one whose worker stopped heartbeating) and start it:
        `claim` and `start` in one call; None when nothing is pending."""
        while True:
            got = yield from self._finish("", 0, worker_id, claim=True)
            if got.claim_error is not None:
                raise got.claim_error
            if got.next is not None or self._next_stale_look != 0:
                return got.next
            # nothing pending and the stale leases not looked at this time: looked at before saying so

    def _complete_and_claim(self, pid: int, worker_id: str, *, claim: bool = True) -> Steps[Finished]:
        """`complete` the partition and, with ``claim``, claim and start the next one, atomically."""
        check_partition_id(pid)
        return (yield from self._finish("complete", pid, worker_id, claim=claim))

    def _fail_and_claim(
        self, pid: int, worker_id: str, error: str, *, retry: RetryPolicy | None = None, claim: bool = True
    ) -> Steps[Finished]:
        """`fail` the partition with ``error`` (and, with a ``retry`` policy, send it back to pending
        after its back-off unless this was its last attempt) and, with ``claim``, claim and start the
        next one, atomically."""
        check_partition_id(pid)
        check_text("error", error, MAX_ERROR_BYTES, allow_empty=True, multiline=True)
        return (yield from self._finish("fail", pid, worker_id, claim=claim, error=error, retry=retry))

    def _finish(
        self,
        what: str,
        pid: int,
        worker_id: str,
        *,
        claim: bool,
        error: str = "",
        retry: RetryPolicy | None = None,
    ) -> Steps[Finished]:
        worker = self._checked_worker(worker_id)
        k = self.keys
        if claim and k.elk_prefix is not None and (yield from self._now()) >= self._next_sync:
            yield from self._sync()
        keys = self._step_keys["finish"]
        script, failing = ("finish_failed", True) if what == "fail" else ("finish", False)
        retry_args = retry.args(_RNG) if failing and retry is not None and retry.max_attempts > 1 else ["", "", "", ""]
        error_json = go_string(error) if failing else ""
        taken = (self._latencies.take_due(), self._held_latencies.take_due()) if what == "complete" else _NONE_TAKEN
        handed = [latency_argument(taken[0]), latency_argument(taken[1])]
        seen = self._seen.pop(pid, "") if what else ""
        upgraded: set[str] = set()
        started = time.perf_counter()
        try:
            while True:
                now_ms, now_s, now_elk = yield from (self._go_clock_args() if failing else self._clock_args())
                look = claim and now_ms >= self._next_stale_look
                cutoff = now_ms - self._stale_ms
                stale = (cutoff, -cutoff) if look else ("", "")
                args = [what, pid if what else "", worker, now_s, now_ms, now_elk, "claim" if claim else "",
                        *stale, *handed, seen, error_json, *retry_args]  # fmt: skip
                got = yield from self._run(script, keys, args)
                head = _refusal(got)
                if head:  # the finish refused: nothing written, nothing claimed
                    if head == "elk_time":
                        self._elk_times = True
                        continue
                    if head == "upgrade":
                        if str(pid) in upgraded or (yield from self._upgrade([str(pid)])):
                            raise DecodeError(f"the stored record of partition {pid} is in no layout we write")
                        upgraded.add(str(pid))
                        continue
                    _raise_for(got, pid, what)
                if look:
                    self._next_stale_look = now_ms + self._stale_look_ms
                finished, following = got
                result: Any = (yield from self._claimed(following, look, upgraded)) if claim else (None, None)
                if result is _AGAIN:  # the finish is done; the claim is sent again on its own
                    if not what:
                        continue
                    result = ((yield from self._claim_and_start(worker_id)), None)
                break
        except BaseException:
            self._give_back(taken)
            raise
        nxt, claim_error = result
        return self._finished(what, pid, finished, nxt, claim_error, taken, time.perf_counter() - started)

    def _claimed(self, reply: Any, looked: bool, upgraded: set[str]) -> Steps[Any]:
        """The claim's part of a finish's reply: (the next partition or None, the claim's refusal or
        None), or `_AGAIN` when the claim is to be sent again (records to upgrade or set aside first,
        Go's times), as `ActiveCore._claim` does."""
        if not isinstance(reply, list):
            try:
                return self._read(reply), None
            except DecodeError:  # claimed, and then found unreadable here: set aside, the next one claimed
                yield from self._upgrade([_pid_of(reply)], aside=True)
                return _AGAIN
        head = as_text(reply[0]) if reply else ""
        if head == "none":
            if not looked:
                self._next_stale_look = 0  # nothing pending: the leases are looked at before saying so
            return None, None
        if head == "elk_time":
            self._elk_times = True
            return _AGAIN
        if head == "upgrade":  # records of an earlier release, or unreadable ones, met first
            pids = [as_text(pid) for pid in reply[1:]]
            if upgraded.intersection(pids):  # rewritten, and met again in no layout
                raise DecodeError(f"the stored records of partitions {', '.join(pids)} stay in no layout")
            yield from self._upgrade(pids)
            upgraded.update(pids)
            return _AGAIN
        if head == "":  # nothing was to be claimed
            return None, None
        try:
            refused = script_error(reply)
        except PartArchiveError as exc:
            return None, exc
        return None, DecodeError(f"the claim refused: {refused}")

    def _finished(
        self,
        what: str,
        pid: int,
        reply: Any,
        nxt: PartitionInfo | None,
        claim_error: PartArchiveError | None,
        taken: tuple[Any, Any],
        elapsed: float,
    ) -> Finished:
        if what == "fail":
            _, record, attempts, retry_at = reply
            at = as_text(retry_at)
            return Finished(pid, "failed", record=parse_active(record), attempts=int(attempts),
                            retry_at=int(at) / 1000 if at else None, next=nxt, claim_error=claim_error)  # fmt: skip
        if what == "":
            return Finished(0, "", next=nxt, claim_error=claim_error)
        outcome, entry_id = _completion_parts(reply)
        if outcome == "already":
            self._give_back(taken)  # the script adds them only when it completes
        else:
            (self._held_latencies if outcome == "held" else self._latencies).observe(elapsed)
        return Finished(pid, outcome, entry_id=entry_id, next=nxt, claim_error=claim_error)

    def _give_back(self, taken: tuple[Any, Any]) -> None:
        self._latencies.give_back(taken[0])
        self._held_latencies.give_back(taken[1])

    def _beat(
        self, worker_id: str, pids: list[int], *, presence: str = "", presence_ttl_s: float = 30.0, retries: bool = True
    ) -> Steps[Beat]:
        """Renew the leases of ``pids`` held by ``worker_id`` in one call; refresh its presence entry
        (``presence``, `WorkerPresence.entry`; '' = none) to expire ``presence_ttl_s`` from now; with
        ``retries``, send back to pending the failed partitions whose back-off is over. A lease
        found lost (the partition gone, another worker's, no longer claimed or running, or its record
        unreadable: set aside) is named and left alone. Nothing is written when a key holds another
        type (`WrongKeyType`)."""
        worker = self._checked_worker(worker_id)
        for pid in pids:
            check_partition_id(pid)
        k = self.keys
        keys = [k.active, k.presence, k.presence_expiry, k.retries, k.failed, k.pending, *k.go_stats]
        upgraded: set[str] = set()
        unreadable: dict[int, str] = {}  # held records no reader can read: set aside, their leases lost
        while True:
            now_ms, now_s, now_elk = yield from self._go_clock_args()
            expires = now_ms + int(presence_ttl_s * 1000) if presence else ""
            args = [worker, worker_id, now_s, now_ms, now_elk, presence, expires, RETRIES_PER_BEAT if retries else 0,
                    *(pid for pid in pids if pid not in unreadable)]  # fmt: skip
            got = yield from self._run("beat", keys, args)
            script_error(got)
            if as_text(got[0]) == "upgrade":
                meets = as_text(got[1])
                if meets in upgraded or (yield from self._upgrade([meets])):
                    unreadable[int(meets)] = "corrupt"
                upgraded.add(meets)
                continue
            _, renewed, lost, moved, next_ms = got
            lost_pairs = [as_text(x) for x in lost]
            return Beat(
                renewed=[int(p) for p in renewed],
                lost={int(lost_pairs[i]): lost_pairs[i + 1] for i in range(0, len(lost_pairs), 2)} | unreadable,
                retried=int(moved),
                next_retry_at=int(next_ms) / 1000 if as_text(next_ms) else None,
            )

    def _release(self, worker_id: str, pids: list[int], *, leave: bool = False) -> Steps[list[int]]:
        """Hand the partitions of ``pids`` that ``worker_id`` holds back to pending at once (status
        pending, no worker; a Go record as Go's ReleasePartition leaves it), rather than after their
        lease times out; with ``leave`` its presence entry goes too. Returns the pids handed back."""
        self._checked_worker(worker_id)
        for pid in pids:
            check_partition_id(pid)
        k = self.keys
        keys = [k.active, k.leases, k.pending, k.presence, k.presence_expiry, *k.go_stats]
        _, now_s, now_elk = yield from self._go_clock_args()
        got = yield from self._run("release", keys, [worker_id, now_s, now_elk, "leave" if leave else "", *pids])
        script_error(got)
        return [int(p) for p in got[1]]

    def _presence(self) -> Steps[list[WorkerPresence]]:
        """The live worker runtime processes of the namespace, by id (`layers.active.presence`)."""
        raw = yield one().hgetall(self.keys.presence)
        return presence_from(raw, (yield from self._now()))

    def _go_clock_args(self) -> Steps[tuple[int, int, str]]:
        """`_clock_args` with Go's time always: the scripts of rare steps may meet Go's records anywhere."""
        now_ms, now_s, now_elk = yield from self._clock_args()
        if not now_elk:
            micros = now_ms % 1000 * 1000
            now_elk = '"' + GoTime(now_s, micros * 1000).format() + '"'
        return now_ms, now_s, now_elk


def _archived(payload: str) -> ArchivedPartition | None:
    """The archived form of a queue entry `complete` wrote, or None where its values do not make one
    (a record tampered with past what the script checks, say a min_id above the max_id): the
    completion stands, written once; the archiver sets the entry aside with its reason."""
    try:
        if '"completed_at"' in payload:  # a native record's archived form
            return ArchivedPartition.from_json(payload)
        return decode_elk(payload).to_archived()
    except (DecodeError, ValidationError):
        return None


def _pid_of(raw: bytes | str) -> str:
    """The partition id in a record that cannot be parsed (a step wrote it: it names one)."""
    found = re.search(rb'"partition_id":(\d{1,10})[,}]', raw if isinstance(raw, bytes) else raw.encode())
    if found is None:
        raise DecodeError("a claimed record names no partition id")
    return found.group(1).decode()


def _heartbeat_ms(raw: bytes, part: PartitionInfo) -> int:
    """A leased record's last heartbeat in unix ms (Go records keep sub-second precision)."""
    if b'"claimed_at"' in raw:
        return part.last_heartbeat * 1000
    return decode_elk(raw).last_heartbeat.unix_ms


def _trailing(*values: Any) -> list[Any]:
    """Optional trailing script arguments: up to the last one given ('' is not given)."""
    given = list(values)
    while given and given[-1] == "":
        given.pop()
    return given


def _version_arg(expected: int | None) -> str:
    if expected is None:
        return ""
    return str(check_int("expected_version", expected, 0, 2**53))


def _raise_for(reply: list[Any], pid: int, op: str) -> None:
    refused = script_error(reply)
    if refused is None:
        return
    code, detail = refused
    if code == "corrupt":
        raise DecodeError(f"the stored record of partition {pid} is corrupt")
    if code == "not_found":
        raise PartitionNotFound(f"partition {pid} is not active")
    if code == "not_owner":
        raise NotOwner(f"partition {pid} is claimed by another worker")
    if code == "version":
        raise VersionConflict(f"partition {pid} is at version {detail}")
    raise InvalidTransition(f"cannot {op} partition {pid}: it is {detail}")


def _refusal(reply: Any) -> str:
    """A finish's refusal ('err', 'upgrade', 'elk_time'), or '' for {finished, next}; the first element of
    the latter is not read whole (a queue entry: a few hundred bytes)."""
    first = reply[0] if type(reply) is list and reply else None
    if (type(first) is bytes and len(first) <= 8) or (type(first) is str and len(first) <= 8):
        head = as_text(first)
        return head if head in _REFUSALS else ""
    return ""


def _completion_parts(reply: Any) -> tuple[str, str | None]:
    """The outcome of a completion as ``complete.lua`` answers it, and its queue entry's id."""
    if type(reply) is bytes:  # b'<entry id> <queue entry>'
        return "completed", reply[: reply.index(b" ")].decode()
    if not isinstance(reply, list):
        return "completed", as_text(reply).partition(" ")[0]
    return ("held" if as_text(reply[0]) == "held" else "already"), None


_RNG = random.Random()
_AGAIN: Any = object()
_NONE_TAKEN: tuple[Any, Any] = (({}, 0), ({}, 0))

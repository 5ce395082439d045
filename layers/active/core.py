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
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis

from codec import ACTIVE_STATUSES, ArchivedPartition, DecodeError, PartitionInfo, ValidationError
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
from layers.active.reads import ActiveReads, typed
from layers.active.window import ActiveWindow
from layers.errors import (
    InvalidTransition,
    NotOwner,
    OutOfMemory,
    PartitionNotFound,
    VersionConflict,
)
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.steps import Batch, Call, Script, Steps, one

RECORD_FORMATS = ("native", "elk")
_SYNC_EVERY_S = 1.0
_SEEN_MAX = 4096  # records remembered (`ActiveCore._seen`): more partitions than a process holds at once
#: How often at most a claim looks for stale leases (`ActiveCore._claim`).
STALE_LOOK_S = 1.0

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


class ActiveCore(ActiveReads, ActiveLeader, ActiveWindow):
    """The state and the steps of the worker SDK (no client: the flavours bring the I/O)."""

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
            "finish": [*k.finish_keys, *k.go_stats],  # the task window's finish (`layers.active.window`)
        }
        self.skipped_records = 0
        self._latencies = LatencyBuffer()  # handed to Redis with a later completion: archived ones
        self._held_latencies = LatencyBuffer()  # and held ones (the gray release's other cohort)
        # a completion was held: later ones send what holding needs at once rather than on a retry
        self._holding = keys.elk_prefix is not None  # a bound namespace sends every key (Go's stats last)
        self._complete_seconds: Any = None

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
        """Take the lowest pending partition, or one whose holder stopped heartbeating.

        Stale leases are looked for on the first claim and then at most every `STALE_LOOK_S`
        (a tenth of the lease timeout when that is shorter), and whenever nothing is pending: a
        dead worker's partition is taken over within the lease timeout and that much, as a
        queue's stalled-job check runs every so often rather than on every fetch.
        """
        worker = _worker_json(self, worker_id)
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

    def _start(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Steps[PartitionInfo]:
        check_partition_id(pid)
        worker, expected = _worker_json(self, worker_id), _version_arg(expected_version)
        while True:
            now_ms, now_s, now_elk = yield from self._clock_args()
            args = [pid, worker, now_s, -now_ms, *_trailing(now_elk, expected, self._seen.get(pid, ""))]
            got = yield from self._step("start", self._step_keys["start"], args, pid, "start")
            if got is not None:
                return self._read(got)

    def _heartbeat(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Steps[PartitionInfo]:
        check_partition_id(pid)
        worker, expected = _worker_json(self, worker_id), _version_arg(expected_version)
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
        worker, expected = _worker_json(self, worker_id), _version_arg(expected_version)
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
        return _worker_json(self, worker_id)

    def _refused(self, reply: list[Any], pid: int, op: str) -> None:
        _raise_for(reply, pid, op)

    def _pid_of(self, raw: bytes | str) -> str:
        return _pid_of(raw)


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


def _worker_json(self: ActiveCore, worker_id: str) -> str:
    """``worker_id`` checked, as JSON text (Go's escaping); a worker's own id is checked once."""
    found = self._workers.get(worker_id) if type(worker_id) is str else None
    if found is None:
        found = go_string(check_worker_id(worker_id))
        if len(self._workers) >= 1024:
            self._workers.clear()
        self._workers[worker_id] = found
    return found


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
        raise NotOwner(f"partition {pid} is held by another worker")
    if code == "version":
        raise VersionConflict(f"partition {pid} is at version {detail}")
    raise InvalidTransition(f"cannot {op} partition {pid}: it is {detail}")

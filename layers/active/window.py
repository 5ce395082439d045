"""The steps of a worker that keeps several partitions in hand (the runtime's task window,
`archiver.runtime`): a part of `layers.active.core.ActiveCore`, as the leader's steps are.

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
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from codec import DecodeError, PartArchiveError, PartitionInfo, ValidationError
from codec.gojson import GoTime, go_string
from codec.stored import parse_active
from codec.validate import MAX_ERROR_BYTES, check_int, check_partition_id, check_seconds, check_text
from layers.active.latencies import LatencyBuffer, latency_argument
from layers.active.presence import WorkerPresence, presence_from
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.steps import Steps, one

#: Partitions a beat sends back to pending at most per call (the rest go with the next beat).
RETRIES_PER_BEAT = 100
#: The refusals of a finish (nothing written, nothing claimed): a reply's first element.
_REFUSALS = frozenset({"err", "upgrade", "elk_time"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a partition whose processing failed is tried: ``max_attempts`` in all (1: never
    again), each failure but the last sending it back to pending after an exponential back-off
    (``backoff_s``, doubled at each failure, at most ``backoff_max_s``) with jitter (the back-off
    times a random factor from 0.5 to 1, so failures of one moment do not come back together).
    The failures are counted in Redis (`KeySchema.attempts`), whichever worker failed it."""

    max_attempts: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, 1, 1000)
        check_seconds("backoff_s", self.backoff_s)
        check_seconds("backoff_max_s", self.backoff_max_s)
        if self.backoff_max_s < self.backoff_s:
            raise ValidationError("backoff_max_s must be at least backoff_s")

    def args(self, rng: random.Random) -> list[Any]:
        """The finish script's arguments: attempts, back-off and its bound (ms), the jitter's draw."""
        draw = f"{rng.random():.6f}" if self.jitter else "1"
        return [self.max_attempts, int(self.backoff_s * 1000), int(self.backoff_max_s * 1000), draw]


class Finished(NamedTuple):
    """What a finish did (`ActiveLayer.complete_and_claim`, `ActiveLayer.fail_and_claim`); a tuple, as one
    is made a partition."""

    partition_id: int
    outcome: str  # 'completed' (queued for the archiver), 'held' (paused or outside the share),
    #              'already' (completed before), 'failed'
    entry_id: str | None = None  # the archive queue's entry of a completion
    record: PartitionInfo | None = None  # the failed record
    attempts: int = 0  # failures counted by the retry policy so far (0 without one)
    retry_at: float | None = None  # unix s when a failure goes back to pending; None: it stays failed
    next: PartitionInfo | None = None  # the next partition, claimed and started (running)
    claim_error: PartArchiveError | None = None  # the claim's refusal, after the finish was done


@dataclass(frozen=True, slots=True)
class Beat:
    """What a beat found (`ActiveLayer.beat`)."""

    renewed: list[int]
    lost: dict[int, str]  # pid -> why: 'not_found', 'not_owner', 'failed', 'pending', ...
    retried: int  # failed partitions sent back to pending, their back-off over
    next_retry_at: float | None  # unix s of the next back-off to end in the namespace, if any


class ActiveWindow:
    """The task window's steps of `ActiveCore` (which provides these attributes and steps)."""

    keys: KeySchema
    _elk_times: bool
    _next_sync: float
    _next_stale_look: int
    _stale_ms: int
    _stale_look_ms: int
    _latencies: LatencyBuffer
    _held_latencies: LatencyBuffer
    _seen: dict[int, bytes | str]
    _step_keys: dict[str, list[str]]

    def _now(self) -> Steps[float]:
        raise NotImplementedError

    def _clock_args(self) -> Steps[tuple[int, int, str]]:
        raise NotImplementedError

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Steps[Any]:
        raise NotImplementedError

    def _sync(self) -> Steps[dict[str, int]]:
        raise NotImplementedError

    def _upgrade(self, pids: list[str], *, aside: bool = False) -> Steps[list[str]]:
        raise NotImplementedError

    def _checked_worker(self, worker_id: str) -> str:
        raise NotImplementedError

    def _read(self, raw: bytes | str) -> PartitionInfo:
        raise NotImplementedError

    def _refused(self, reply: list[Any], pid: int, op: str) -> None:
        raise NotImplementedError

    def _pid_of(self, raw: bytes | str) -> str:
        raise NotImplementedError

    def _ready(self, worker_id: str) -> Steps[None]:
        """A finish of nothing, claiming nothing: the scripts loaded where the server lacks them, before a
        window's slots all call at once."""
        yield from self._finish("", 0, worker_id, claim=False)

    def _claim_and_start(self, worker_id: str) -> Steps[PartitionInfo | None]:
        """Take the lowest pending partition (or one whose holder stopped heartbeating) and start it:
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
                    self._refused(got, pid, what)
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
                yield from self._upgrade([self._pid_of(reply)], aside=True)
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

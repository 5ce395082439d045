"""The leader's steps: its lease with a fencing token, the plan's next run of partitions, the fixed plan
of ``partarchive plan``, and the check of what was planned. The worker runtime's leader
(`archiver.runtime.leader`) drives them on its process's loop; ``partarchive plan`` blocking.

**The lease** (``lead.lua``): one holder of a namespace at a time, renewed every third of it. Each new
lease takes the next fencing token (`KeySchema.leader_tokens`), and every write the leader makes
carries its token: the script refuses it (`NotLeader`, nothing written) unless the lock holds that
token now (``_fence.lua``). A leader paused past its lease (GC, SIGSTOP) that comes back creates
nothing, whoever leads since. In a namespace bound to an elk_coordinator deployment whose namespace
is known (`KeySchema.elk_namespace`), the lease stands aside while Go's own leader holds Go's lock
(``P NS:leader_lock``) and, while held, holds that lock too, in Go's format, so Go's leaders stand aside.

**The plan** (`KeySchema.plan`): the IDs planned so far are ``first_id .. next_id - 1``, contiguous.
A run of partitions is created from the plan's next start (``plan.lua``), and only if the next start
is still the one read, in the step that moves it past the run: the runs never overlap and never
leave a hole, whoever leads and however often the leader changes or crashes. The latest runs are listed
(`KeySchema.plan_runs`, `Run`; `RUNS_KEPT` of them, the pids of older ones folded into intervals) so a
fixed plan can be told apart from a different one and the check knows what each planned partition
should hold. In a bound namespace, IDs Go's leader allocated (its ``last_allocated_id``) are taken as
planned by Go (`KeySchema.plan_go_spans`), and each run moves Go's counters as Go's creation does.

**The check**: the leader walks the partition ids created since it last looked, a page at a time,
and checks each planned partition against the plan: still active with its planned range, or
completed (its done or index bit set, or in Go's archive); one that is neither left a hole in the IDs
processed; one whose range changed, or a partition created outside the plan over planned IDs, is an
overlap. The findings and the cursor are written with the token (``plan_check.lua``).
"""

from __future__ import annotations

import bisect
import itertools
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import orjson

from codec import DecodeError, ValidationError
from codec.stored import parse_active
from codec.validate import MAX_INT64, MAX_PARTITION_ID, MIN_INT64, check_int, check_worker_id
from layers.active.leader import MAX_PARTITIONS_PER_CALL, creation_refused, options_text
from layers.errors import CorruptMetadata, NotLeader, PlanChanged
from layers.keys import KeySchema
from layers.plumbing.replies import as_text, script_error
from layers.plumbing.runners import Awaited, Blocking, operation
from layers.plumbing.steps import Batch, Steps, one

#: Partition ids the check reads in one round trip, and at most in one call.
CHECK_PAGE = 1000
CHECK_PIDS_PER_CALL = 20_000
#: Partitions a step of the plan creates at most: a tenth of what `create_partitions` takes in one call
#: (`MAX_PARTITIONS_PER_CALL`), so that a fixed plan of millions holds Redis under a second a call,
#: not several seconds (past a server's busy-script limit, 5 s, every other client is refused meanwhile).
PLAN_CALL_PARTITIONS = MAX_PARTITIONS_PER_CALL // 10
#: The plan's runs kept listed (a run each allocation that does not go on from the last: one every
#: interval for a planner whose ranges end in a short partition); older ones are folded (their pids kept
#: as intervals), so the list, and what the check reads each turn, stays bounded (~50 bytes a run).
RUNS_KEPT = 2000


class Lead(NamedTuple):
    """What a try for the lease found (`Planning.lead`)."""

    leads: bool  # this holder leads: the lease was taken, or renewed
    token: int  # the lease's fencing token (the other holder's when another leads; 0: unknown)
    holder: str  # who leads: this holder, another one, or Go's leader ('' = nobody)
    since_ms: int = 0  # when the lease began (unix ms)
    go: bool = False  # elk_coordinator's own leader holds Go's lock
    left_ms: int = 0  # how long another holder's lease has left


class Run(NamedTuple):
    """One entry of the plan's runs: pids ``first_pid .. last_pid`` hold IDs ``min_id .. max_id`` in
    partitions of ``size`` IDs (the last one shorter when the span ends there)."""

    first_pid: int
    last_pid: int
    min_id: int
    max_id: int
    size: int

    @classmethod
    def parse(cls, raw: Any) -> Run:
        try:
            first, last, lo, hi, size = (int(part) for part in as_text(raw).split(","))
        except ValueError:
            raise DecodeError(f"a plan runs entry is not first_pid,last_pid,min_id,max_id,size: {raw!r}") from None
        return cls(first, last, lo, hi, size)

    @property
    def regular(self) -> bool:
        """Every partition of the run is whole (a run after it in its size goes on its pattern)."""
        return (self.max_id - self.min_id + 1) % self.size == 0

    def partition(self, pid: int) -> tuple[int, int]:
        """The IDs planned for ``pid`` (one of the run's)."""
        lo = self.min_id + (pid - self.first_pid) * self.size
        return lo, min(lo + self.size - 1, self.max_id)

    def holding(self, id_: int) -> tuple[int, int, int]:
        """The planned partition that holds ID ``id_`` (one of the run's): its pid and IDs."""
        k = (id_ - self.min_id) // self.size
        lo = self.min_id + k * self.size
        return self.first_pid + k, lo, min(lo + self.size - 1, self.max_id)


def _span(raw: Any) -> tuple[int, int]:
    """An entry of `KeySchema.plan_go_spans`: ``min_id,max_id``."""
    try:
        lo, hi = (int(part) for part in as_text(raw).split(","))
    except ValueError:
        raise DecodeError(f"a plan's Go span is not min_id,max_id: {raw!r}") from None
    return lo, hi


@dataclass(frozen=True, slots=True)
class PlanState:
    """The plan as read: the IDs planned (``first_id .. next_id - 1``; None: nothing planned yet), what
    the leader's check found, and what a write built on this read expects to find unchanged."""

    first_id: int | None = None
    next_id: int | None = None
    partitions: int = 0
    runs: int = 0
    token: int = 0  # the token of the last run's writer
    seen_pid: int = 0  # the check has looked at every partition created up to this pid
    sweep_pid: int = 0  # where the check's walk over every partition is
    passes: int = 0  # walks over every partition ended
    folded: tuple[tuple[int, int], ...] = ()  # the pids of runs no longer listed, as intervals
    checked_at: int = 0
    failed_final: int = 0  # partitions failed for good (after their last attempt), when the check last looked
    go_last_id: int | None = None  # Go's last_allocated_id, read as Go's leader would mean it (bound only)
    read_next: str = ""  # next_id, the last runs entry and Go's last_allocated_id, as read
    read_run: str = ""
    read_go: str = ""
    read_seen: str = ""
    read_sweep: str = ""

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        for name in ("read_next", "read_run", "read_go", "read_seen", "read_sweep"):
            del body[name]
        return body

    def start(self, first_id: int) -> tuple[int, tuple[int, int] | None]:
        """Where the next run starts, and the span Go's leader planned before it (to list as adopted)
        or None: the plan's next start (``first_id`` when nothing is planned), or past Go's allocation."""
        start = first_id if self.next_id is None else self.next_id
        if self.go_last_id is not None and self.go_last_id >= start:
            return self.go_last_id + 1, (start, min(self.go_last_id, MAX_INT64))
        return start, None


class Created(NamedTuple):
    """A run of partitions the plan created: its pids and IDs."""

    pids: range
    min_id: int
    max_id: int


class Finding(NamedTuple):
    """A hole or an overlap the check found: the IDs, and the partition it found it at."""

    kind: str  # 'hole' | 'overlap'
    min_id: int | None  # None: IDs of a run no longer listed
    max_id: int | None
    partition_id: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What one call of the check did (`Planning.check`)."""

    fresh: range  # the partition ids created since the last check, read
    sweep: range  # and those of the walk over every partition
    holes: list[Finding]
    overlaps: list[Finding]
    failed_final: int


def lock_holder() -> str:
    """A holder id for a process that leads once (``partarchive plan``): ``plan-HOST-PID-XXXXXX``."""
    return check_worker_id(f"plan-{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}")


class Planning:
    """The leader's steps over one namespace, composed with the worker SDK whose keys, clock and
    script runner it uses (`layers.active.sdk.ActiveLayer` or its asyncio twin); `PlanningLayer` and
    `AsyncPlanningLayer` run them as methods."""

    def __init__(self, sdk: Any) -> None:
        self.sdk = sdk
        self.keys: KeySchema = sdk.keys
        self._io = sdk._io

    # the lease

    def _lead(self, holder: str, token: int, lease_s: float) -> Steps[Lead]:
        """Take the lease for ``holder``, or renew the one it holds (``token``; 0: none), for ``lease_s``."""
        check_worker_id(holder)
        k = self.keys
        now_ms = int((yield from self.sdk._now()) * 1000)
        args = ["lead", holder, token or "", max(1, int(lease_s * 1000)), now_ms]
        got = yield from self.sdk._run("lead", [k.leader_lock, k.leader_tokens, *k.go_leader_lock], args)
        script_error(got, unchanged="no lease was taken")
        head = as_text(got[0])
        if head == "leads":
            since = as_text(got[2])
            return Lead(True, int(got[1]), holder, int(since) if since else 0)
        if head == "go":
            return Lead(False, 0, as_text(got[1]), go=True)
        other_token = as_text(got[2])
        return Lead(False, int(other_token) if other_token.isdigit() else 0, as_text(got[1]),
                    left_ms=max(0, int(got[3])))  # fmt: skip

    def _resign(self, holder: str, token: int) -> Steps[bool]:
        """Give up the lease ``holder`` holds with ``token`` (another may lead at once); False if it no
        longer held it."""
        k = self.keys
        now_ms = int((yield from self.sdk._now()) * 1000)
        got = yield from self.sdk._run(
            "lead", [k.leader_lock, k.leader_tokens, *k.go_leader_lock], ["resign", holder, token, 1, now_ms]
        )
        script_error(got)
        return bool(int(got[1]))

    # the plan

    def _state(self) -> Steps[PlanState]:
        """The plan as it is now (`PlanState`)."""
        k = self.keys
        batch = Batch()
        batch.hgetall(k.plan)
        batch.lindex(k.plan_runs, -1)
        if k.elk is not None:
            batch.hget(k.elk.stats, "last_allocated_id")
        got = yield batch
        return plan_state_from(k, got[0], got[1], got[2] if k.elk is not None else None)

    def _runs(self) -> Steps[list[Run]]:
        """The plan's runs still listed, in order (of their IDs and of their pids)."""
        return [Run.parse(raw) for raw in (yield one().lrange(self.keys.plan_runs, 0, -1))]

    def _go_spans(self) -> Steps[list[tuple[int, int]]]:
        """The IDs elk_coordinator's leader planned between the plan's runs, in order."""
        return [_span(raw) for raw in (yield one().lrange(self.keys.plan_go_spans, 0, -1))]

    def _extend(
        self, token: int, max_id: int, size: int, *, first_id: int = 1, options: dict[str, Any] | None = None
    ) -> Steps[Created | None]:
        """Create the plan's next run, from its next start (``first_id`` when nothing is planned) up to
        ``max_id`` in partitions of ``size`` IDs, cut at `PLAN_CALL_PARTITIONS` partitions; None
        when there is nothing up to ``max_id``. Raises `NotLeader` when ``token`` no longer leads,
        `PlanChanged` when the plan moved on since it was read."""
        check_int("max_id", max_id, MIN_INT64, MAX_INT64)
        check_int("size", size, 1, MAX_INT64)
        check_int("first_id", first_id, MIN_INT64, MAX_INT64)
        state = yield from self._state()
        start, adopted = state.start(first_id)
        if start > MAX_INT64 or max_id < start:
            return None
        last = min(max_id, start + PLAN_CALL_PARTITIONS * size - 1)
        return (yield from self._create(token, state, start, last, size, adopted, first_id, options))

    def _create(
        self,
        token: int,
        state: PlanState,
        start: int,
        last: int,
        size: int,
        adopted: tuple[int, int] | None,
        first_id: int,
        options: dict[str, Any] | None = None,
    ) -> Steps[Created]:
        """One step of ``plan.lua``: partitions ``start .. last`` of ``size`` IDs, on the plan as
        ``state`` read it."""
        sdk, k = self.sdk, self.keys
        options_json = options_text(options, sdk.record_format)
        _, now_s, now_elk = yield from sdk._clock_args()
        now = now_elk if sdk.record_format == "elk" else str(now_s)
        bounds = ",".join(f"{lo},{min(last, lo + size - 1)}" for lo in range(start, last + 1, size))
        prev = Run.parse(state.read_run) if state.read_run else None
        merge = prev is not None and adopted is None and prev.regular and prev.size == size and prev.max_id + 1 == start
        go_keys = [k.elk.stats, *k.go_leader_lock] if k.elk is not None else []
        keys = [k.active, k.pending, k.meta, k.plan, k.plan_runs, k.plan_go_spans, k.leader_lock, *go_keys]
        args = [
            token, sdk.record_format, now, options_json, MAX_PARTITION_ID, state.read_next, last + 1,
            first_id, state.read_run, "merge" if merge else "", size,
            state.read_go, "" if adopted is None else f"{adopted[0]},{adopted[1]}", RUNS_KEPT, bounds,
        ]  # fmt: skip
        got = yield from sdk._run("plan", keys, args)
        refused = script_error(got, unchanged="nothing was created")
        if refused is not None:
            _raise_refusal(refused.code, refused.detail)
        return Created(range(int(got[1]), int(got[2]) + 1), start, last)

    def _planned_already(self, first: int, last: int, size: int) -> Steps[int | None]:
        """Where a fixed plan of IDs ``first .. last`` in partitions of ``size`` goes on from: the plan's
        next start, ``first`` when nothing is planned, or None when every one of them is planned
        already, in these partitions. Raises `ValidationError` for a plan that cannot be: inverted, a
        size below 1, IDs before the plan's first or past its next start (a hole), or IDs planned in
        other partitions (an overlap)."""
        check_int("first", first, MIN_INT64, MAX_INT64)
        check_int("last", last, MIN_INT64, MAX_INT64)
        if isinstance(size, int) and not isinstance(size, bool) and size < 1:
            raise ValidationError(f"the partition size must be at least 1, got {size}")
        check_int("size", size, 1, MAX_INT64)
        if last < first:
            raise ValidationError(f"inverted range: first {first} > last {last}")
        count = (last - first) // size + 1
        if count > MAX_PARTITION_ID:
            raise ValidationError(f"{count:,} partitions: more than partition ids reach (2^32 - 1)")
        state = yield from self._state()
        start, adopted = state.start(first)
        if adopted is not None and first <= adopted[1] and last >= adopted[0]:
            raise ValidationError(
                f"ids {max(first, adopted[0])}..{min(last, adopted[1])} were planned by elk_coordinator's leader"
            )
        if state.first_id is not None and first < state.first_id:
            raise ValidationError(
                f"ids {first}..{min(last, state.first_id - 1)} come before the plan's first id {state.first_id}: "
                "a plan grows from there"
            )
        if first > start:
            raise ValidationError(f"ids {start}..{first - 1} would be left unplanned (the plan goes on from {start})")
        if first < start:  # some are planned: in the same partitions?
            runs = yield from self._runs()
            spans = yield from self._go_spans()
            differs = _differs(runs, spans, first, last, size, min(last, start - 1))
            if differs is not None:
                raise ValidationError(f"ids {first}..{last} overlap partitions planned differently ({differs})")
        return start if last >= start else None

    def _plan_range(
        self, holder: str, token: int, first: int, last: int, size: int, *, lease_s: float
    ) -> Steps[list[Created]]:
        """The fixed plan of ``partarchive plan``: IDs ``first .. last`` in partitions of ``size``, those
        not planned yet created in calls of at most `PLAN_CALL_PARTITIONS` partitions, each one
        atomic, by ``holder`` with the lease of ``token`` (renewed between calls, for ``lease_s``); run
        twice, created once. Raises as `_planned_already`, `NotLeader` and `PlanChanged`."""
        made: list[Created] = []
        start = yield from self._planned_already(first, last, size)
        while start is not None and start <= last:
            if made and not (yield from self._lead(holder, token, lease_s)).leads:
                raise NotLeader(f"the lease ended after {len(made)} calls; the rest was not created")
            state = yield from self._state()
            at, adopted = state.start(first)
            if at != start:
                raise PlanChanged(f"the plan goes on from {at} now, not {start}; nothing more was created")
            upto = min(last, start + PLAN_CALL_PARTITIONS * size - 1)
            made.append((yield from self._create(token, state, start, upto, size, adopted, first)))
            start = upto + 1
        return made

    def _view(self) -> Steps[LeaderView]:
        """Who leads, the plan and what its check found now (`LeaderView`)."""
        batch = Batch()
        leader_reads(batch, self.keys)
        return leader_view_from(self.keys, (yield batch))

    # the check

    def _check(self, token: int, *, limit: int = CHECK_PIDS_PER_CALL) -> Steps[CheckReport | None]:
        """Check partitions against the plan and write what is wrong with ``token`` (`KeySchema.plan_holes`,
        `KeySchema.plan_overlaps`): those created since the last check, then the next ones of a walk over
        every partition id, at most ``limit`` of each; None when nothing is planned."""
        k, sdk = self.keys, self.sdk
        state = yield from self._state()
        if state.next_id is None or state.first_id is None:
            return None
        reads = Batch()
        reads.hget(k.meta, "last_pid")
        reads.lrange(k.plan_runs, 0, -1)
        reads.lrange(k.plan_go_spans, 0, -1)
        if k.elk is not None:
            reads.hget(k.elk.stats, "max_partition_id")
        got = yield reads
        top = max(_int_or_zero(got[0]), _int_or_zero(got[3]) if k.elk is not None else 0)
        plan = _Plan(state, [Run.parse(raw) for raw in got[1]], [_span(raw) for raw in got[2]])
        fresh = range(state.seen_pid + 1, min(top, state.seen_pid + limit) + 1)
        sweep_from = state.sweep_pid + 1 if state.sweep_pid < top else 1
        sweep = range(sweep_from, min(top, sweep_from + limit - 1) + 1)
        holes, overlaps = plan.tiling()
        pids = sorted(set(fresh) | set(sweep))
        for start in range(0, len(pids), CHECK_PAGE):
            page = pids[start : start + CHECK_PAGE]
            batch = Batch()
            batch.hmget(k.active, page)
            batch.execute_command("BITFIELD", k.done, *_bit_gets(page))
            batch.execute_command("BITFIELD", k.index, *_bit_gets(page))
            if k.elk is not None:
                batch.hmget(k.elk.archived, page)
            replies = yield batch
            go_archived = replies[3] if k.elk is not None else [None] * len(page)
            for i, pid in enumerate(page):
                completed = bool(replies[1][i] or replies[2][i] or go_archived[i])
                for finding in plan.check(pid, replies[0][i], completed):
                    (holes if finding.kind == "hole" else overlaps)[str(pid)] = finding
        counts = yield from sdk._counts()
        waiting = yield one().zcard(k.retries)
        failed_final = max(0, counts["failed"] - int(waiting))
        spans = ",".join(f"{r.start}-{r.stop - 1}" for r in (fresh, sweep) if r)
        entries: list[Any] = []
        for field_name, finding in [*holes.items(), *overlaps.items()]:
            entries += [finding.kind, field_name, orjson.dumps(finding.to_dict()).decode()]
        ended = bool(sweep) and sweep.stop - 1 >= top
        got = yield from sdk._run(
            "plan_check",
            [k.plan, k.plan_holes, k.plan_overlaps, k.leader_lock, *k.go_leader_lock],
            [token, state.read_seen, state.read_sweep, max(state.seen_pid, fresh.stop - 1),
             sweep.stop - 1 if sweep else state.sweep_pid, int(ended), int(time.time()), failed_final, spans,
             *entries],
        )  # fmt: skip
        refused = script_error(got)
        if refused is not None:
            _raise_refusal(refused.code, refused.detail)
        return CheckReport(fresh, sweep, list(holes.values()), list(overlaps.values()), failed_final)

    lead = operation(_lead)
    resign = operation(_resign)
    state = operation(_state)
    runs = operation(_runs)
    go_spans = operation(_go_spans)
    extend = operation(_extend)
    planned_already = operation(_planned_already)
    plan_range = operation(_plan_range)
    check = operation(_check)
    view = operation(_view)


class PlanningLayer(Planning, Blocking):
    """The leader's steps run blocking, over an `layers.active.sdk.ActiveLayer` (``partarchive plan``, the
    reads of ``workers``)."""


class AsyncPlanningLayer(Planning, Awaited):
    """The leader's steps awaited, over an `layers.active.sdk_async.AsyncActiveLayer`."""


#: Findings a view shows of each kind (their counts are whole).
FINDINGS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class LeaderView:
    """Who leads a namespace, its plan and what the leader's check found: what ``status``, ``workers``,
    ``plan`` and the dashboard show (read by `leader_reads`, in a snapshot's round trip)."""

    lead: Lead | None  # the lease (None: nobody holds it)
    go_leader: str | None  # elk_coordinator's own leader, when Go's lock names one that holds no lease of ours
    plan: PlanState
    holes: int
    overlaps: int
    findings: list[dict[str, Any]]  # a few of them, holes first

    @property
    def leader(self) -> str | None:
        """Who leads: a partarchive process, or Go's leader (``elk_coordinator:<id>``); None: nobody."""
        if self.lead is not None:
            return self.lead.holder
        return None if self.go_leader is None else f"elk_coordinator:{self.go_leader}"

    def to_dict(self) -> dict[str, Any]:
        lead = self.lead
        return {
            "leader": self.leader,
            "token": lead.token if lead is not None else 0,
            "since_ms": lead.since_ms if lead is not None else 0,
            "lease_left_ms": lead.left_ms if lead is not None else 0,
            "plan": self.plan.to_dict(),
            "holes": self.holes,
            "overlaps": self.overlaps,
            "findings": self.findings,
        }


def leader_reads(pipe: Any, keys: KeySchema) -> None:
    """Add the reads of a `LeaderView` to a pipeline (or `Batch`); `leader_view_from` reads their replies
    (`LEADER_READS` of them)."""
    pipe.hgetall(keys.leader_lock)
    pipe.pttl(keys.leader_lock)
    pipe.hgetall(keys.plan)
    pipe.hlen(keys.plan_holes)
    pipe.hlen(keys.plan_overlaps)
    pipe.hscan(keys.plan_holes, 0, count=FINDINGS_SHOWN)
    pipe.hscan(keys.plan_overlaps, 0, count=FINDINGS_SHOWN)
    go_lock = keys.go_leader_lock
    if go_lock:
        pipe.get(go_lock[0])
    else:
        pipe.exists(keys.leader_lock)  # a place holder: as many replies whatever the binding


LEADER_READS = 8


def leader_view_from(keys: KeySchema, replies: Any) -> LeaderView:
    lock, left, plan, holes, overlaps, some_holes, some_overlaps, go = replies[:LEADER_READS]
    lead = lead_from(lock, left)
    go_leader = as_text(go) if keys.go_leader_lock and go is not None else None
    if lead is not None and go_leader == lead.holder:
        go_leader = None
    findings = []
    for _, entries in (some_holes, some_overlaps):
        for value in list(entries.values())[:FINDINGS_SHOWN]:
            try:
                findings.append(orjson.loads(value))
            except orjson.JSONDecodeError:
                continue
    return LeaderView(lead, go_leader, plan_state_from(keys, plan, None, None), int(holes), int(overlaps), findings)


def plan_state_from(k: KeySchema, raw: Any, last_run: Any, go_last: Any) -> PlanState:
    """The plan as `Planning.state` reads it: the plan hash (``HGETALL``), the last runs entry and Go's
    ``last_allocated_id`` (None when not bound), as read."""
    fields = {as_text(name): as_text(value) for name, value in (raw or {}).items()}

    def number(name: str, default: int | None = 0, lo: int = 0, hi: int = MAX_INT64) -> Any:
        text = fields.get(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise CorruptMetadata(f"{k.plan} field {name} is not an integer: {text[:40]!r}") from None
        if not lo <= value <= hi:
            raise CorruptMetadata(f"{k.plan} field {name} is {value}, outside {lo}..{hi}")
        return value

    go_text = None if go_last is None else as_text(go_last)
    return PlanState(
        first_id=number("first_id", None, MIN_INT64),
        next_id=number("next_id", None, MIN_INT64, MAX_INT64 + 1),
        partitions=number("partitions"),
        runs=number("runs"),
        token=number("token"),
        seen_pid=number("seen_pid"),
        sweep_pid=number("sweep_pid"),
        passes=number("passes"),
        folded=_intervals(k, fields.get("folded", "")),
        checked_at=number("checked_at"),
        failed_final=number("failed_final"),
        go_last_id=None if go_text == fields.get("go_last_allocated") else _go_id(go_text),
        read_next=fields.get("next_id", ""),
        read_run="" if last_run is None else as_text(last_run),
        read_go=go_text or "",
        read_seen=fields.get("seen_pid", ""),
        read_sweep=fields.get("sweep_pid", ""),
    )


def _intervals(k: KeySchema, text: str) -> tuple[tuple[int, int], ...]:
    """``lo-hi,lo-hi`` as intervals."""
    try:
        return tuple((int(a), int(b)) for a, b in (part.split("-") for part in text.split(",") if part))
    except ValueError:
        raise CorruptMetadata(f"{k.plan} field folded is not pid intervals: {text[:40]!r}") from None


def lead_from(raw: Any, left_ms: Any) -> Lead | None:
    """The lease as the lock hash holds it (``HGETALL``) and its ``PTTL``; None when nobody leads."""
    fields = {as_text(name): as_text(value) for name, value in (raw or {}).items()}
    holder = fields.get("holder")
    if not holder:
        return None
    token, since = fields.get("token", ""), fields.get("since", "")
    return Lead(False, int(token) if token.isdigit() else 0, holder, int(since) if since.isdigit() else 0,
                left_ms=max(0, int(left_ms or 0)))  # fmt: skip


def _go_id(text: str | None) -> int | None:
    """Go's ``last_allocated_id`` as the highest ID Go's leader planned: an integer as stored; one Lua
    wrote as %.14g (past 10^14: rounded) read as that number, rounded up to a whole one, so a plan
    goes on after it; None when absent or not a number (Go's leader reads that as 0)."""
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return int(value) + (0 if value == int(value) else 1)


def _int_or_zero(raw: Any) -> int:
    try:
        return int(as_text(raw)) if raw is not None else 0
    except ValueError:
        return 0


def _bit_gets(pids: list[int]) -> list[Any]:
    args: list[Any] = []
    for pid in pids:
        args += ["GET", "u1", pid]
    return args


def _ids_of(raw: Any) -> tuple[int, int] | None:
    """The IDs of an active record, or None for one no reader can read."""
    try:
        part = parse_active(raw)
    except (DecodeError, ValidationError):
        return None
    return part.min_id, part.max_id


class _Plan:
    """The plan as the check reads it: the runs still listed, Go's spans, the pids of the folded runs."""

    def __init__(self, state: PlanState, runs: list[Run], spans: list[tuple[int, int]]) -> None:
        assert state.first_id is not None and state.next_id is not None
        self.first_id, self.next_id = state.first_id, state.next_id
        self.runs = runs
        self.spans = spans
        self.folded = state.folded
        self._firsts = [run.first_pid for run in runs]
        self._run_ends = [run.max_id for run in runs]
        self._span_ends = [hi for _, hi in spans]

    def tiling(self) -> tuple[dict[str, Finding], dict[str, Finding]]:
        """The runs listed and Go's spans after them follow on, up to the plan's next start (plan.lua's promise)."""
        if not self.runs:
            return {}, {}
        pieces = sorted([(r.min_id, r.max_id, f"run:{r.first_pid}", r.first_pid) for r in self.runs]
                        + [(lo, hi, f"go:{lo}", 0) for lo, hi in self.spans if lo > self.runs[0].min_id])  # fmt: skip
        pieces.append((self.next_id, self.next_id, "next", 0))
        holes: dict[str, Finding] = {}
        overlaps: dict[str, Finding] = {}
        for (_, a_hi, _, _), (b_lo, _, name, pid) in itertools.pairwise(pieces):
            why = "the plan's runs do not follow on"
            if b_lo > a_hi + 1:
                holes[name] = Finding("hole", a_hi + 1, b_lo - 1, pid, why)
            elif b_lo <= a_hi:
                overlaps[name] = Finding("overlap", b_lo, a_hi, pid, why)
        return holes, overlaps

    def check(self, pid: int, raw: Any, completed: bool) -> list[Finding]:
        """A partition against the plan: the hole and the overlap found at it, if any."""
        at = bisect.bisect_right(self._firsts, pid) - 1
        if at >= 0 and self.runs[at].last_pid >= pid:
            return _check_planned(pid, self.runs[at], raw, completed)
        if any(lo <= pid <= hi for lo, hi in self.folded):  # planned before the runs listed: its IDs unknown here
            if raw is None and not completed:
                return [Finding("hole", None, None, pid, "neither active nor completed: nobody processes it")]
            return []
        if raw is None:  # created outside the plan and gone: not the plan's
            return []
        ids = _ids_of(raw)
        met = None if ids is None else self.planned_over(ids[0], ids[1])
        if ids is None or met is None:
            return []
        lo, hi, owner = met
        where = f"planned partition {owner}" if owner else "IDs planned before the runs listed"
        return [Finding("overlap", lo, hi, pid, f"created outside the plan over {where}")]

    def planned_over(self, lo: int, hi: int) -> tuple[int, int, int] | None:
        """The first stretch of IDs ``lo .. hi`` that the plan holds (not Go's spans), and the planned
        partition holding its first ID (0: one folded); None when they meet none."""
        lo, hi = max(lo, self.first_id), min(hi, self.next_id - 1)
        while lo <= hi:
            at = bisect.bisect_right(self._span_ends, lo - 1)
            if at < len(self.spans) and self.spans[at][0] <= lo:  # in Go's span: go on after it
                lo = self.spans[at][1] + 1
                continue
            end = min(hi, self.spans[at][0] - 1) if at < len(self.spans) else hi
            found = bisect.bisect_right(self._run_ends, lo - 1)
            owner = self.runs[found].holding(lo)[0] if found < len(self.runs) and self.runs[found].min_id <= lo else 0
            return lo, end, owner
        return None


def _check_planned(pid: int, run: Run, raw: Any, completed: bool) -> list[Finding]:
    """A planned partition against its plan: the hole and the overlap found at it, if any."""
    lo, hi = run.partition(pid)
    if raw is None:
        return [] if completed else [Finding("hole", lo, hi, pid, "neither active nor completed: nobody processes it")]
    ids = _ids_of(raw)
    if ids is None or ids == (lo, hi):
        return []
    found = []
    detail = f"holds {ids[0]}..{ids[1]}, planned {lo}..{hi}"
    if ids[0] > lo or ids[1] < hi:  # planned IDs it leaves out (the first stretch of them)
        gap = (lo, min(hi, ids[0] - 1)) if ids[0] > lo else (max(lo, ids[1] + 1), hi)
        found.append(Finding("hole", gap[0], gap[1], pid, detail))
    if ids[0] < lo or ids[1] > hi:  # IDs planned for other partitions it holds (the first stretch of them)
        extra = (ids[0], min(ids[1], lo - 1)) if ids[0] < lo else (max(ids[0], hi + 1), ids[1])
        found.append(Finding("overlap", extra[0], extra[1], pid, detail))
    return found


def _differs(
    runs: list[Run], spans: list[tuple[int, int]], first: int, last: int, size: int, upto: int
) -> str | None:
    """Where the partitions of a fixed plan (IDs ``first .. last`` in partitions of ``size``) differ from
    the planned ones over IDs ``first .. upto`` (planned already), or None where they are the same."""
    for lo, hi in spans:
        if lo <= upto and hi >= first:
            return f"ids {max(lo, first)}..{min(hi, upto)} were planned by elk_coordinator's leader"
    if not runs or first < runs[0].min_id:
        listed = f"from {runs[0].min_id} on" if runs else "no more"
        return f"the runs before the {RUNS_KEPT:,} latest are folded: their partitions are listed {listed}"
    at = bisect.bisect_right([run.max_id for run in runs], first - 1)
    for run in runs[at:]:
        if run.min_id > upto:
            break
        lo, hi = max(first, run.min_id), min(upto, run.max_id)
        for id_ in (lo, hi):  # the partitions that hold each end of the span, planned and asked for
            pid, p_lo, p_hi = run.holding(id_)
            a = first + (id_ - first) // size * size
            if (p_lo, p_hi) != (a, min(a + size - 1, last)):
                return f"partition {pid} holds {p_lo}..{p_hi}"
        if run.size != size and run.holding(lo)[0] != run.holding(hi)[0]:  # boundaries inside differ
            pid, p_lo, p_hi = run.holding(lo)
            return f"partition {pid} holds {p_lo}..{p_hi}"
    return None


def _raise_refusal(code: str, detail: str) -> None:
    if code == "fenced":
        raise NotLeader(f"this process no longer leads (now: {detail}); nothing was written")
    if code == "moved":
        raise PlanChanged(f"the plan moved on since it was read (now: {detail or 'none'}); nothing was written")
    if code in ("pid_range", "exists"):
        raise creation_refused(code, detail)
    raise ValidationError(f"the plan refused: {code} {detail}")

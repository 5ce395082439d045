"""The leader's steps (`layers.active.planning`) and the runtime's leader (`archiver.runtime.leader`) in one
process, on the real engine and the local cluster: one lease at a time with growing fencing tokens, a
stale token's writes refused with nothing written, contiguous runs, the fixed plan (once, in calls of
at most a million partitions, its bad inputs), the check's holes and overlaps and the failures counted
for good, a property test of random leader changes, and a planner whose source grows while the
runtime drains it (both flavours). Real processes (racing, SIGSTOP, kill -9): `tests/test_leader_processes.py`;
beside a Go deployment: `tests/test_leader_elk.py`."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from archiver.runtime import LeaderSettings, RetryPolicy
from archiver.status import collect_status
from codec import PartitionInfo, ValidationError
from codec.stored import parse_active
from layers import ActiveLayer, KeySchema, NotLeader
from layers.active import planning as planning_module
from layers.active.planning import PlanningLayer, Run
from tests.conftest import delete_namespace
from tests.helpers import scraped, wait_for
from tests.test_runtime import FLAVOURS, Running


@pytest.fixture(params=["real", "cluster"])
def engine(request: pytest.FixtureRequest) -> redis.Redis:
    client: redis.Redis = request.getfixturevalue(f"{request.param}_redis")
    return client


def plans(client: redis.Redis, namespace: str | KeySchema) -> PlanningLayer:
    return PlanningLayer(ActiveLayer(client, namespace))


def layout(client: redis.Redis, keys: KeySchema) -> dict[str, Any]:
    """What the plan and the active layer hold, to see that a refused write changed nothing."""
    return {
        "plan": client.hgetall(keys.plan),
        "runs": client.lrange(keys.plan_runs, 0, -1),
        "go": client.lrange(keys.plan_go_spans, 0, -1),
        "active": client.hgetall(keys.active),
        "pending": client.zrange(keys.pending, 0, -1),
        "meta": client.hgetall(keys.meta),
        "holes": client.hgetall(keys.plan_holes),
        "overlaps": client.hgetall(keys.plan_overlaps),
    }


def ranges(client: redis.Redis, keys: KeySchema) -> dict[int, tuple[int, int]]:
    """Every active partition's IDs, by pid."""
    return {int(pid): (p.min_id, p.max_id) for pid, raw in client.hgetall(keys.active).items()
            for p in [parse_active(raw)]}  # fmt: skip


def assert_tiles(spans: list[tuple[int, int]], first: int, last: int) -> None:
    """``spans`` cover ``first .. last``, each ID once."""
    spans = sorted(spans)
    assert spans and spans[0][0] == first and spans[-1][1] == last, (spans[:3], spans[-3:])
    for (_, a_hi), (b_lo, _) in itertools.pairwise(spans):
        assert b_lo == a_hi + 1, (a_hi, b_lo)


def test_one_holder_leads_at_a_time_with_growing_tokens(engine: redis.Redis, namespace: str) -> None:
    """Three holders race for a short lease; a holder that stops renewing loses it to another, whose
    token is the next one."""
    p = plans(engine, namespace)
    seen: list[tuple[float, str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def candidate(name: str, drops_after: int) -> None:
        token, renewals = 0, 0
        while not stop.is_set():
            got = p.lead(name, token, 0.3)
            if got.leads:
                with lock:
                    seen.append((time.monotonic(), name, got.token))
                token, renewals = got.token, renewals + 1
                if renewals % drops_after == 0:  # stalls past its lease
                    token = 0
                    time.sleep(0.45)
            time.sleep(0.02)

    threads = [threading.Thread(target=candidate, args=(name, n)) for name, n in (("a", 5), ("b", 7), ("c", 11))]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join()
    holders: dict[int, set[str]] = {}
    for _, name, token in seen:
        holders.setdefault(token, set()).add(name)
    assert len(holders) >= 4, "the lease changed hands"
    assert all(len(names) == 1 for names in holders.values())  # a token is one holder's
    tokens = [token for _, _, token in sorted(seen)]
    assert tokens == sorted(tokens)  # in time, tokens only grow: one lease at a time
    assert sorted(holders) == list(range(1, max(holders) + 1))


def test_a_stale_token_writes_nothing(engine: redis.Redis, namespace: str) -> None:
    p = plans(engine, namespace)
    keys = p.keys
    old = p.lead("a", 0, 0.2)
    assert old.leads and old.token == 1
    assert p.extend(old.token, 3000, 1000) is not None
    time.sleep(0.3)  # a's lease ends (it paused past it)
    new = p.lead("b", 0, 30)
    assert new.leads and new.token == 2 and p.lead("a", old.token, 30).holder == "b"
    before = layout(engine, keys)
    with pytest.raises(NotLeader, match="no longer leads"):
        p.extend(old.token, 9000, 1000)
    with pytest.raises(NotLeader):
        p.check(old.token)
    with pytest.raises(NotLeader):
        p.plan_range("a", old.token, 3001, 6000, 1000, lease_s=30)
    assert layout(engine, keys) == before  # nothing written
    made = p.extend(new.token, 9000, 1000)
    assert made is not None and list(made.pids) == [4, 5, 6, 7, 8, 9] and made.min_id == 3001
    assert p.resign("a", old.token) is False and p.resign("b", new.token) is True
    assert p.lead("a", 0, 30).token == 3


def test_runs_follow_on_and_merge(engine: redis.Redis, namespace: str) -> None:
    p = plans(engine, namespace)
    token = p.lead("a", 0, 30).token
    assert p.extend(token, 0, 100, first_id=1) is None  # nothing new: nothing created
    p.extend(token, 1000, 100, first_id=-99)
    p.extend(token, 2000, 100)  # goes on in the same size: one entry
    p.extend(token, 2050, 100)  # a short partition at the end, still the same entry
    p.extend(token, 2300, 100)  # after a short partition: an entry of its own
    assert p.runs() == [Run(1, 22, -99, 2050, 100), Run(23, 25, 2051, 2300, 100)]
    state = p.state()
    assert (state.first_id, state.next_id, state.partitions, state.runs) == (-99, 2301, 25, 2)
    assert_tiles(list(ranges(engine, p.keys).values()), -99, 2300)
    big = p.extend(token, 2**63 - 1, 2**62)  # 64-bit IDs, exactly
    assert big is not None and big.max_id == 2**63 - 1 and p.state().next_id == 2**63
    assert p.extend(token, 2**63 - 1, 10) is None  # every ID planned: nothing more


def test_a_fixed_plan_is_created_once_in_calls(
    engine: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planning_module, "PLAN_CALL_PARTITIONS", 7)
    p = plans(engine, namespace)
    token = p.lead("plan", 0, 30).token
    made = p.plan_range("plan", token, 1, 99, 3, lease_s=30)
    assert [len(run.pids) for run in made] == [7, 7, 7, 7, 5]  # 33 partitions in calls of at most 7
    assert p.runs() == [Run(1, 33, 1, 99, 3)]
    before = layout(engine, p.keys)
    assert p.plan_range("plan", token, 1, 99, 3, lease_s=30) == []  # run twice: created once
    assert p.plan_range("plan", token, 31, 60, 3, lease_s=30) == []  # a part of it, the same partitions
    assert layout(engine, p.keys) == before
    more = p.plan_range("plan", token, 1, 130, 3, lease_s=30)  # the first 99 planned: the rest created
    assert [(r.min_id, r.max_id) for r in more] == [(100, 120), (121, 130)] and p.state().next_id == 131
    assert p.runs() == [Run(1, 44, 1, 130, 3)]
    with pytest.raises(ValidationError, match=r"planned differently \(partition 44 holds 130..130\)"):
        p.plan_range("plan", token, 1, 140, 3, lease_s=30)  # its last partition was short: not 130..132


def test_a_fixed_plan_refuses_what_cannot_be(real_redis: redis.Redis, namespace: str) -> None:
    p = plans(real_redis, namespace)
    token = p.lead("plan", 0, 30).token
    p.plan_range("plan", token, 1, 100, 10, lease_s=30)
    before = layout(real_redis, p.keys)
    for first, last, size, says in (
        (5, 3, 1, "inverted range"),
        (1, 10, 0, "at least 1"),
        (201, 300, 10, "ids 101..200 would be left unplanned"),
        (-9, 50, 10, "come before the plan's first id 1"),
        (1, 100, 20, "planned differently (partition 1 holds 1..10)"),
        (5, 100, 10, "planned differently (partition 1 holds 1..10)"),
        (91, 95, 10, "planned differently (partition 10 holds 91..100)"),
    ):
        with pytest.raises(ValidationError, match=says.replace("(", r"\(").replace(")", r"\)")):
            p.planned_already(first, last, size)
    assert layout(real_redis, p.keys) == before


def test_the_check_finds_holes_and_overlaps_and_counts_failures(real_redis: redis.Redis, namespace: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    p = PlanningLayer(sdk)
    keys = sdk.keys
    token = p.lead("a", 0, 30).token
    p.extend(token, 10_000, 1000)
    done = sdk.claim_and_start("w")
    assert done is not None
    sdk.complete(done.partition_id, "w")  # completed: not a hole
    report = p.check(token)
    assert report is not None and report.holes == report.overlaps == [] and list(report.fresh) == list(range(1, 11))
    real_redis.hdel(keys.active, "4")  # gone without being completed: its IDs are processed by nobody
    sdk.create_partitions(8500, 9499, 1000)  # created outside the plan over planned IDs
    rec = real_redis.hget(keys.active, "6")
    assert rec is not None
    real_redis.hset(keys.active, "6", rec.replace(b'"max_id":6000', b'"max_id":6500'))  # holds more than planned
    failing = sdk.claim_and_start("w")
    assert failing is not None
    sdk.fail_and_claim(failing.partition_id, "w", "no", retry=RetryPolicy(1), claim=False)  # its last attempt
    fresh = p.check(token)  # the partition created since: the overlap at once
    assert fresh is not None and list(fresh.fresh) == [11] and fresh.failed_final == 1
    assert {(f.partition_id, f.min_id, f.max_id) for f in fresh.overlaps} == {(11, 8500, 9499)}
    swept = p.check(token)  # the walk over every partition comes round: what changed in those checked before
    assert swept is not None and list(swept.sweep) == list(range(1, 12))
    assert {(f.partition_id, f.min_id, f.max_id) for f in swept.holes} == {(4, 3001, 4000)}
    assert {(f.partition_id, f.min_id, f.max_id) for f in swept.overlaps} == {(11, 8500, 9499), (6, 6001, 6500)}
    assert real_redis.hlen(keys.plan_holes) == 1 and real_redis.hlen(keys.plan_overlaps) == 2
    status = collect_status(real_redis, _config(namespace))
    assert status["leader"]["holes"] == 1 and status["leader"]["overlaps"] == 2 and status["leader"]["token"] == token
    from archiver.cli.status import format_status

    assert "1 HOLES, 2 OVERLAPS" in format_status(status) and "1 failed for good" in format_status(status)
    gauges = scraped(real_redis, keys)
    assert (gauges["partarchive_plan_holes"], gauges["partarchive_plan_overlaps"]) == (1, 2)
    assert gauges["partarchive_failed_for_good"] == 1 and gauges["partarchive_leader_token"] == token
    # mended: the foreign partition gone, the record as planned again; the walk comes round and clears them
    real_redis.hdel(keys.active, "11")
    real_redis.hset(keys.active, "6", rec)
    for _ in range(3):
        p.check(token)
    assert real_redis.hlen(keys.plan_overlaps) == 0 and real_redis.hlen(keys.plan_holes) == 1  # pid 4 stays lost
    assert orjson.loads(real_redis.hget(keys.plan_holes, "4"))["detail"].startswith("neither active nor completed")


def test_old_runs_are_folded_and_still_checked(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planning_module, "RUNS_KEPT", 3)
    sdk = ActiveLayer(real_redis, namespace)
    p = PlanningLayer(sdk)
    token = p.lead("a", 0, 30).token
    for top in (15, 30, 45, 60, 75, 90):  # each run ends in a short partition: one entry each
        p.extend(token, top, 10)
    state = p.state()
    assert (state.runs, state.partitions, state.folded) == (6, 12, ((1, 6),))
    assert p.runs() == [Run(7, 8, 46, 60, 10), Run(9, 10, 61, 75, 10), Run(11, 12, 76, 90, 10)]
    assert p.planned_already(46, 60, 10) is None  # listed: compared, the same
    with pytest.raises(ValidationError, match="folded"):
        p.planned_already(1, 15, 10)
    real_redis.hdel(sdk.keys.active, "2")  # a folded run's partition gone
    sdk.create_partitions(3, 3, 1)  # and one created over a folded run's IDs
    p.check(token)
    report = p.check(token)
    assert report is not None and [(f.partition_id, f.min_id) for f in report.holes] == [(2, None)]
    assert [(f.partition_id, f.min_id, f.max_id) for f in report.overlaps] == [(13, 3, 3)]
    assert "before the runs listed" in report.overlaps[0].detail


def _config(namespace: str) -> Any:
    from archiver.config import Config

    return Config(namespace=namespace)


# random leader changes


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    ops = st.one_of(
        st.tuples(st.just("lead"), st.integers(0, 2)),
        st.tuples(st.just("expire")),
        st.tuples(st.just("plan"), st.integers(0, 2), st.integers(-3, 40), st.sampled_from([1, 7, 100])),
        st.tuples(st.just("fixed"), st.integers(0, 2), st.integers(0, 60), st.sampled_from([1, 7, 100])),
        st.tuples(st.just("check"), st.integers(0, 2)),
    )
    return draw(st.lists(ops, min_size=1, max_size=25))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(), first=st.integers(-(2**40), 2**40))
def test_ranges_never_overlap_nor_leave_a_hole_under_random_leader_changes(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch, history: list[tuple[Any, ...]], first: int
) -> None:
    monkeypatch.setattr(planning_module, "RUNS_KEPT", 4)  # older runs folded as the plan goes on
    namespace = f"h{uuid.uuid4().hex[:10]}"
    p = plans(real_redis, namespace)
    keys = p.keys
    tokens = [0, 0, 0]  # each holder's token, as it last knew it (stale ones included)
    current = 0  # the lock's token now (0: nobody holds it)
    try:
        for op in history:
            if op[0] == "lead":
                got = p.lead(f"h{op[1]}", tokens[op[1]], 30)
                if got.leads:
                    tokens[op[1]] = current = got.token
                else:
                    assert got.token == current
            elif op[0] == "expire":
                real_redis.delete(keys.leader_lock)  # the lease ends
                current = 0
            else:
                token = tokens[op[1]]
                before = layout(real_redis, keys)
                try:
                    if op[0] == "plan":
                        state = p.state()
                        start = first if state.next_id is None else state.next_id
                        wrote: Any = p.extend(token, start + op[2] * op[3] - 1, op[3], first_id=first)
                    elif op[0] == "fixed":
                        wrote = p.plan_range(f"h{op[1]}", token, first, first + op[2] * op[3], op[3], lease_s=30)
                    else:
                        wrote = p.check(token)
                    if wrote:  # (nothing new to write: nothing was)
                        assert token and token == current  # only the lease's holder writes
                except NotLeader:
                    assert token != current or not token
                    assert layout(real_redis, keys) == before  # and a refused write wrote nothing
                except ValidationError as exc:  # a fixed plan in other partitions, or folded ones: refused
                    assert op[0] == "fixed" and "planned differently" in str(exc)
                    assert layout(real_redis, keys) == before
            state = p.state()
            runs = p.runs()
            if state.next_id is None:
                assert runs == [] and real_redis.hlen(keys.active) == 0
                continue
            assert state.first_id == first and runs[-1].max_id == state.next_id - 1 and len(runs) <= 4
            assert_tiles([(r.min_id, r.max_id) for r in runs], runs[0].min_id, state.next_id - 1)
            folded = [pid for lo, hi in state.folded for pid in range(lo, hi + 1)]
            assert folded == list(range(1, runs[0].first_pid))  # the pids of the runs no longer listed
            active = ranges(real_redis, keys)
            assert len(active) == state.partitions == len(folded) + sum(r.last_pid - r.first_pid + 1 for r in runs)
            assert_tiles(list(active.values()), first, state.next_id - 1)
            for run in runs:
                for pid in (run.first_pid, run.last_pid):
                    assert active[pid] == run.partition(pid)
        if current:
            report = p.check(current)
            assert (report is None) == (p.state().next_id is None)
            assert report is None or report.holes == report.overlaps == []
    finally:
        delete_namespace(real_redis, namespace)


# the runtime's leader


class GrowingSource:
    """A planner over a source whose highest ID grows (``top``)."""

    def __init__(self, size: int = 50) -> None:
        self.top = 0
        self.size = size
        self.asked = 0

    def partition_size(self) -> int:
        return self.size

    def next_max_id(self, start_id: int, size: int) -> int:
        self.asked += 1
        return min(self.top, start_id + size - 1)


class AsyncGrowingSource(GrowingSource):
    async def partition_size(self) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return self.size

    async def next_max_id(self, start_id: int, size: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().next_max_id(start_id, size)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_leader_keeps_the_source_planned_as_it_grows(engine: redis.Redis, namespace: str, flavour: str) -> None:
    """Two runtimes with a planner: one leads; every ID the source holds is processed once, and no more
    than ``multiple`` x the windows wait ahead."""
    source = AsyncGrowingSource() if flavour == "asyncio" else GrowingSource()
    seen: list[tuple[int, int]] = []
    most_pending = [0]
    sdk = ActiveLayer(engine, namespace)

    def body(part: PartitionInfo, lease: Any) -> None:
        seen.append((part.min_id, part.max_id))
        most_pending[0] = max(most_pending[0], sdk.counts()["pending"])
        time.sleep(0.002)

    leader = LeaderSettings(lease_s=2, interval_s=0.05, multiple=2)
    runs = [Running(flavour, engine, namespace, body, window=3, planner=source, leader=leader).start()
            for _ in range(2)]  # fmt: skip
    try:
        for _ in range(25):
            source.top += 173
            time.sleep(0.04)
        wait_for(lambda: sum(hi - lo + 1 for lo, hi in seen) >= source.top, 30, "every ID processed")
        leaders = [run.worker.leader for run in runs]
        assert sum(duty.leads for duty in leaders) == 1
        labels = {"namespace": namespace}
        assert REGISTRY.get_sample_value("partarchive_runtime_leader", labels) == 1
        assert (REGISTRY.get_sample_value("partarchive_runtime_planned_partitions_total", labels) or 0) > 0
    finally:
        for run in runs:
            run.stop()
    assert_tiles(seen, 1, source.top)  # each ID once
    assert most_pending[0] <= 2 * 3 * 2  # multiple x the two processes' windows
    assert plans(engine, namespace).state().next_id == source.top + 1
    assert plans(engine, namespace).view().lead is None  # the leader gave its lease back at its stop


def test_a_planner_that_raises_is_asked_again(real_redis: redis.Redis, namespace: str) -> None:
    class Flaky(GrowingSource):
        def next_max_id(self, start_id: int, size: int) -> int:
            self.asked += 1
            if self.asked <= 3:
                raise ConnectionError("the source is down")
            return min(self.top, start_id + size - 1)

    source = Flaky()
    source.top = 120
    seen: list[tuple[int, int]] = []
    run = Running("threads", real_redis, namespace, lambda p, lease: seen.append((p.min_id, p.max_id)), window=2,
                  planner=source, leader=LeaderSettings(lease_s=2, interval_s=0.05)).start()  # fmt: skip
    try:
        wait_for(lambda: sum(hi - lo + 1 for lo, hi in seen) >= 120, 20, "the IDs processed once it answers")
    finally:
        run.stop()
    assert source.asked > 3
    assert_tiles(seen, 1, 120)


def test_a_leader_needs_go_s_namespace_in_a_bound_namespace(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema("elk", elk_prefix=f"{namespace}:")
    with pytest.raises(ValidationError, match="needs Go's namespace"):
        Running("threads", real_redis, keys, lambda p, lease: None, planner=GrowingSource())
    with pytest.raises(ValidationError, match="a planner has partition_size"):
        Running("threads", real_redis, namespace, lambda p, lease: None, planner=object())

"""The worker runtime in one process (`Worker` on threads, `AsyncWorker` on asyncio), on the real engine
and the local cluster: one round trip a partition, every completion once, retries and the circuit
breaker, a lease lost while `process` runs, the stop and its hand-back, presence; and the SDK's
finish-and-claim keeping what `complete`, `fail`, `claim` and `start` keep (in a namespace bound to
a Go deployment too). Real processes, signals and kill -9: `tests/test_runtime_processes.py`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from archiver.config import Config
from archiver.engine import async_twin
from archiver.runtime import AsyncWorker, Lease, RetryPolicy, RunReport, Worker
from archiver.runtime.core import error_line
from codec import PartitionInfo, Status
from codec.elk import decode_elk
from layers import ActiveLayer, InvalidTransition, KeySchema, NotOwner
from layers.control.switch import ArchivalSwitch
from layers.plumbing.lua_sources import script_source
from tests.elk_fixtures import delete_prefix
from tests.go_worker import GoWorker
from tests.helpers import commands_sent, wait_for

FLAVOURS = ["threads", "asyncio"]
Body = Callable[[PartitionInfo, Lease], Any]


class Running:
    """A runtime run in the background: `Worker` on its threads, or `AsyncWorker` on an event loop of its
    own thread. ``body(partition, lease)`` is the work, blocking; on asyncio it is awaited in a thread
    unless ``awaited`` gives the coroutine function itself."""

    def __init__(
        self, flavour: str, client: redis.Redis, namespace: str | KeySchema, body: Body, *,
        awaited: Callable[..., Any] | None = None, **settings: Any,
    ) -> None:  # fmt: skip
        self.flavour, self.client, self.body = flavour, client, body
        self.report: RunReport | None = None
        self.error: BaseException | None = None
        settings.setdefault("heartbeat_s", 0.2)
        settings.setdefault("breaker_failures", 0)
        if flavour == "threads":
            self.worker: Any = Worker(client, namespace, body, **settings)
        else:
            self.twin = async_twin(client)

            async def process(part: PartitionInfo, lease: Lease) -> Any:
                return await asyncio.to_thread(body, part, lease)

            self.worker = AsyncWorker(self.twin, namespace, awaited or process, **settings)
        self.thread: threading.Thread | None = None

    def start(self, *, until_empty: bool = False) -> Running:
        def run() -> None:
            try:
                if self.flavour == "threads":
                    self.report = self.worker.run(until_empty=until_empty, install_signals=False)
                else:
                    self.report = asyncio.run(self._awaited(until_empty))
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    async def _awaited(self, until_empty: bool) -> RunReport:
        try:
            report: RunReport = await self.worker.run(until_empty=until_empty, install_signals=False)
            return report
        finally:
            await self.twin.aclose()

    def join(self, timeout: float = 60) -> RunReport:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        if self.error is not None:
            raise self.error
        assert self.report is not None
        return self.report

    def stop(self, *, now: bool = False, timeout: float = 60) -> RunReport:
        self.worker.stop(now=now)
        return self.join(timeout)


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["real", "cluster"])
def engine(request: pytest.FixtureRequest) -> redis.Redis:
    client: redis.Redis = request.getfixturevalue(f"{request.param}_redis")
    return client


def _queued_pids(client: redis.Redis, keys: KeySchema) -> list[int]:
    """The pids of the archive queue's entries, one per entry."""
    import orjson

    return [orjson.loads(fields[b"p"])["partition_id"] for _, fields in client.xrange(keys.queue)]


# the SDK's finish-and-claim


def test_a_partition_costs_one_round_trip_in_steady_state(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 2000, 10)
    part = sdk.claim_and_start("w1")  # the scripts loaded, the clock synced
    assert part is not None and part.status is Status.RUNNING
    sent = commands_sent(monkeypatch)
    done = 0
    while part is not None:
        finished = sdk.complete_and_claim(part.partition_id, "w1")
        assert finished.outcome == "completed" and finished.entry_id
        part = finished.next
        done += 1
    assert done == 200
    assert Counter(sent) == Counter({"FCALL": 200}), Counter(sent)  # one call a partition, nothing else
    assert sorted(_queued_pids(real_redis, sdk.keys)) == list(range(1, 201))
    assert sdk.counts() == {"pending": 0, "claimed": 0, "running": 0, "failed": 0}


def test_finish_and_claim_keeps_what_the_separate_steps_keep(engine: redis.Redis, namespace: str) -> None:
    sdk = ActiveLayer(engine, namespace)
    keys = sdk.keys
    sdk.create_partitions(1, 100, 10)
    first = sdk.claim_and_start("w1")
    assert first is not None and (first.partition_id, first.status) == (1, Status.RUNNING)
    # another worker's partition: refused, nothing written and nothing claimed
    other = sdk.claim_and_start("w2")
    assert other is not None
    def state() -> tuple[Any, ...]:  # what the keys hold (a DUMP's order may change without a write)
        return (engine.hgetall(keys.active), engine.zrange(keys.pending, 0, -1, withscores=True),
                engine.zrange(keys.leases, 0, -1, withscores=True), engine.xlen(keys.queue))  # fmt: skip

    before = state()
    with pytest.raises(NotOwner):
        sdk.complete_and_claim(other.partition_id, "w1")
    assert state() == before
    # completed once: a second finish of the same partition says so, and queues nothing more
    done = sdk.complete_and_claim(first.partition_id, "w1")
    assert done.outcome == "completed" and done.next is not None and done.next.partition_id == 3
    assert sdk.complete_and_claim(first.partition_id, "w1", claim=False).outcome == "already"
    assert engine.xlen(keys.queue) == 1 and sdk.is_completed(1)
    # paused: the completion is held in the active hash as complete() holds it, the next still claimed
    ArchivalSwitch(engine, keys).pause("test")
    held = sdk.complete_and_claim(3, "w1")
    assert held.outcome == "held" and held.next is not None and engine.xlen(keys.queue) == 1
    assert sdk.get(3).status is Status.COMPLETED  # type: ignore[union-attr]
    ArchivalSwitch(engine, keys).resume()
    # a failure: failed with its error, sent back to pending by a later beat after its back-off
    failed = sdk.fail_and_claim(held.next.partition_id, "w1", "boom", retry=RetryPolicy(2, 0.05, 0.05, jitter=False))
    assert failed.outcome == "failed" and failed.attempts == 1 and failed.retry_at is not None
    assert failed.record is not None and failed.record.error == "boom" and failed.next is not None
    time.sleep(0.1)
    beat = sdk.beat("w1", [failed.next.partition_id])
    assert beat.retried == 1 and beat.renewed == [failed.next.partition_id] and beat.lost == {}
    assert sdk.get(4).status is Status.PENDING  # type: ignore[union-attr]
    # its second attempt is its last: it stays failed, its attempts counted
    again = sdk.claim_and_start("w3")
    assert again is not None and again.partition_id == 4
    last = sdk.fail_and_claim(4, "w3", "boom again", retry=RetryPolicy(2, 0.05, 0.05), claim=False)
    assert (last.attempts, last.retry_at, last.next) == (2, None, None)
    assert sdk.counts()["failed"] == 1 and engine.zcard(keys.retries) == 0
    assert sdk.retry_failed() == 1 and engine.hget(keys.attempts, "4") is None  # by hand: attempts again


def test_release_hands_back_to_pending_at_once(engine: redis.Redis, namespace: str) -> None:
    sdk = ActiveLayer(engine, namespace)
    sdk.create_partitions(1, 30, 10)
    a, b = sdk.claim_and_start("w1"), sdk.claim("w1")
    c = sdk.claim_and_start("w2")
    assert a is not None and b is not None and c is not None
    assert sdk.release("w1", [a.partition_id, b.partition_id, c.partition_id]) == [1, 2]  # not w2's
    assert sdk.counts() == {"pending": 2, "claimed": 0, "running": 1, "failed": 0}
    back = sdk.get(1)
    assert back is not None and (back.status, back.worker_id, back.last_heartbeat, back.claimed_at) == (
        Status.PENDING, "", 0, 0)  # fmt: skip
    assert sdk.claim_and_start("w3").partition_id == 1  # type: ignore[union-attr]


def test_beat_renews_every_lease_in_one_call_and_names_the_lost(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    held = [sdk.claim_and_start("w1") for _ in range(5)]
    taken = sdk.claim("w2")
    assert taken is not None
    pids = [p.partition_id for p in held if p is not None]
    real_redis.script_load(script_source("beat"))  # as a process's first beat leaves it: counted alone below
    sent = commands_sent(monkeypatch)
    beat = sdk.beat("w1", [*pids, taken.partition_id, 99], presence='{"x":1}')
    assert sent.count("EVALSHA") + sent.count("FCALL") == 1
    assert beat.renewed == pids and beat.lost == {taken.partition_id: "not_owner", 99: "not_found"}
    assert all(sdk.get(p).version == 2 for p in pids)  # type: ignore[union-attr]


# the runtime


def test_the_runtime_completes_every_partition_once(engine: redis.Redis, namespace: str, flavour: str) -> None:
    sdk = ActiveLayer(engine, namespace)
    sdk.create_partitions(1, 3000, 10)
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def body(part: PartitionInfo, lease: Lease) -> int:
        with lock:
            seen[part.partition_id] += 1
        assert part.status is Status.RUNNING and lease.partition_id == part.partition_id and not lease.lost
        return 7

    report = Running(flavour, engine, namespace, body, window=8).start(until_empty=True).join()
    assert report.ended == "empty" and (report.processed, report.items, report.failed) == (300, 2100, 0)
    counted = {name: REGISTRY.get_sample_value(f"partarchive_runtime_{name}_total", {"namespace": namespace})
               for name in ("partitions_processed", "items_processed", "failures", "leases_lost")}  # fmt: skip
    assert counted == {"partitions_processed": 300, "items_processed": 2100, "failures": 0, "leases_lost": 0}
    assert set(seen.values()) == {1} and len(seen) == 300
    assert sorted(_queued_pids(engine, sdk.keys)) == list(range(1, 301))
    assert sdk.counts() == {"pending": 0, "claimed": 0, "running": 0, "failed": 0}
    assert sdk.presence() == []  # left when it stopped


def test_a_lease_taken_over_is_told_and_never_completed_here(
    engine: redis.Redis, namespace: str, flavour: str
) -> None:
    sdk = ActiveLayer(engine, namespace)
    sdk.create_partitions(1, 10, 10)
    started, told = threading.Event(), threading.Event()

    def body(part: PartitionInfo, lease: Lease) -> None:
        started.set()
        if lease.wait_lost(30):
            told.set()

    cancelled = threading.Event()

    async def awaited(part: PartitionInfo, lease: Lease) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    run = Running(flavour, engine, namespace, body, awaited=awaited, window=1, lease_s=300).start()
    assert started.wait(10)
    # another worker whose clock runs far ahead finds the lease stale and takes it over
    thief = ActiveLayer(engine, namespace, clock=lambda: time.time() + 1000, lease_timeout=300)
    taken = thief.claim("thief")
    assert taken is not None and taken.partition_id == 1
    assert (cancelled if flavour == "asyncio" else told).wait(10)
    assert thief.complete(1, "thief").archived is not None  # the new owner completes it
    report = run.stop()
    assert report.leases_lost == 1 and report.processed == 0
    assert _queued_pids(engine, sdk.keys) == [1]  # completed once, by its new owner


def test_a_failing_process_is_retried_then_failed(real_redis: redis.Redis, namespace: str, flavour: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 50, 10)
    tries: Counter[int] = Counter()

    def body(part: PartitionInfo, lease: Lease) -> None:
        tries[part.partition_id] += 1
        if part.partition_id == 3:
            raise ValueError("bad row 17\nTraceback details that stay out")

    retry = RetryPolicy(max_attempts=3, backoff_s=0.05, backoff_max_s=0.1)
    report = Running(flavour, real_redis, namespace, body, window=2, retry=retry).start(until_empty=True).join()
    assert tries[3] == 3 and all(tries[p] == 1 for p in (1, 2, 4, 5))
    assert (report.processed, report.failed, report.retried) == (4, 3, 2)
    failed = sdk.get(3)
    assert failed is not None and failed.status is Status.FAILED and failed.error == "ValueError: bad row 17"
    assert real_redis.hget(sdk.keys.attempts, "3") == b"3" and real_redis.zcard(sdk.keys.retries) == 0


def test_the_circuit_breaker_stops_claims_for_a_cool_down(
    real_redis: redis.Redis, namespace: str, flavour: str
) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 200, 10)
    at: list[float] = []

    def body(part: PartitionInfo, lease: Lease) -> None:
        at.append(time.monotonic())
        raise RuntimeError("the database is down")

    run = Running(flavour, real_redis, namespace, body, window=1, retry=RetryPolicy(1),
                  breaker_failures=3, breaker_cooldown_s=1.0).start()  # fmt: skip
    wait_for(lambda: len(at) >= 4, 20, "claims again after the cool-down")
    run.stop()
    assert at[3] - at[2] >= 0.9 > at[2] - at[0]  # three in a row, then a second without a claim
    assert sdk.counts()["failed"] >= 4


def test_stop_hands_back_what_did_not_finish(real_redis: redis.Redis, namespace: str, flavour: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    working = threading.Semaphore(0)

    def body(part: PartitionInfo, lease: Lease) -> None:
        working.release()
        lease.wait_lost(30)

    run = Running(flavour, real_redis, namespace, body, window=4, drain_timeout_s=0.5).start()
    for _ in range(4):
        assert working.acquire(timeout=10)
    wait_for(lambda: len(sdk.presence()) == 1, 10, "the worker's presence")
    live = sdk.presence()[0]
    assert (live.worker_id, live.window) == (run.worker.worker_id, 4)
    began = time.monotonic()
    report = run.stop()
    assert time.monotonic() - began < 5 and report.handed_back == 4 and report.processed == 0
    assert sdk.counts() == {"pending": 10, "claimed": 0, "running": 0, "failed": 0}  # at once, not after a lease
    assert all(p.worker_id == "" for p in sdk.all_active()) and real_redis.xlen(sdk.keys.queue) == 0
    assert sdk.presence() == []


def test_a_stop_lets_the_partitions_in_hand_finish(real_redis: redis.Redis, namespace: str, flavour: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    working = threading.Semaphore(0)

    def body(part: PartitionInfo, lease: Lease) -> None:
        working.release()
        time.sleep(0.3)

    run = Running(flavour, real_redis, namespace, body, window=3, drain_timeout_s=10).start()
    for _ in range(3):
        assert working.acquire(timeout=10)
    report = run.stop()
    assert report.processed == 3 and report.handed_back == 0  # finished, and nothing claimed after the stop
    assert sdk.counts() == {"pending": 7, "claimed": 0, "running": 0, "failed": 0}
    assert sorted(_queued_pids(real_redis, sdk.keys)) == [1, 2, 3]


def test_process_returning_a_non_count_fails_the_partition(real_redis: redis.Redis, namespace: str) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 10, 10)
    report = Running("threads", real_redis, namespace, lambda p, lease: "ten", window=1,
                     retry=RetryPolicy(1)).start(until_empty=True).join()  # fmt: skip
    assert report.failed == 1 and "process returned 'ten'" in sdk.get(1).error  # type: ignore[union-attr]


def test_error_line_is_the_first_line_bounded_and_printable() -> None:
    assert error_line(ValueError("one\ntwo")) == "ValueError: one"
    assert error_line(KeyError()) == "KeyError"
    long = error_line(RuntimeError("x\x01" + "y" * 2000))
    assert len(long) == 500 and long.endswith("...") and "\x01" not in long


def test_bad_settings_are_refused(real_redis: redis.Redis, namespace: str) -> None:
    from codec import ValidationError

    for bad in ({"window": 0}, {"lease_s": -1}, {"heartbeat_s": 0}, {"drain_timeout_s": float("nan")}):
        with pytest.raises(ValidationError):
            Worker(real_redis, namespace, lambda p, lease: None, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="AsyncWorker"):
        Worker(real_redis, namespace, _coroutine)
    with pytest.raises(ValidationError, match="coroutine"):
        AsyncWorker(async_twin(real_redis), namespace, lambda p, lease: None)  # type: ignore[arg-type]
    assert not list(real_redis.scan_iter(match=f"{namespace}*"))


async def _coroutine(part: PartitionInfo, lease: Lease) -> None:
    return None


# a namespace bound to an elk_coordinator deployment


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    yield f"{namespace}:"
    delete_prefix(real_redis, f"{namespace}:")


def test_a_bound_namespace_keeps_go_records_exact(real_redis: redis.Redis, prefix: str, flavour: str) -> None:
    from tests.test_elk_side_by_side import go_layout_of

    keys = Config(namespace="elk", elk_prefix=prefix).keys
    go = GoWorker(real_redis, prefix, "go-host-1-8c1f3a2e")
    go.create(60, size=10)
    running: list[bytes] = []

    def body(part: PartitionInfo, lease: Lease) -> None:
        running.append(real_redis.hget(keys.active, str(part.partition_id)))  # type: ignore[arg-type]
        if part.partition_id == 5:
            raise RuntimeError("go on")

    report = Running(flavour, real_redis, keys, body, window=4, retry=RetryPolicy(1)).start(until_empty=True).join()
    assert (report.processed, report.failed) == (59, 1)
    for raw in running:
        assert go_layout_of(raw) and decode_elk(raw).status == "running"
    failed = real_redis.hget(keys.active, "5")
    assert go_layout_of(failed) and decode_elk(failed).options == {"error": "RuntimeError: go on"}  # as Go fails
    stats = real_redis.hgetall(go.keys.stats)
    assert {k: stats.get(k, b"0") for k in (b"pending", b"claimed", b"running", b"failed", b"completed")} == {
        b"pending": b"0", b"claimed": b"0", b"running": b"0", b"failed": b"1", b"completed": b"59"}  # fmt: skip
    assert sorted(decode_elk(f[b"p"]).partition_id for _, f in real_redis.xrange(keys.queue)) == [
        p for p in range(1, 61) if p != 5]  # fmt: skip
    # handed back as Go's ReleasePartition leaves a record
    ActiveLayer(real_redis, keys).retry_failed()
    sdk = ActiveLayer(real_redis, keys)
    part = sdk.claim_and_start("py-1")
    assert part is not None and sdk.release("py-1", [part.partition_id]) == [5]
    back = real_redis.hget(keys.active, "5")
    assert go_layout_of(back) and decode_elk(back).status == "pending" and decode_elk(back).worker_id == ""
    assert decode_elk(back).last_heartbeat.is_zero
    with pytest.raises(InvalidTransition):
        sdk.complete_and_claim(5, "py-1")


def test_an_unreadable_record_is_set_aside_and_the_rest_drained(
    real_redis: redis.Redis, namespace: str, flavour: str
) -> None:
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 100, 10)
    real_redis.hset(sdk.keys.active, "3", b'{"status":"pending","worker_id":"","version":0,"oops"')
    report = Running(flavour, real_redis, namespace, lambda p, lease: None, window=3).start(until_empty=True).join()
    assert report.processed == 9 and sorted(_queued_pids(real_redis, sdk.keys)) == [1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert [pid for pid, _ in sdk.unreadable()] == [3]


def test_a_duty_runs_beside_the_slots(real_redis: redis.Redis, namespace: str, flavour: str) -> None:
    """A process's work by the clock (a leader's, say): turned when due, as the beat is."""
    ActiveLayer(real_redis, namespace).create_partitions(1, 100, 10)

    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.turns = 0

        def turn(self) -> Any:
            self.turns += 1
            yield from ()
            return 0.05

    duty = Counting()
    run = Running(flavour, real_redis, namespace, lambda p, lease: lease.wait_lost(30), window=1)
    run.worker.add_duty(duty)
    run.start()
    wait_for(lambda: duty.turns >= 3, 10, "the duty turned again and again")
    run.stop(now=True)
    assert run.worker.core.schedule.keys() >= {duty}


def test_signals_come_as_one_stop_a_second_then_hand_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C reaches a supervisor's children twice (the terminal's and the supervisor's): one stop; a
    second request, a second later or more, hands back at once."""
    import signal

    from archiver.daemon import shutdown

    clock = [100.0]
    monkeypatch.setattr(shutdown.time, "monotonic", lambda: clock[0])
    stop, now = threading.Event(), threading.Event()
    guard = shutdown.GracefulShutdown(stop, 3600, now=now)
    try:
        guard.handle(signal.SIGINT, None)
        clock[0] += 0.01
        guard.handle(signal.SIGTERM, None)  # the same stop, by the supervisor
        assert stop.is_set() and not now.is_set()
        clock[0] += 2.0
        guard.handle(signal.SIGINT, None)
        assert now.is_set()
    finally:
        assert guard._deadline is not None
        guard._deadline.cancel()

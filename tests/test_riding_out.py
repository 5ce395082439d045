"""Calls riding out a slot move (`layers.plumbing.resharding`): on real servers, half way through a move,
where redis-py alone gives up; and with TRYAGAIN / ASK / CLUSTERDOWN replies injected."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from redis.exceptions import AskError, ClusterDownError, ClusterError, MovedError, NoScriptError, TryAgainError
from structlog.testing import capture_logs

from archiver import ArchiverDaemon, Config
from archiver.daemon import loop
from archiver.engine import async_connect, connect
from archiver.engine.local_cluster import LocalCluster
from codec.errors import PartArchiveError
from layers import ActiveLayer, ArchiveQueue, Completion, KeySchema
from layers.active.sdk_async import AsyncActiveLayer
from layers.errors import SlotMoving
from layers.plumbing import resharding, steps
from layers.plumbing.resharding import ride_out, run_transaction
from layers.plumbing.runners import AsyncIO, SyncIO
from layers.plumbing.scripts import AsyncScripts, Scripts
from layers.plumbing.steps import Batch, Steps
from tests.conftest import cluster_server
from tests.helpers import RETRIES, complete_partitions, refusals, retries, wait_for


@pytest.mark.cluster
@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_a_script_waits_out_the_move_of_its_slot_where_redis_py_gives_up(namespace: str, flavour: str) -> None:
    with LocalCluster(masters=3, binary=cluster_server()) as cluster:
        client = connect(cluster.url, cluster=True)
        sdk = ActiveLayer(client, namespace)  # the layers let the client follow ASK to a new master
        sdk.create_partitions(1, 100, 10)
        part = sdk.claim("w")
        assert part is not None
        probe = f"{{{namespace}}}_probe"
        client.set(probe, "kept")
        slot = client.keyslot(sdk.keys.active)
        source, new = cluster.master_of_slot(slot), cluster.add_master()
        plain = redis.RedisCluster(host="127.0.0.1", port=source.port)  # never given to partarchive
        with contextlib.closing(source.client) as src, contextlib.closing(new.client) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", new.node_id)
            src.execute_command("MIGRATE", "127.0.0.1", new.port, "", 0, 5000, "KEYS", probe, sdk.keys.active)
        # half moved: redis-py on its own gives up on a script whose keys are split, and cannot follow
        # an ASK to a master that serves no slot yet (redis-py #4015)
        with pytest.raises(ClusterError, match="TTL exhausted"):
            plain.eval("return 1", 2, sdk.keys.active, sdk.keys.pending)
        with pytest.raises(AttributeError):
            plain.get(probe)
        plain.close()
        assert client.get(probe) == b"kept"  # ASK followed to the new master
        with contextlib.closing(connect(cluster.url, cluster=True)) as fresh:
            assert fresh.get(probe) == b"kept"  # by a client no layer has seen yet
        assert Scripts.of(client)("del_if_equal", [probe], ["other"]) == 0  # there by EVAL: never loaded
        outcome: dict[str, object] = {}

        async def complete_awaited() -> Completion:
            twin = async_connect(cluster.url, cluster=True)
            try:
                assert await twin.get(probe) == b"kept"  # ASK followed to the new master on asyncio too
                return await AsyncActiveLayer(twin, namespace).complete(part.partition_id, "w")
            finally:
                await twin.aclose()

        def complete() -> None:
            try:
                if flavour == "blocking":
                    outcome["done"] = sdk.complete(part.partition_id, "w")
                else:
                    outcome["done"] = asyncio.run(complete_awaited())
            except Exception as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=complete)
        before = refusals(source, new)
        worker.start()
        try:  # refused more often than redis-py tries on its own (16), and still waiting
            wait_for(lambda: refusals(source, new) > before + 40 or not worker.is_alive(), 10, "refusals")
            assert worker.is_alive(), outcome
        finally:
            cluster.move_slot(slot, new, batch=2)
            worker.join(30)
        assert isinstance(outcome.get("done"), Completion), outcome
        assert client.xlen(sdk.keys.queue) == 1 and sdk.get(part.partition_id) is None
        assert cluster.master_of_slot(slot) is new
        client.close()


@pytest.mark.cluster
def test_a_read_blocked_on_the_queue_ends_quietly_when_the_queue_moves(namespace: str) -> None:
    """Redis 7.0 ends a blocked XREADGROUP whose stream a MIGRATE took away with UNBLOCKED; valkey
    leaves it blocked on the old node until its timeout. Either way the read finds nothing."""
    with LocalCluster(masters=3, binary=cluster_server()) as cluster:
        client = connect(cluster.url, cluster=True)
        queue = ArchiveQueue(client, KeySchema(namespace, cluster=True))
        queue.ensure_group()
        slot = client.keyslot(queue.keys.queue)
        source, new = cluster.master_of_slot(slot), cluster.add_master()
        read: dict[str, object] = {}
        reader = threading.Thread(target=lambda: read.update(entries=queue.read_new("c", 10, 2000)))
        reader.start()
        with contextlib.closing(source.client) as src:
            wait_for(lambda: src.info("clients")["blocked_clients"] == 1, 10, "the read to block")
        cluster.move_slot(slot, new)
        reader.join(10)
        assert read == {"entries": []}
        client.xadd(queue.keys.queue, {"p": b"x"})
        assert [e.payload for e in queue.read_new("c", 10, 0)] == [b"x"]
        client.close()


class FakeTime:
    """The clock `ride_out` waits on, moved on by its sleeps only."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """`ride_out`'s clock, and the sleeps of both drivers (`layers.plumbing.steps`)."""
    clock = FakeTime()
    monkeypatch.setattr(resharding, "time", clock)
    monkeypatch.setattr(steps, "time", clock)
    monkeypatch.setattr(steps, "asyncio", SimpleNamespace(sleep=clock.asleep))
    return clock


class Replies:
    """A command's replies in turn: an exception is raised, anything else returned; the last repeats."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.calls = 0

    def __call__(self, *_args: object, **_options: object) -> object:
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        if isinstance(reply, BaseException):
            raise reply
        return reply


def awaited(replies: Replies) -> Any:
    """``replies`` as a coroutine function (a command of an asyncio client)."""

    async def command(*args: object, **options: object) -> object:
        return replies(*args, **options)

    return command


MOVING = [
    TryAgainError("Multiple keys request during rehashing of slot"),
    AskError("4092 127.0.0.1:7006"),
    MovedError("4092 127.0.0.1:7006"),
    ClusterError("TTL exhausted."),
    ClusterDownError("The cluster is down"),
]


@pytest.mark.parametrize("refusal", MOVING, ids=lambda e: type(e).__name__)
def test_a_call_refused_while_its_slot_moves_is_sent_again(fake_time: FakeTime, refusal: Exception) -> None:
    call, before = Replies(*[refusal] * 6, "ran"), retries(("complete",))
    assert ride_out(call, "complete") == "ran" and call.calls == 7
    assert retries(("complete",)) == before + 6
    assert len(fake_time.slept) == 6 and all(0.01 <= s <= resharding.MAX_DELAY_S for s in fake_time.slept)
    assert fake_time.slept[-1] > fake_time.slept[0]  # backing off


def test_a_call_refused_past_the_budget_is_a_typed_error(fake_time: FakeTime) -> None:
    call = Replies(TryAgainError("Multiple keys request during rehashing of slot"))
    with pytest.raises(SlotMoving, match=r"refused 'complete' for 10 s .* it did not run") as caught:
        ride_out(call, "complete")
    assert fake_time.now <= resharding.BUDGET_S and call.calls > 10
    assert max(fake_time.slept) == pytest.approx(resharding.MAX_DELAY_S, rel=0.5)
    assert isinstance(caught.value, PartArchiveError) and isinstance(caught.value, redis.RedisError)
    assert isinstance(caught.value.__cause__, TryAgainError)


@pytest.mark.parametrize(
    "error", [redis.ResponseError("WRONGTYPE"), redis.ConnectionError("gone"), SlotMoving("nested")], ids=repr
)
def test_other_errors_are_not_retried_here(fake_time: FakeTime, error: Exception) -> None:
    call = Replies(error, "ran")
    with pytest.raises(type(error)):
        ride_out(call, "complete")
    assert call.calls == 1 and not fake_time.slept


class FakeCluster(redis.RedisCluster):
    """A cluster client without a cluster: EVALSHA, EVAL and transactions answer from `Replies`."""

    def __init__(self, evalsha: Replies | None = None, execute: Replies | None = None) -> None:
        self.evalsha = evalsha or Replies("evalsha ran")  # type: ignore[method-assign]
        self.eval = Replies("eval ran")  # type: ignore[method-assign]
        self.execute = execute or Replies(["exec ran"])
        self.queued: list[list[str]] = []

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> Any:
        assert transaction
        commands: list[str] = []
        stack: list[SimpleNamespace] = []  # as redis-py's ClusterPipeline keeps them
        self.queued.append(commands)

        def queue(*args: Any) -> None:
            commands.append(str(args[0]))
            stack.append(SimpleNamespace(args=args))

        return SimpleNamespace(
            hset=lambda *a: queue("HSET", *a),
            execute_command=lambda *a, **o: queue(*a),
            command_stack=stack,
            execute=self.execute,
        )


class FakeAsyncCluster(redis.asyncio.RedisCluster):
    """A `FakeCluster` on asyncio: the same `Replies`, awaited."""

    def __init__(self, blocking: FakeCluster) -> None:
        self.blocking = blocking
        self.evalsha = awaited(blocking.evalsha)  # type: ignore[method-assign]
        self.eval = awaited(blocking.eval)  # type: ignore[method-assign]

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> Any:
        pipe = self.blocking.pipeline(transaction)
        return SimpleNamespace(execute_command=pipe.execute_command, execute=awaited(pipe.execute))


FLAVOURS = ["blocking", "asyncio"]


def run_script(flavour: str, client: FakeCluster, name: str, keys: list[str], args: list[Any]) -> Any:
    """Script ``name`` run by `Scripts` on ``client``, or by `AsyncScripts` on its asyncio twin."""
    if flavour == "blocking":
        return Scripts(client)(name, keys, args)
    twin = FakeAsyncCluster(client)  # held: a runner refers to its client weakly
    return asyncio.run(AsyncScripts(twin)(name, keys, args))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_scripts_on_a_cluster_ride_out_tryagain_and_ask_then_load_by_eval(fake_time: FakeTime, flavour: str) -> None:
    no_script = NoScriptError("No matching script.")
    client = FakeCluster(evalsha=Replies(*MOVING, no_script))
    assert run_script(flavour, client, "complete", ["{t}_partitions"], [1]) == "eval ran"
    assert client.evalsha.calls == len(MOVING) + 1 and client.eval.calls == 1  # type: ignore[attr-defined]
    assert len(fake_time.slept) == len(MOVING)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_a_budget_the_first_refusal_is_the_answer(
    fake_time: FakeTime, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    monkeypatch.setattr(resharding, "BUDGET_S", 0.0)
    client = FakeCluster(evalsha=Replies(MOVING[0], "evalsha ran"))
    with pytest.raises(SlotMoving):
        run_script(flavour, client, "complete", ["{t}_partitions"], [1])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_script_error_on_a_cluster_names_its_file_and_line(fake_time: FakeTime, flavour: str) -> None:
    failed = redis.ResponseError("ERR user_script:1: Script attempted to access nonexistent global variable")
    client = FakeCluster(evalsha=Replies(MOVING[0], failed))
    with pytest.raises(redis.ResponseError, match=r"layers/\w+/lua/\w+\.lua:1: Script attempted") as caught:
        run_script(flavour, client, "del_if_equal", ["{t}_x"], ["v"])
    assert "user_script" not in str(caught.value)


def test_a_transaction_is_built_again_while_its_slot_moves(fake_time: FakeTime) -> None:
    client = FakeCluster(execute=Replies(MOVING[1], MOVING[0], ["exec ran"]))
    assert run_transaction(client, lambda pipe: pipe.hset("{t}_x", "f", 1), "a note") == ["exec ran"]
    assert client.queued == [["HSET"]] * 3  # each try on a pipeline of its own


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_transaction_step_is_built_again_while_its_slot_moves(fake_time: FakeTime, flavour: str) -> None:
    def steps() -> Steps[Any]:
        return (yield Batch(transaction=True).hset("{t}_x", "f", "1"))

    client = FakeCluster(execute=Replies(MOVING[1], MOVING[0], ["exec ran"]))
    if flavour == "blocking":
        assert SyncIO(client).run(steps()) == ["exec ran"]
    else:
        assert asyncio.run(AsyncIO(FakeAsyncCluster(client)).run(steps())) == ["exec ran"]
    assert client.queued == [["HSET"]] * 3 and len(fake_time.slept) == 2
    assert retries(("transaction",)) >= 2


def test_a_transaction_on_one_server_is_sent_once(fake_time: FakeTime) -> None:
    client = fakeredis.FakeRedis()
    assert run_transaction(client, lambda pipe: pipe.hset("x", "f", 1), "a note") == [1]
    assert not fake_time.slept


def test_a_commit_refused_past_the_budget_is_retried_by_the_next_round_not_dead_lettered(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config(namespace=namespace, block_ms=10, claim_idle_ms=1, max_deliveries=1, stats_flush_interval_s=60)
    daemon = ArchiverDaemon(real_redis, config, consumer="d")
    daemon.pages.pipeline.reader = None  # read and commit in turn, as on Redis Cluster
    monkeypatch.setattr(loop, "backoff_s", lambda _failures: 0.0)
    committer = daemon.pages.pipeline.committer
    run, refused = committer._run, Replies(*[SlotMoving("refused 'commit' for 10 s")] * 3, None)

    def run_unless_refused(call: Any) -> Any:
        refused()
        return run(call)

    monkeypatch.setattr(committer, "_run", run_unless_refused)
    daemon.queue.ensure_group()
    complete_partitions(real_redis, namespace, 150)
    for _ in range(3):  # each round's commit refused: the entries stay with this archiver, unacknowledged
        with capture_logs() as logs:
            daemon.round_with_retry()
        assert [e["event"] for e in logs if e["log_level"] != "info"] == [
            "a slot move outlasted the retry budget, retrying"
        ]  # a warning, no traceback, and no entry dead-lettered (claimed back by itself, past max_deliveries)
        assert daemon.commit_buffer.buffered == 150 and real_redis.xlen(daemon.keys.queue) == 150
    daemon.round_with_retry()
    assert refused.calls == 4 and daemon.commit_buffer.buffered == 0
    assert daemon.archive.archived_total() == 150 and real_redis.xlen(daemon.keys.queue) == 0
    assert real_redis.xlen(daemon.keys.dead_letter) == 0 and daemon.dead_lettered == 0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_retries_are_counted_by_the_namespace_of_the_call(fake_time: FakeTime, flavour: str, namespace: str) -> None:
    """Issue 47: ``partarchive_slot_move_retries_total`` carries the namespace, as every series does,
    a bound namespace's too (its keys under Go's prefix)."""
    from prometheus_client import REGISTRY

    for keys in (KeySchema(namespace, cluster=True), KeySchema(namespace, cluster=True, elk_prefix="{go}app:")):
        client = FakeCluster(evalsha=Replies(MOVING[0], MOVING[1], "evalsha ran"))
        labels = {"namespace": namespace, "call": "claim"}
        before = REGISTRY.get_sample_value(RETRIES, labels) or 0.0
        assert run_script(flavour, client, "claim", [keys.active, keys.pending], [1]) == "evalsha ran"
        assert REGISTRY.get_sample_value(RETRIES, labels) == before + 2
    transaction = FakeCluster(execute=Replies(MOVING[0], ["exec ran"]))
    run_transaction(transaction, lambda pipe: pipe.hset(KeySchema(namespace, cluster=True).stats_meta, "f", 1), "note")
    assert REGISTRY.get_sample_value(RETRIES, {"namespace": namespace, "call": "note"}) == 1

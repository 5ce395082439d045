"""partarchive's SDK and elk_coordinator's Go workers sharing one active hash (namespace bound, Go format)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.elk.migrate import ElkMigration
from archiver.router import QueryRouter, Source
from codec import Status
from codec.elk import ElkRecord, decode_elk
from layers import ActiveLayer
from tests.conftest import Clock
from tests.elk_fixtures import delete_prefix
from tests.go_worker import GoWorker

SAMPLES = [
    orjson.loads(line) for line in (Path(__file__).parent / "fixtures/elk/samples.jsonl").read_bytes().splitlines()
]
LAYOUT = {s["status"]: list(s) for s in SAMPLES[:3] + SAMPLES[4:]}  # pending, claimed, running, completed


def go_layout_of(raw: bytes) -> list[str]:
    """Member names of a record that a Go decoder accepts and that is laid out as Go writes it."""
    rec = decode_elk(raw)
    assert rec.to_json() == raw, "not laid out as Go's encoding/json writes it"
    return list(orjson.loads(raw))


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    yield f"{namespace}:"
    delete_prefix(real_redis, f"{namespace}:")


@pytest.fixture
def sdk(real_redis: redis.Redis, prefix: str) -> ActiveLayer:
    return ActiveLayer(real_redis, Config(namespace="elk", elk_prefix=prefix).keys, lease_timeout=300)


def test_both_sides_claim_and_complete_what_the_other_created(
    real_redis: redis.Redis, prefix: str, sdk: ActiveLayer
) -> None:
    go = GoWorker(real_redis, prefix, "go-host-1-8c1f3a2e")
    go_pids = go.create(3)
    assert go_pids == [1, 2, 3]
    ours = sdk.create_partitions(-10_000, -7_001, 1000, options={"source": "partarchive", "big": 2**60})
    assert list(ours) == [4, 5, 6]  # numbering goes on from Go's max_partition_id
    for pid in ours:
        raw = real_redis.hget(sdk.keys.active, str(pid))
        layout = go_layout_of(raw)
        assert layout == [*LAYOUT["pending"][:7], "options", "version", "created_at"]
        assert decode_elk(raw).options == {"big": 2**60, "source": "partarchive"}
    assert real_redis.hget(go.keys.stats, "max_partition_id") == b"6"

    part = sdk.claim("py-worker")
    assert part is not None and part.partition_id == 1  # a Go-created partition, found after a sync
    assert go_layout_of(real_redis.hget(sdk.keys.active, "1")) == LAYOUT["claimed"]
    sdk.start(1, "py-worker")
    sdk.heartbeat(1, "py-worker")
    assert go_layout_of(real_redis.hget(sdk.keys.active, "1")) == LAYOUT["running"]
    done = sdk.complete(1, "py-worker")
    assert done.archived is not None and done.archived.worker_id == "py-worker"

    go_claimed = go.claim()
    assert go_claimed is not None and go_claimed.partition_id == 2
    go.start(2)
    go.complete(2)
    for _ in range(3):
        assert sdk.claim("py-worker") is not None
    mine = go.claim()  # Go takes a partition partarchive created
    assert mine is not None and mine.partition_id == 6 and mine.min_id == -8000
    go.start(6)
    go.complete(6)

    config = Config(namespace="elk", elk_prefix=prefix, stats_flush_interval_s=0.1)
    daemon = ArchiverDaemon(real_redis, config, consumer="side")
    drain(daemon)
    adopted = ElkMigration(real_redis, config, prefix).adopt_step()
    assert adopted == 2 and real_redis.hlen(go.keys.archived) == 0
    router = QueryRouter(real_redis, config.keys)
    for pid in (1, 2, 6):
        answer = router.get(pid)
        assert answer.source is Source.SIMPLE and isinstance(answer.partition, ElkRecord)
        assert answer.partition.status == "completed"
        layout = go_layout_of(answer.partition.to_json())
        assert [k for k in layout if k != "options"] == LAYOUT["completed"] and ("options" in layout) == (pid == 6)
    assert router.get(6).partition.min_id == -8000  # type: ignore[union-attr]
    assert router.get(3).source is Source.ACTIVE


def test_failures_retries_and_stale_leases_across_both_sides(
    real_redis: redis.Redis, prefix: str, sdk: ActiveLayer
) -> None:
    go = GoWorker(real_redis, prefix, "go-host-2")
    go.create(3)
    held = go.claim()
    assert held is not None
    go.start(held.partition_id)
    failed = go.fail(go.claim().partition_id, "dial tcp: connection refused <&>")  # type: ignore[union-attr]
    assert failed.options == {"error": "dial tcp: connection refused <&>"}

    assert sdk.retry_failed() == 1  # a Go failure, found by the sync
    back = decode_elk(real_redis.hget(sdk.keys.active, str(failed.partition_id)))
    assert back.status == "pending" and back.error == "" and back.options is None and back.version == failed.version + 1

    part = sdk.claim("py")
    assert part is not None and part.partition_id == failed.partition_id
    sdk.start(part.partition_id, "py")
    sdk.fail(part.partition_id, "py", "bad row \u2028 é")
    raw = real_redis.hget(sdk.keys.active, str(part.partition_id))
    rec = decode_elk(raw)
    assert rec.status == "failed" and rec.error == "bad row \u2028 é" and rec.options == {"error": "bad row \u2028 é"}
    assert rec.last_heartbeat.is_zero and b"\\u2028" in raw

    late = Clock(real_redis.time()[0] + 301)  # type: ignore[index]
    taker = ActiveLayer(real_redis, sdk.keys, lease_timeout=300, clock=late)
    assert taker.counts()["running"] == 1
    taken = taker.claim("py-2")
    assert taken is not None and taken.partition_id == held.partition_id and taken.status is Status.CLAIMED
    assert decode_elk(real_redis.hget(sdk.keys.active, str(held.partition_id))).worker_id == "py-2"
    assert go.get(held.partition_id).worker_id == "py-2"  # the Go holder's next write is refused, as in Go


def test_http_api_returns_go_records_with_exact_64_bit_ids(
    engine_url: str, real_redis: redis.Redis, prefix: str
) -> None:
    import httpx

    from tests.helpers import free_port, start_server

    go = GoWorker(real_redis, prefix, "go-host-3")
    go.create(1)
    real_redis.hset(go.keys.stats, mapping={"max_partition_id": 1, "last_allocated_id": 2**63 - 1001})
    sdk = ActiveLayer(real_redis, Config(namespace="elk", elk_prefix=prefix).keys)
    created = sdk.create_partitions(2**63 - 1000, 2**63 - 1, 1000)
    port = free_port()
    proc = start_server(engine_url, "elk", port, "--elk-prefix", prefix)
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/partitions/{created[0]}", timeout=10).json()
        assert body["source"] == "active" and body["status"] == "pending"
        assert body["partition"]["max_id"] == 2**63 - 1 and body["partition"]["min_id"] == 2**63 - 1000
        assert body["partition"]["created_at"].endswith("Z") and body["partition"]["version"] == 1
        docs = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=10).json()
        assert "BigInt" in docs["info"]["description"]
    finally:
        proc.terminate()
        proc.wait(15)

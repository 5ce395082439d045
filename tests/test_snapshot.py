"""One namespace snapshot behind every face: ``partarchive status``, ``/stats``, ``/metrics`` and the
dashboard's data show the same values under the same names, each read once per request or scrape
(counted at the connection: the round trips sent and the reads of the archive meta in them)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio
from fastapi.testclient import TestClient

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.status import collect_status
from archiver.web import create_app
from layers import ActiveLayer, KeySchema
from tests.helpers import run_cli


class Trips:
    """The round trips a client sent (a pipeline is one), as the bytes each carried."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def mentions(self, key: str) -> int:
        """How many commands named ``key``: RESP sends it as a bulk string of its own."""
        name = key.encode()
        needle = b"$%d\r\n%s\r\n" % (len(name), name)
        return sum(trip.count(needle) for trip in self.sent)


def counted_client(url: str, trips: Trips) -> redis.Redis:
    client = redis.Redis.from_url(url)
    pool = client.connection_pool
    base: Any = pool.connection_class

    class Counting(base):  # type: ignore[misc, valid-type]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            chunks = [command] if isinstance(command, bytes | str) else command
            trips.sent.append(b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks))
            super().send_packed_command(command, check_health)

    pool.connection_class = Counting
    client.ping()  # the connection's handshake is not a request's
    trips.sent.clear()
    return client


@pytest.fixture
def populated(engine_url: str, real_redis: redis.Redis, namespace: str) -> Iterator[Config]:
    """30 partitions: 20 archived in the simple tier, 5 claimed, 5 pending; a queued entry; seal
    counters for a compression ratio. The faces' config puts the compressed tier at 10, so the stored
    tier (simple) and the target tier (compressed) differ."""
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(1, 3000, 100)
    for i in range(25):
        part = active.claim(f"w{i % 3}")
        assert part is not None
        if i < 20:
            active.complete(part.partition_id, f"w{i % 3}")
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="snap"))
    keys = KeySchema(namespace)
    real_redis.xadd(keys.queue, {"p": b"{}"})
    real_redis.hset(keys.archive_meta, mapping={"sealed_json_bytes": 1000, "sealed_blob_bytes": 300})
    yield Config(namespace=namespace, compressed_from=10, summary_above=1000)


def _series(text: str, name: str, namespace: str) -> dict[str, float]:
    """A metric's samples in a scrape, by their labels other than the namespace."""
    out = {}
    for labels, value in re.findall(rf"^{name}{{([^}}]*)}} (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if found.pop("namespace") == namespace:
            out[",".join(found.values())] = float(value)
    return out


def test_every_face_shows_one_snapshot_read_once(engine_url: str, populated: Config, namespace: str) -> None:
    trips = Trips()
    client = counted_client(engine_url, trips)
    meta = KeySchema(namespace).archive_meta

    def once(read: Any, most_trips: int) -> Any:
        trips.sent.clear()
        answer = read()
        assert trips.mentions(meta) == 1, "the archive meta is read once"
        assert len(trips.sent) <= most_trips, len(trips.sent)
        return answer

    status = once(lambda: collect_status(client, populated), 3)  # the snapshot, INFO memory, INFO replication
    app = create_app(client, populated, async_client=lambda: redis.asyncio.Redis.from_url(engine_url))
    with TestClient(app) as http:
        http.get("/dashboard/overview")  # the namespace list is found by SCAN once, then kept
        stats = once(lambda: http.get("/stats").json(), 1)
        scrape = once(lambda: http.get("/metrics").text, 1)
        overview = once(lambda: http.get("/dashboard/overview").json(), 6)  # + charts, bytes, dead letters
    client.close()

    archive = status["archive"]
    assert (archive["stored_tier"], archive["target_tier"]) == ("simple", "compressed")
    assert (archive["archived_total"], archive["compression_ratio"]) == (20, 3.33)
    assert stats["archive"] == archive
    assert {k: overview["archive"][k] for k in archive} == archive
    assert _series(scrape, "partarchive_archive_tier", namespace)["simple"] == 1
    assert _series(scrape, "partarchive_archive_target_tier", namespace) == {
        "simple": 0, "compressed": 1, "summary": 0
    }  # fmt: skip
    assert _series(scrape, "partarchive_compression_ratio", namespace) == {"": 3.33}
    assert sum(_series(scrape, "partarchive_archived_partitions", namespace).values()) == 20

    by_status = status["active"]["by_status"]
    assert by_status == stats["active"] == overview["active"]["by_status"]
    assert (by_status["pending"], by_status["claimed"] + by_status["running"]) == (5, 5)
    metric_active = _series(scrape, "partarchive_active_partitions", namespace)
    assert {s: metric_active[s] for s in by_status} == by_status

    assert status["queue"] == overview["queue"] and status["queue"]["backlog"] == 1
    assert _series(scrape, "partarchive_queue_length", namespace) == {"": 1}
    assert status["transition"] == overview["transition"] and status["transition"]["tier"] == "compressed"
    assert _series(scrape, "partarchive_transition_backlog", namespace) == {"": status["transition"]["simple_left"]}
    assert status["transition"]["simple_left"] == 20  # the move the target tier asks for

    def job(p: dict[str, Any]) -> tuple[int, ...]:
        return p["total"], p["done"], p["failed"], p["pending"]

    assert job(status["progress"]) == job(stats["progress"]) == job(overview["progress"]) == (31, 21, 0, 10)
    parts = _series(scrape, "partarchive_job_partitions", namespace)
    assert (parts["total"], parts["done"], parts["failed"], parts["pending"]) == (31, 21, 0, 10)
    assert status["pressure"] == overview["pressure"]
    assert _series(scrape, "partarchive_unsealed_records", namespace) == {"": status["pressure"]["unsealed_records"]}
    assert stats["completed"]["total_completed"] == 20 and not stats["degraded"]

    cli = orjson.loads(run_cli(engine_url, namespace, "status", "--json", PARTARCHIVE_COMPRESSED_FROM="10").stdout)
    assert cli["archive"] == archive and cli["active"] == status["active"]

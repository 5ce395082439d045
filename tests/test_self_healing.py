"""The archiver heals itself on the real engine: liveness, dead consumers, readiness, queue lag,
tampered metadata and configuration that contradicts the namespace."""

from __future__ import annotations

import os
import time

import pytest
import redis
from fastapi.testclient import TestClient

from archiver import ArchiverDaemon, Config, Source
from archiver.daemon.loop import drain
from archiver.web import create_app
from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy, WrongKeyType
from layers.archive.commit import Uncommitted
from layers.control.liveness import Liveness
from layers.errors import CorruptMetadata
from stats.rollup import committer as archive_committer
from tests.flavours import Flavour
from tests.helpers import complete_partitions, run_cli


def _daemon(client: redis.Redis, namespace: str, consumer: str = "t", **kw: object) -> ArchiverDaemon:
    config = Config(namespace=namespace, block_ms=20, **kw)  # type: ignore[arg-type]
    return ArchiverDaemon(client, config, consumer=consumer)


def _consumers(client: redis.Redis, keys: KeySchema) -> dict[str, int]:
    return {c["name"].decode(): int(c["pending"]) for c in client.xinfo_consumers(keys.queue, "archivers")}


def test_each_archiver_beats_and_is_listed_until_it_leaves(
    real_redis: redis.Redis, namespace: str, engine_url: str
) -> None:
    complete_partitions(real_redis, namespace, 30)
    daemon = _daemon(real_redis, namespace)
    daemon.queue.ensure_group()
    drain(daemon)
    daemon._next_beat = 0.0
    daemon.beat()
    [health] = Liveness(real_redis, daemon.keys).archivers()
    assert (health.consumer, health.pid, health.archived, health.alive) == ("t", os.getpid(), 30, True)
    server_now = float(real_redis.time()[0])  # type: ignore[index]
    assert abs(health.last_beat - server_now) < 5
    listed = run_cli(engine_url, namespace, "archivers")
    assert listed.returncode == 0 and "t " in listed.stdout and "alive" in listed.stdout
    daemon.leave()
    assert Liveness(real_redis, daemon.keys).archivers() == []
    assert "no live archiver" in run_cli(engine_url, namespace, "archivers").stdout


def test_a_silent_archiver_is_shown_dead_and_forgotten_later(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    liveness = Liveness(real_redis, keys)
    daemon = _daemon(real_redis, namespace, consumer="old")
    daemon.beat()
    stale = orjson_entry(real_redis, keys, "old", last_beat=time.time() - 3600)
    real_redis.hset(keys.archivers, "old", stale)
    assert liveness.archivers() == []
    [dead] = liveness.archivers(include_dead=True)
    assert dead.consumer == "old" and not dead.alive
    assert liveness.forget_dead(forget_after_s=60) == 1
    assert liveness.archivers(include_dead=True) == []


def orjson_entry(client: redis.Redis, keys: KeySchema, consumer: str, **changes: object) -> bytes:
    import orjson

    body = orjson.loads(client.hget(keys.archivers, consumer))  # type: ignore[arg-type]
    body.update(changes)
    return orjson.dumps(body)


def test_dead_consumers_are_removed_once_their_entries_are_claimed(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 20)
    queue = ArchiveQueue(real_redis, keys)
    queue.ensure_group()
    queue.read_new("dead-1", 5, 0)  # a replica that read entries and died
    real_redis.xgroup_createconsumer(keys.queue, "archivers", "dead-2")  # died before reading
    time.sleep(0.05)
    survivor = _daemon(real_redis, namespace, consumer="alive", claim_idle_ms=20)
    survivor.beat()  # dead-1 still holds 5 entries: never deleted while it holds any
    assert _consumers(real_redis, keys)["dead-1"] == 5
    assert "dead-2" not in _consumers(real_redis, keys)
    drain(survivor)  # takes dead-1's entries over, then archives everything
    survivor._next_beat = 0.0
    survivor.beat()
    assert set(_consumers(real_redis, keys)) == {"alive"}
    assert survivor.archived == 20 and real_redis.bitcount(keys.index) == 20


def test_a_dead_judged_consumer_that_reads_before_its_deletion_keeps_its_entries(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archiver judged dead (no beat, idle, nothing pending) wakes and reads right after the
    consumers were listed: the deletion must not drop the entries it now holds."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 10)
    queue = ArchiveQueue(real_redis, keys)
    queue.ensure_group()
    real_redis.xgroup_createconsumer(keys.queue, "archivers", "sleeper")
    time.sleep(0.05)
    listed = real_redis.xinfo_consumers

    def listed_then_woken(*args: object, **kw: object) -> object:
        consumers = listed(*args, **kw)
        queue.read_new("sleeper", 5, 0)  # the sleeper wakes between the listing and the deletion
        return consumers

    monkeypatch.setattr(real_redis, "xinfo_consumers", listed_then_woken)
    assert Liveness(real_redis, keys).remove_dead_consumers(claim_idle_ms=20) == []
    monkeypatch.undo()
    assert _consumers(real_redis, keys) == {"sleeper": 5}  # its entries are still pending, to be taken over
    time.sleep(0.05)
    real_redis.xack(keys.queue, "archivers", *[e[0] for e in real_redis.xrange(keys.queue, count=5)])
    time.sleep(0.05)
    assert Liveness(real_redis, keys).remove_dead_consumers(claim_idle_ms=20) == ["sleeper"]  # still removed once idle
    assert _consumers(real_redis, keys) == {}


def test_readiness_reports_no_live_archiver_while_the_queue_grows(real_redis: redis.Redis, namespace: str) -> None:
    config = Config(namespace=namespace)
    with TestClient(create_app(real_redis, config)) as http:
        assert http.get("/readyz").status_code == 200  # nothing waiting: ready
        complete_partitions(real_redis, namespace, 3)
        answer = http.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["error"] == "no live archiver while the queue grows"
        assert answer.json()["detail"] == {"queue_length": 3}
        _daemon(real_redis, namespace).beat()
        assert http.get("/readyz").status_code == 200
        metrics = http.get("/metrics").text
        assert f'partarchive_archivers_alive{{namespace="{namespace}"}} 1.0' in metrics


def test_queue_lag_is_exact_when_entries_are_deleted(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 10)
    queue = ArchiveQueue(real_redis, keys)
    queue.ensure_group()
    queue.read_new("c", 4, 0)
    first = real_redis.xrange(keys.queue, count=1)[0][0]
    real_redis.xack(keys.queue, "archivers", first)
    real_redis.xdel(keys.queue, first)  # what a commit does: XINFO's own lag is unknown from here on
    state = queue.state()
    assert (state.length, state.pending, state.lag) == (9, 3, 6)


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        ("archive_meta", "total", "abc"),
        ("archive_meta", "tier", "bogus"),
        ("archive_meta", "max_pid", "-"),
        ("archive_meta", "retention_s", "soon"),
        ("archive_meta", "batch_size", "0"),
        ("stats_meta", "range_width", "abc"),
        ("stats_meta", "range_width", "0"),
    ],
)
def test_tampered_metadata_is_a_typed_error_and_nothing_is_written(
    real_redis: redis.Redis, namespace: str, engine_url: str, key: str, field: str, value: str
) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 5)
    daemon = _daemon(real_redis, namespace)
    daemon.queue.ensure_group()
    real_redis.hset(getattr(keys, key), field, value)
    with pytest.raises(CorruptMetadata, match=field):
        daemon.check_settings()
        drain(daemon)
    assert real_redis.bitcount(keys.index) == 0 and real_redis.xlen(keys.queue) == 5
    started = run_cli(engine_url, namespace, "run")
    assert started.returncode == 2 and "Traceback" not in started.stderr
    assert started.stderr.count("\n") == 1 and field in started.stderr


def test_commit_refuses_a_tampered_statistics_counter_before_any_write(
    real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    archive = ArchiveLayer(real_redis, keys)
    ArchiveQueue(real_redis, keys).ensure_group()
    real_redis.hset(keys.stats_global, "completed", "lots")
    part = ArchivedPartition(1, 1, 10, "w", 1_700_000_000, 5)
    committer = archive_committer(archive)
    with pytest.raises(CorruptMetadata, match="completed"):
        committer.commit(Uncommitted.of([("-", part)]))
    assert real_redis.bitcount(keys.index) == 0 and not real_redis.exists(keys.archive_meta)
    real_redis.delete(keys.stats_global)
    real_redis.rpush(keys.stats_global, "x")
    with pytest.raises(WrongKeyType, match=keys.stats_global):
        committer.commit(Uncommitted.of([("-", part)]))
    assert real_redis.bitcount(keys.index) == 0


def test_a_batch_size_or_range_width_other_than_stored_is_refused_at_start(
    real_redis: redis.Redis, namespace: str, engine_url: str
) -> None:
    complete_partitions(real_redis, namespace, 5)
    drain(_daemon(real_redis, namespace))
    for env, stored in (({"PARTARCHIVE_BATCH_SIZE": "50"}, 100), ({"PARTARCHIVE_STATS_RANGE_WIDTH": "10"}, 1000)):
        started = time.monotonic()
        done = run_cli(engine_url, namespace, "run", **env)
        assert done.returncode == 2 and time.monotonic() - started < 30
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert done.stderr.endswith(f"set {next(iter(env))}={stored}\n")  # it says what to set instead


def test_lookups_use_the_stored_batch_size_whatever_is_configured(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 120)
    daemon = _daemon(real_redis, namespace, batch_size=50, compressed_from=0, seal_idle_s=0)
    drain(daemon)
    daemon.maintain(force=True)
    assert daemon.archive.batch_blob(1) and not real_redis.exists(keys.staging(1))
    router = flavour.router(real_redis, namespace, policy=TierPolicy())  # configured with the default 100
    answer = router.get(75)
    assert answer.source is Source.BATCH and answer.partition is not None and answer.partition.partition_id == 75


def test_an_archiver_refuses_to_start_on_a_key_of_another_type(
    real_redis: redis.Redis, namespace: str, engine_url: str
) -> None:
    keys = KeySchema(namespace)
    real_redis.rpush(keys.archive_meta, "x")
    done = run_cli(engine_url, namespace, "run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{keys.archive_meta} is a list, not a hash" in done.stderr


def test_logged_exceptions_are_fields_without_local_variables(capsys: pytest.CaptureFixture[str]) -> None:
    import orjson
    import structlog

    from archiver.logs import configure_logging

    saved = structlog.get_config()
    configure_logging("info")  # prints to the captured stderr: put the configuration back after

    def connect_with(url: str) -> None:
        raise ConnectionError("cannot reach the server")

    try:
        connect_with("redis://:s3cret-pass@db.internal:6379/0")
    except ConnectionError:
        structlog.get_logger("t").exception("round failed")
    finally:
        structlog.configure(**saved)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    [exc] = orjson.loads(line)["exception"]
    assert exc["exc_type"] == "ConnectionError" and exc["exc_value"] == "cannot reach the server"
    assert exc["frames"] and "s3cret" not in line and "locals" not in line

"""The archiver daemon on the real engine: archiving, acknowledgement, dead letters, signals."""

from __future__ import annotations

import math
import signal
import threading
import time

import orjson
import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.daemon.readahead import PageConnections
from codec import ArchivedPartition
from layers import ActiveLayer, ArchiveLayer, ArchiveQueue, KeySchema
from layers.errors import WrongKeyType
from layers.plumbing.replies import as_text
from stats import StatsChecker
from tests.helpers import archive_now, complete_partitions, start_archiver, wait_for


def _daemon(client: redis.Redis, namespace: str, **kw: object) -> ArchiverDaemon:
    return ArchiverDaemon(client, Config(namespace=namespace, block_ms=50, **kw), consumer="t")  # type: ignore[arg-type]


def test_archives_into_simple_tier_and_empties_the_stream(real_redis: redis.Redis, namespace: str) -> None:
    pids = complete_partitions(real_redis, namespace, 1200)
    keys = KeySchema(namespace)
    daemon = _daemon(real_redis, namespace)
    daemon.queue.ensure_group()
    drain(daemon)
    assert daemon.archived == 1200
    assert real_redis.hlen(keys.completed) == 1200
    assert real_redis.bitcount(keys.index) == 1200
    assert real_redis.xlen(keys.queue) == 0
    assert ArchiveQueue(real_redis, keys).state().pending == 0
    stored = ArchivedPartition.from_json(real_redis.hget(keys.completed, str(pids[-1])))  # type: ignore[arg-type]
    assert (stored.partition_id, stored.min_id, stored.max_id, stored.worker_id) == (
        1200,
        1_199_001,
        1_200_000,
        "w",
    )


def test_stream_memory_does_not_grow_with_archived_partitions(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    daemon = _daemon(real_redis, namespace)
    daemon.queue.ensure_group()
    sizes = []
    for _ in range(3):
        complete_partitions(real_redis, namespace, 1000)
        while daemon.run_once():
            pass
        sizes.append(real_redis.memory_usage(keys.queue))
    assert real_redis.xlen(keys.queue) == 0
    assert max(sizes) < 2000, sizes
    assert sizes[2] <= sizes[0] + 64, sizes  # a few bytes of node bookkeeping, not ~100 B per entry


def test_corrupt_entry_goes_to_dead_letter_with_reason(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 3)
    real_redis.xadd(keys.queue, {"p": b"{not json"})
    real_redis.xadd(keys.queue, {"p": orjson.dumps({"partition_id": -4})})
    daemon = _daemon(real_redis, namespace)
    daemon.queue.ensure_group()
    drain(daemon)
    assert daemon.archived == 3 and daemon.dead_lettered == 2
    dead = real_redis.xrange(keys.dead_letter)
    assert len(dead) == 2 and all(d[1][b"reason"] for d in dead)
    assert dead[0][1][b"p"] == b"{not json"
    assert real_redis.xlen(keys.queue) == 0


def test_archiving_a_redelivered_entry_is_idempotent(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 5)
    queue = ArchiveQueue(real_redis, keys)
    queue.ensure_group()
    entries = queue.read_new("a", 10, 10)
    archive = ArchiveLayer(real_redis, keys)
    parts = [(e.entry_id, ArchivedPartition.from_json(e.payload)) for e in entries]
    archive_now(archive, parts)
    archive_now(archive, parts)
    assert archive.simple_size() == 5 and archive.archived_total() == 5
    assert real_redis.xlen(keys.queue) == 0


def test_in_process_stop(real_redis: redis.Redis, namespace: str) -> None:
    daemon = _daemon(real_redis, namespace)
    thread = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
    thread.start()
    complete_partitions(real_redis, namespace, 50)
    wait_for(lambda: daemon.archived == 50, what="archiving")
    daemon.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_daemon_process_stops_cleanly_on_sigterm_and_sigint(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 20)
    for sig in (signal.SIGTERM, signal.SIGINT):
        name = f"c-{sig.name}"
        proc = start_archiver(engine_url, namespace, "--consumer", name)
        wait_for(lambda name=name: name.encode() in _consumers(real_redis, keys), what="consumer")  # type: ignore[misc]
        wait_for(lambda: real_redis.hlen(keys.completed) == 20, what="archiving")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert b"archiver stopped" in err
        assert b"Traceback" not in err


def _consumers(client: redis.Redis, keys: KeySchema) -> list[bytes]:
    try:
        return [c["name"] for c in client.xinfo_consumers(keys.queue, "archivers")]
    except redis.ResponseError:
        return []


def test_a_failing_round_is_logged_and_retried_not_fatal(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    config = Config(namespace=namespace, block_ms=20, stats_flush_interval_s=0.1, maintenance_interval_s=0)
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    thread = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_for(lambda: real_redis.hexists(keys.archivers, "t"), what="the archiver's first beat")
        real_redis.lpush(keys.index, "not a bitmap")  # from now on the commit script refuses: wrong type
        complete_partitions(real_redis, namespace, 20)
        wait_for(lambda: daemon.archived == 20, what="detail written")
        assert thread.is_alive() and real_redis.xlen(keys.queue) == 20  # nothing acknowledged
        real_redis.delete(keys.index)
        wait_for(lambda: real_redis.xlen(keys.queue) == 0, what="commit after the fault is gone")
        assert real_redis.bitcount(keys.index) == 20
    finally:
        daemon.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_a_lost_consumer_group_is_created_again(real_redis: redis.Redis, namespace: str) -> None:
    from archiver.daemon.loop import backoff_s

    config = Config(namespace=namespace, block_ms=20, stats_flush_interval_s=0.1, maintenance_interval_s=0)
    daemon = ArchiverDaemon(real_redis, config, consumer="heal")
    daemon.queue.ensure_group()
    complete_partitions(real_redis, namespace, 5)
    drain(daemon)
    real_redis.delete(daemon.keys.queue)  # as after a restart without data: no stream, no group
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(10_001, 15_000, 1000)
    for _ in range(5):
        part = layer.claim("w")
        assert part is not None
        layer.complete(part.partition_id, "w")
    with pytest.raises(redis.ResponseError, match="NOGROUP"):
        daemon.run_once()
    daemon.round_with_retry()  # what the loop does: the group is back, nothing raised
    drain(daemon)
    assert daemon.archive.archived_total() == 10 and real_redis.xlen(daemon.keys.queue) == 0
    assert 0.25 <= backoff_s(1) <= 0.5 and 15 <= backoff_s(20) <= 30


def test_poison_entries_are_dead_lettered_after_bounded_deliveries_and_requeued(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    from layers.archive.queue import QueueEntry
    from tests.helpers import run_cli

    keys = KeySchema(namespace)
    config = Config(namespace=namespace, block_ms=10, claim_idle_ms=1, max_deliveries=3, stats_flush_interval_s=0.1)
    daemon = ArchiverDaemon(real_redis, config, consumer="p")
    daemon.queue.ensure_group()
    complete_partitions(real_redis, namespace, 3)
    real_redis.set(keys.completed, "not a hash")  # every write of detail fails: the entries are never archived
    for _ in range(6):
        daemon.round_with_retry()
    assert real_redis.xlen(keys.dead_letter) == 3 and real_redis.xlen(keys.queue) == 0
    letters = daemon.queue.dead_letters()
    assert all("after 3 deliveries" in d["reason"] and d["requeueable"] for d in letters)
    listed = run_cli(engine_url, namespace, "dead-letters", "list")
    assert listed.returncode == 0 and listed.stdout.count("after 3 deliveries") == 3
    shown = run_cli(engine_url, namespace, "dead-letters", "show", letters[0]["id"])
    assert shown.returncode == 0 and orjson.loads(shown.stdout)["id"] == letters[0]["id"]
    assert run_cli(engine_url, namespace, "dead-letters", "show", "1-1").returncode == 1
    assert run_cli(engine_url, namespace, "dead-letters", "requeue").returncode == 2
    real_redis.delete(keys.completed)
    requeued = run_cli(engine_url, namespace, "dead-letters", "requeue", "--all")
    assert requeued.returncode == 0 and "requeued 3" in requeued.stdout
    drain(daemon)
    assert daemon.archive.archived_total() == 3 and real_redis.xlen(keys.dead_letter) == 0
    daemon.queue.dead_letter(QueueEntry("0-1", b"{}"), "a hand-made dead letter")
    assert run_cli(engine_url, namespace, "dead-letters", "purge", "--older-than", "0").stdout.startswith("purged 1")
    assert run_cli(engine_url, namespace, "dead-letters", "purge").returncode == 2


def test_idle_entries_are_looked_for_at_most_every_second_while_none_are_found(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XAUTOCLAIM costs a round trip: it runs every round only while it finds entries (or has not
    scanned them all), else at most every second (a tenth of ``claim_idle_ms`` when that is less),
    so entries another archiver left are still taken over soon after they become idle."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 30)
    daemon = _daemon(real_redis, namespace, read_count=5, claim_idle_ms=300)
    looks: list[int] = []
    take_over = daemon.queue.take_over

    def counted(*args: object) -> object:
        found = take_over(*args)  # type: ignore[arg-type]
        looks.append(len(found))
        return found

    monkeypatch.setattr(daemon.queue, "take_over", counted)
    every = 300 / 10_000  # a tenth of claim_idle_ms
    started = time.monotonic()
    assert drain(daemon) == 30  # six rounds (and an empty one)
    elapsed = time.monotonic() - started
    assert looks[0] == 0 and not any(looks)
    assert len(looks) <= 1 + math.ceil(elapsed / every)  # one look per interval at most, however slow the rounds
    complete_partitions(real_redis, namespace, 4)
    left = ArchiveQueue(real_redis, keys).read_new("gone", 10, 10)  # an archiver that died with them
    assert len(left) == 4
    before, started = len(looks), time.monotonic()
    wait_for(lambda: daemon.run_once() > 0, what="the idle entries taken over")
    elapsed = time.monotonic() - started
    daemon.flush()
    assert looks[-1] == 4 and real_redis.xlen(keys.queue) == 0
    assert len(looks) - before <= 1 + math.ceil(elapsed / every) and daemon.archive.archived_total() == 34


@pytest.mark.parametrize("options", [{}, {"protocol": 3}, {"decode_responses": True}])
def test_a_page_is_read_the_same_whatever_the_client_decodes(
    engine_url: str, namespace: str, options: dict[str, object]
) -> None:
    """The archiver's read of a page (`PageConnections.read`: XREADGROUP's reply as Redis sent it,
    RESP2 array or RESP3 map, bytes or text) and `read_new` (through the client, as on Redis
    Cluster) give the same entries, payloads as bytes, other fields ignored."""
    client = redis.Redis.from_url(engine_url, **options)  # type: ignore[arg-type]
    keys = KeySchema(namespace)
    reader = PageConnections(client, keys, "c", 10)
    try:
        queue = ArchiveQueue(client, keys)
        queue.ensure_group()
        entries = ({"p": b'{"n":1}'}, {"x": "1", "p": "é"})
        ids = [as_text(client.xadd(keys.queue, fields)) for fields in entries]
        assert reader.read(0) == (ids, [b'{"n":1}', "é".encode()])
        assert reader.read(0) == ([], [])
        ids = [as_text(client.xadd(keys.queue, fields)) for fields in entries]
        page = queue.read_new("c", 10, 0)
        assert [(e.entry_id, e.payload, e.deliveries) for e in page] == [
            (ids[0], b'{"n":1}', 1), (ids[1], "é".encode(), 1)
        ]
        assert queue.read_new("c", 10, 0) == []
    finally:
        reader.close()
        client.delete(keys.queue)
        client.close()


def test_a_commit_sent_with_a_page_is_run_again_where_the_server_lost_its_script(
    real_redis: redis.Redis, namespace: str
) -> None:
    """SCRIPT FLUSH between two commits sent with a page's reads: the script runner loads the
    script and runs the commit again, once (`Scripts.reply`)."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 300)
    daemon = _daemon(real_redis, namespace, read_count=100, stats_flush_count=100)
    daemon.queue.ensure_group()
    assert daemon.run_once() == 100
    real_redis.script_flush()
    drain(daemon)
    assert int(real_redis.bitcount(keys.index)) == 300 and daemon.queue.state().length == 0
    assert StatsChecker(real_redis, keys).check().ok


def test_a_page_whose_deferred_seals_cannot_be_written_is_not_committed(
    real_redis: redis.Redis, namespace: str
) -> None:
    """A page's seals are written with the next page's reads. When that write fails (here a
    foreign key where the page's shelf goes), the page is not committed: its entries stay
    pending, are taken over once idle and archived then, each counted once."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 300)
    daemon = _daemon(real_redis, namespace, compressed_from=0, read_count=100, claim_idle_ms=200)
    pages = []

    def fault(where: str) -> None:
        if where == "after_read":
            pages.append(where)
            if len(pages) == 2:  # page 1's seal of batch 0 waits to go with page 2's reads
                real_redis.rpush(keys.shelf(0), "not a shelf")

    daemon.fault_point = fault  # type: ignore[method-assign]
    daemon.queue.ensure_group()
    assert daemon.run_once() == 100
    with pytest.raises(WrongKeyType, match="is a list"):
        daemon.run_once()
    assert not real_redis.bitcount(keys.index) and daemon.queue.state().length == 300  # nothing committed
    real_redis.delete(keys.shelf(0))
    time.sleep(0.3)
    drain(daemon)
    assert int(real_redis.bitcount(keys.index)) == 300 and daemon.queue.state().pending == 0
    sealed = daemon.archive.sealing.decode_batch(daemon.archive.batch_blob(0))  # type: ignore[arg-type]
    assert [p.partition_id for p in sealed] == list(range(1, 100))
    assert StatsChecker(real_redis, keys).check().ok and daemon.dead_lettered == 0


def test_a_page_read_ahead_is_archived_when_the_archiver_stops(real_redis: redis.Redis, namespace: str) -> None:
    """A full page makes the archiver read the next one at once; stopping then archives that page
    too (delivered to it, it is its to finish) and leaves the rest of the queue to the others."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 250)
    daemon = _daemon(real_redis, namespace, read_count=100)
    daemon.queue.ensure_group()
    assert daemon.run_once() == 100
    assert daemon.pages.pipeline.prefetched
    assert daemon.queue.state().pending == 200  # the page in hand and the one read ahead
    daemon.finish()
    state = daemon.queue.state()
    assert state.pending == 0 and state.length == 50 and real_redis.hlen(keys.completed) == 200
    assert int(real_redis.bitcount(keys.index)) == 200 and StatsChecker(real_redis, keys).check().ok

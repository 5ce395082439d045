"""The tiered archive on the real engine: each tier, transitions, concurrent sealing, expiry."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from archiver import ArchiverDaemon, Config, QueryRouter, Source
from archiver.daemon.loop import drain
from archiver.daemon.pipeline import PageWrites
from codec import ArchivedPartition, ValidationError
from codec.framing import SHELF_SLOTS, pack_shelf, shelved, unpack_shelf
from layers import ArchiveLayer, ArchiveQueue, KeySchema, Tier, TierPolicy, migrate_step
from layers.archive.shelves import StoredBatch
from stats.rollup import commit_buffer
from tests.conftest import delete_namespace
from tests.flavours import Flavour
from tests.helpers import archive_now, complete_partitions

NOW = int(time.time())


def parts(first: int, count: int, completed_at: int = NOW) -> list[ArchivedPartition]:
    return [
        ArchivedPartition(p, (p - 1) * 1000 + 1, p * 1000, f"worker{p % 7}", completed_at, 300)
        for p in range(first, first + count)
    ]


def archive_layer(client: redis.Redis, namespace: str, **policy: object) -> ArchiveLayer:
    layer = ArchiveLayer(client, KeySchema(namespace), TierPolicy(**policy))  # type: ignore[arg-type]
    ArchiveQueue(client, layer.keys).ensure_group()
    return layer


def store(layer: ArchiveLayer, records: list[ArchivedPartition]) -> None:
    archive_now(layer, [(f"0-{r.partition_id}", r) for r in records])


def page_writes(layer: ArchiveLayer) -> PageWrites:
    """The archiver's page writes on ``layer``: a page's seals deferred to the next page's round trip."""
    return PageWrites(layer, commit_buffer(layer))


def write_page(writes: PageWrites, records: list[ArchivedPartition], tier: Tier) -> None:
    """A page as the archiver writes it in a batch tier: staged and read (carrying the seals and
    bookkeeping of the pages before), its whole batches encoded and deferred."""
    writes.defer(writes.stage_page(records), tier, [f"0-{r.partition_id}" for r in records])


def put_slot(client: redis.Redis, layer: ArchiveLayer, batch_no: int, blob: bytes) -> None:
    """Overwrite one slot of a batch's shelf as it is, bypassing every check (a damaged blob)."""
    shelf_no, slot = divmod(batch_no, SHELF_SLOTS)
    held = client.get(layer.keys.shelf(shelf_no))
    slots = unpack_shelf(held) if held else [None] * SHELF_SLOTS  # type: ignore[arg-type]
    slots[slot] = shelved(blob)
    client.set(layer.keys.shelf(shelf_no), pack_shelf(slots))


def router(client: redis.Redis, namespace: str, layer: ArchiveLayer) -> QueryRouter:
    return QueryRouter(client, namespace, policy=layer.policy)


def test_compressed_tier_stages_then_seals_full_and_idle_batches(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    store(layer, parts(1, 250))
    keys = layer.keys
    assert layer.tier() is Tier.COMPRESSED
    assert layer.batch_blob(0) and layer.batch_blob(1)
    assert layer.batch_blob(2) is None and real_redis.hlen(keys.staging(2)) == 51
    q = router(real_redis, namespace, layer)
    assert q.get(150).source is Source.BATCH and q.get(220).source is Source.STAGING
    assert q.get(220).partition == parts(220, 1)[0]
    assert layer.sealing.seal_idle() == 1
    assert q.get(220).source is Source.BATCH and not real_redis.exists(keys.staging(2))
    assert real_redis.bitcount(keys.index) == 250 and layer.archived_total() == 250
    assert real_redis.hlen(keys.completed) == 0 and layer.open_batch_count() == 0
    blob_bytes = sum(len(layer.batch_blob(b) or b"") for b in range(3))
    json_bytes = sum(len(p.to_json()) for p in parts(1, 250))
    assert layer.compression_ratio() == round(json_bytes / blob_bytes, 2) > 10


def test_whole_batches_in_hand_are_sealed_without_staging(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=3600)
    keys, staged, stage = layer.keys, [], layer._add_stage
    monkeypatch.setattr(
        layer, "_add_stage", lambda trip, recs: staged.extend(p.partition_id for p in recs) or stage(trip, recs)
    )
    store(layer, parts(1, 250))  # batches 0 (1..99) and 1 whole in hand; 200..250 staged
    assert staged == list(range(200, 251)) and layer.batch_blob(0) and layer.batch_blob(1)
    store(layer, parts(251, 100))  # batch 2 = 51 staged before + 49 in hand; batch 3 partial
    assert staged == list(range(200, 351))
    assert layer.sealing.decode_batch(layer.batch_blob(2)) == parts(200, 100)  # type: ignore[arg-type]
    assert not real_redis.exists(keys.staging(2)) and real_redis.hlen(keys.staging(3)) == 51
    q = router(real_redis, namespace, layer)
    for pid in (1, 99, 100, 199, 200, 250, 251, 299):
        assert q.get(pid).source is Source.BATCH and q.get(pid).partition == parts(pid, 1)[0], pid
    assert q.get(320).source is Source.STAGING and layer.open_batch_count() == 1
    blob_bytes = sum(len(layer.batch_blob(b) or b"") for b in range(3))
    json_bytes = sum(len(p.to_json()) for p in parts(1, 299))
    assert layer.compression_ratio() == round(json_bytes / blob_bytes, 2)  # counted once per record


def test_straggler_reseals_its_batch(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    batch = parts(500, 100)
    store(layer, batch[:40] + batch[41:])
    layer.sealing.seal_idle()
    store(layer, [batch[40]])
    assert layer.sealing.seal_idle() == 1
    assert layer.sealing.decode_batch(layer.batch_blob(5)) == batch  # type: ignore[arg-type]


def test_concurrent_archivers_sealing_one_batch_lose_nothing(real_redis: redis.Redis, namespace: str) -> None:
    batch = parts(700, 100)
    errors: list[BaseException] = []

    def archiver(share: list[ArchivedPartition]) -> None:
        layer = archive_layer(real_redis, namespace, compressed_from=0)
        try:
            for record in share:
                layer.stage([record])
                layer.sealing.seal(7)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=archiver, args=(batch[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    layer = archive_layer(real_redis, namespace, compressed_from=0)
    layer.sealing.seal(7)
    assert layer.sealing.decode_batch(layer.batch_blob(7)) == batch  # type: ignore[arg-type]
    assert not real_redis.exists(layer.keys.staging(7))


def test_summary_tier_expires_from_completion_time(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, summary_above=0, retention_s=3, seal_idle_s=0)
    store(layer, parts(100, 100, completed_at=int(time.time())))
    store(layer, parts(1, 99, completed_at=NOW - 86400))  # a backfill: expires at once
    assert layer.tier() is Tier.SUMMARY
    q = router(real_redis, namespace, layer)
    assert q.get(5).source is Source.EXPIRED  # read-time check: hidden before the sweep deleted it
    while migrate_step(layer):  # indexes batches sealed before the tier moved up, then sweeps
        pass
    keys = layer.keys
    assert layer.batch_blob(0) is None
    assert layer.batch_blob(1) and real_redis.ttl(keys.shelf(0)) == -1
    old = q.get(5)
    assert old.source is Source.EXPIRED and old.degraded
    assert q.get(150).source is Source.BATCH
    later = time.time() + 4
    assert q.get(150).source is Source.BATCH
    assert migrate_step(layer, now=later) == 100  # the sweep counts what it expires
    assert not real_redis.exists(keys.shelf(0)) and real_redis.zcard(keys.expiry) == 0  # the emptied shelf is gone
    assert q.get(150).source is Source.EXPIRED
    assert real_redis.getbit(keys.index, 150) == 1  # "ever completed" survives expiry
    assert int(real_redis.hget(keys.archive_meta, "expired")) == 199  # type: ignore[arg-type]


def test_simple_to_compressed_transition_moves_everything(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=1000, migrate_chunk=150, seal_idle_s=0)
    store(layer, parts(1, 999))
    assert layer.tier() is Tier.SIMPLE and layer.simple_size() == 999
    memory_before = real_redis.memory_usage(layer.keys.completed) or 0
    store(layer, parts(1000, 200))
    assert layer.tier() is Tier.COMPRESSED
    q = router(real_redis, namespace, layer)
    stop = threading.Event()
    misses: list[int] = []

    def read_all_the_time() -> None:
        while not stop.is_set():
            for pid in range(1, 1200, 37):
                if not q.get(pid).found or q.get(pid).degraded:
                    misses.append(pid)

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    steps = 0
    while migrate_step(layer):
        steps += 1
    layer.sealing.seal_idle()
    stop.set()
    reader.join()
    assert misses == []
    assert steps >= 7  # bounded chunks of 150
    assert layer.simple_size() == 0 and not real_redis.exists(layer.keys.completed)
    assert all(q.get(p).source is Source.BATCH for p in (1, 500, 999, 1000, 1199))
    sealed = real_redis.memory_usage(layer.keys.shelf(0)) or 0
    assert sealed < memory_before / 5


def test_compressed_to_summary_indexes_existing_batches_for_expiry(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, summary_above=300, retention_s=3600)
    store(layer, parts(1, 299))
    assert real_redis.zcard(layer.keys.expiry) == 0
    store(layer, parts(300, 100))
    assert layer.tier() is Tier.SUMMARY
    while migrate_step(layer):
        pass
    assert [int(b) for b in real_redis.zrange(layer.keys.expiry, 0, -1)] == [0, 1, 2, 3]
    assert real_redis.ttl(layer.keys.shelf(0)) == -1
    assert migrate_step(layer, now=NOW + 3599) == 0 and migrate_step(layer, now=NOW + 3601) == 399


def test_corrupt_batch_blob_degrades_and_is_counted(real_redis: redis.Redis, namespace: str, flavour: Flavour) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0)
    store(layer, parts(100, 100))
    blob = bytearray(layer.batch_blob(1))  # type: ignore[arg-type]
    blob[20] ^= 0x10
    put_slot(real_redis, layer, 1, bytes(blob))
    q = flavour.router(real_redis, namespace, policy=layer.policy)
    answer = q.get(150)
    assert answer.degraded and answer.source is Source.EXPIRED and "cannot be decoded" in answer.detail
    assert q.decode_failures == 1
    with_summary = flavour.router(real_redis, namespace, policy=layer.policy, summary_lookup=lambda pid: {"range": 0})
    answer = with_summary.get(150)
    assert answer.source is Source.STATISTICS and answer.summary == {"range": 0}


def test_batch_size_cannot_change_under_a_namespace(real_redis: redis.Redis, namespace: str) -> None:
    store(archive_layer(real_redis, namespace, batch_size=100), parts(1, 5))
    with pytest.raises(ValidationError):
        store(archive_layer(real_redis, namespace, batch_size=50), parts(6, 5))


def test_daemon_archives_through_the_tiers(real_redis: redis.Redis, namespace: str) -> None:
    config = Config(
        namespace=namespace,
        block_ms=20,
        compressed_from=300,
        summary_above=600,
        seal_idle_s=0,
        maintenance_interval_s=0,
    )
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    daemon.queue.ensure_group()
    pids = complete_partitions(real_redis, namespace, 1000)
    drain(daemon)
    q = QueryRouter(real_redis, namespace, policy=config.policy)
    answers = [q.get(p) for p in pids]
    assert daemon.archive.tier() is Tier.SUMMARY
    assert all(a.found and not a.degraded for a in answers)
    assert {a.source for a in answers} == {Source.BATCH}
    assert real_redis.hlen(daemon.keys.completed) == 0 and real_redis.xlen(daemon.keys.queue) == 0
    assert daemon.archive.archived_total() == 1000


def test_resealing_a_corrupt_batch_quarantines_the_blob(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    batch = parts(300, 100)
    store(layer, batch[:99])
    layer.sealing.seal_idle()
    corrupt = b"\xa7P\x01\x01garbage"
    put_slot(real_redis, layer, 3, corrupt)
    store(layer, batch[99:])  # a straggler arrives for the corrupt batch
    layer.sealing.seal_idle()
    assert layer.sealing.decode_batch(layer.batch_blob(3)) == batch[99:]  # type: ignore[arg-type]
    assert real_redis.get(layer.keys.quarantine(3)) == corrupt
    dead = real_redis.xrange(layer.keys.dead_letter)
    assert any(b"quarantined" in d[1][b"reason"] for d in dead)


def test_a_corrupt_staged_record_is_dead_lettered_not_fatal(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    store(layer, parts(400, 10))
    real_redis.hset(layer.keys.staging(4), "455", b"{broken")
    assert layer.sealing.seal_idle() == 1
    assert [p.partition_id for p in layer.sealing.decode_batch(layer.batch_blob(4))] == list(  # type: ignore[arg-type]
        range(400, 410)
    )
    assert not real_redis.exists(layer.keys.staging(4))
    assert b"corrupt staged record" in real_redis.xrange(layer.keys.dead_letter)[0][1][b"reason"]


def test_a_batch_with_only_corrupt_staged_records_is_cleared(real_redis: redis.Redis, namespace: str) -> None:
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    layer.stage(parts(300, 1))
    real_redis.hset(layer.keys.staging(3), "300", b"{broken")
    assert layer.sealing.seal(3) is False
    assert not real_redis.exists(layer.keys.staging(3)) and layer.batch_blob(3) is None
    assert layer.open_batch_count() == 0
    assert len(real_redis.xrange(layer.keys.dead_letter)) == 1


@pytest.mark.parametrize("spread", [1, 997, 1_000_003])
def test_index_lookup_agrees_with_getbit_dense_or_scattered(
    real_redis: redis.Redis, namespace: str, spread: int
) -> None:
    layer = archive_layer(real_redis, namespace)
    pids = [1 + i * spread for i in range(300)]
    for pid in pids[::3]:
        real_redis.setbit(layer.keys.index, pid, 1)
    asked = [*pids, pids[-1] + 8 * 10**6]  # one beyond the end of the bitmap
    expected = [bool(real_redis.getbit(layer.keys.index, pid)) for pid in asked]
    assert sum(expected) == 100
    assert layer.indexed(asked) == expected
    assert layer.indexed(list(reversed(asked))) == list(reversed(expected))


@pytest.mark.parametrize("meanwhile", ["staged", "sealed"])
def test_seal_many_writes_in_one_pass_and_loses_nothing_changed_meanwhile(
    real_redis: redis.Redis, namespace: str, meanwhile: str
) -> None:
    """Between the read and the write of batch 11, another archiver either stages a record into
    it (kept staged, the batch stays open for the next seal) or seals one into it (the write is
    refused and the batch sealed again with both)."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    other = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    records = parts(1000, 300)
    by_batch = {b: [r for r in records if r.partition_id // 100 == b] for b in (10, 11, 12)}
    late = parts(1150, 1)[0]
    original = layer.sealing._prepare_seal

    def change_meanwhile(stored: StoredBatch, *args: object, **kwargs: object) -> object:
        prepared = original(stored, *args, **kwargs)  # type: ignore[arg-type]
        if stored.batch_no == 11 and not other.sealing.seals:
            other.stage([late]) if meanwhile == "staged" else other.sealing.seal(11, extra=[late])
        return prepared

    layer.sealing._prepare_seal = change_meanwhile  # type: ignore[method-assign]
    assert layer.sealing.seal_many({b: [r for r in rs if r != late] for b, rs in by_batch.items()}) == 3
    if meanwhile == "staged":
        assert real_redis.hkeys(layer.keys.staging(11)) == [b"1150"] and layer.open_batch_count() == 1
        assert layer.sealing.seal_idle() == 1
    else:
        assert other.sealing.seals[11] == 1 and layer.sealing.seals[11] == 1  # written once, after one refusal
    for b, rs in by_batch.items():
        assert layer.sealing.decode_batch(layer.batch_blob(b)) == rs  # type: ignore[arg-type]
        assert not real_redis.exists(layer.keys.staging(b))
    assert layer.open_batch_count() == 0


def test_a_registry_lost_with_redis_is_not_trusted_from_memory(real_redis: redis.Redis, namespace: str) -> None:
    """Redis comes back empty while two archivers run: numbers the first still holds in memory
    now name other workers, and must not be written into new blobs or used to read them."""
    a = archive_layer(real_redis, namespace, compressed_from=0)
    a.sealing.seal_many({1: [ArchivedPartition(p, p, p, "x" if p % 2 else "y", NOW, 1) for p in range(100, 200)]})
    assert a.workers.map.known_short_id("x") == 1
    reader = router(real_redis, namespace, a)
    reader.get(150)  # a reader that has read the numbers from before: x = 1, y = 2
    assert reader.archive.workers.map.known_short_id("x") == 1
    delete_namespace(real_redis, namespace)
    b = archive_layer(real_redis, namespace, compressed_from=0)
    b.sealing.seal_many({2: [ArchivedPartition(p, p, p, "y", NOW, 1) for p in range(200, 300)]})  # y is now 1
    x_batch = [ArchivedPartition(p, p, p, "x", NOW, 1) for p in range(300, 400)]
    a.sealing.seal(3, extra=x_batch)
    assert b.sealing.decode_batch(a.batch_blob(3)) == x_batch  # type: ignore[arg-type]
    answer = reader.get(250)
    assert answer.partition is not None and answer.partition.worker_id == "y"


def test_a_seal_closes_its_batch_after_the_server_forgot_the_cleanup_script(
    fake_redis: redis.Redis, namespace: str
) -> None:
    """The staged records a seal deletes are deleted by a script run in the seal's bookkeeping
    round trip; after SCRIPT FLUSH (on fakeredis: never on a shared server) it runs again after
    the batch's staging was counted, which is counted again: the batch is not left open."""
    layer = archive_layer(fake_redis, namespace, compressed_from=0, seal_idle_s=0)
    store(layer, parts(100, 50))
    assert layer.sealing.seal_idle() == 1  # the cleanup script is loaded now
    store(layer, parts(300, 50))
    fake_redis.script_flush()
    assert layer.sealing.seal_idle() == 1
    assert layer.open_batch_count() == 0 and not fake_redis.exists(layer.keys.staging(3))
    assert layer.sealing.decode_batch(layer.batch_blob(3)) == parts(300, 50)  # type: ignore[arg-type]


def test_a_seal_deferred_is_written_with_the_next_reads_and_its_bookkeeping_after(
    real_redis: redis.Redis, namespace: str
) -> None:
    """The archiver's pages: a page's seals are written with the next page's reads (or by
    `PageWrites.write_now`) and their bookkeeping (staged records deleted, batch closed, byte
    counters) with the reads after; meanwhile a record staged before answers from its staging."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=3600)
    writes = page_writes(layer)
    keys, q = layer.keys, router(real_redis, namespace, layer)
    write_page(writes, parts(1, 150), Tier.COMPRESSED)  # 100..150 staged
    assert layer.batch_blob(0) is None  # batch 0: encoded, not written
    write_page(writes, parts(151, 49), Tier.COMPRESSED)  # batch 1 whole in staging
    assert layer.sealing.decode_batch(layer.batch_blob(0)) == parts(1, 99)  # type: ignore[arg-type]
    assert layer.batch_blob(1) is None and layer.compression_ratio() == 0.0  # batch 0's counters wait
    assert real_redis.hlen(keys.staging(1)) == 100 and q.get(180).partition == parts(180, 1)[0]
    write_page(writes, parts(200, 10), Tier.COMPRESSED)  # batch 1 written now
    assert layer.sealing.decode_batch(layer.batch_blob(1)) == parts(100, 100)  # type: ignore[arg-type]
    assert real_redis.hlen(keys.staging(1)) == 100 and layer.compression_ratio() > 0  # batch 1's bookkeeping waits
    write_page(writes, parts(210, 90), Tier.COMPRESSED)
    assert not real_redis.exists(keys.staging(1)) and layer.batch_blob(2) is None
    writes.write_now()
    assert not writes.owed and layer.open_batch_count() == 0 and not real_redis.exists(keys.staging(2))
    for pid in (1, 120, 199, 250, 299):
        assert q.get(pid).source is Source.BATCH and q.get(pid).partition == parts(pid, 1)[0], pid
    blob_bytes = sum(len(layer.batch_blob(b) or b"") for b in range(3))
    json_bytes = sum(len(p.to_json()) for p in parts(1, 299))
    assert layer.compression_ratio() == round(json_bytes / blob_bytes, 2)  # every seal counted, once


def test_a_seal_deferred_and_refused_is_sealed_again_with_what_changed(real_redis: redis.Redis, namespace: str) -> None:
    """Another archiver writes the batch's slot between a page's read and its deferred write: the
    write is refused and the batch sealed again, from both."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=3600)
    writes = page_writes(layer)
    other = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=3600)
    mine = parts(300, 100)
    write_page(writes, mine, Tier.COMPRESSED)  # batch 3, whole in hand
    theirs = [ArchivedPartition(p.partition_id, p.min_id, p.max_id, "z", p.completed_at, 1) for p in mine[:10]]
    other.write_detail(theirs[:5])  # staged by the other, then ...
    other.sealing.seal(3, Tier.COMPRESSED)  # ... sealed into the slot
    writes.write_now()
    assert layer.sealing.decode_batch(layer.batch_blob(3)) == mine  # type: ignore[arg-type]  # the records in hand win
    assert layer.sealing.seals[3] == 1 and not real_redis.exists(layer.keys.staging(3))

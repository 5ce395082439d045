"""Shelves: the format (hypothesis), the Lua writer against the Python twin on each engine,
damaged shelves, batch keys from before shelves, and the expiry sweep against a reseal."""

from __future__ import annotations

import random
import time

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archiver import QueryRouter, Source
from archiver.elk.export import Exporter
from codec import ArchivedPartition, DecodeError, encode_blob
from codec.framing import SHELF_SLOTS, pack_shelf, shelf_slot, shelved, unpack_shelf
from layers import ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy, WrongKeyType, migrate_step
from layers.archive.shelves import SlotWrite
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts
from stats import StatsChecker
from tests.conftest import delete_namespace
from tests.flavours import Flavour
from tests.helpers import archive_now

NOW = int(time.time())
slot_lists = st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=40)), max_size=SHELF_SLOTS)


def parts(first: int, count: int, completed_at: int = NOW) -> list[ArchivedPartition]:
    return [
        ArchivedPartition(p, (p - 1) * 1000 + 1, p * 1000, f"worker{p % 5}", completed_at, 200 + p % 50)
        for p in range(first, first + count)
    ]


def layer_on(client: redis.Redis, namespace: str, **policy: object) -> ArchiveLayer:
    layer = ArchiveLayer(client, KeySchema.of(namespace, client=client), TierPolicy(**policy))  # type: ignore[arg-type]
    ArchiveQueue(client, layer.keys).ensure_group()
    return layer


@given(slot_lists)
def test_a_shelf_gives_back_every_slot(slots: list[bytes | None]) -> None:
    raw = pack_shelf(slots)
    if not any(slots):
        assert raw == b""
        return
    expected = slots + [None] * (SHELF_SLOTS - len(slots))
    assert unpack_shelf(raw) == expected
    assert [shelf_slot(raw, i) for i in range(SHELF_SLOTS)] == expected
    assert len(raw) == 4 + 4 * SHELF_SLOTS + sum(len(s or b"") for s in slots)


@given(slot_lists.filter(any), st.data())
def test_a_damaged_shelf_table_is_a_decode_error_or_reads_as_bytes(
    slots: list[bytes | None], data: st.DataObject
) -> None:
    raw = bytearray(pack_shelf(slots))
    cut = data.draw(st.integers(0, len(raw) - 1))
    for damaged in (bytes(raw[:cut]), bytes(raw[:cut]) + b"x" + bytes(raw[cut + 1 :])):
        try:
            read = unpack_shelf(damaged)
        except DecodeError:
            continue
        assert all(s is None or isinstance(s, bytes) for s in read)  # only the blobs' own checks can tell


def test_shelf_reader_refuses_what_is_not_a_shelf() -> None:
    for raw, why in (
        (b"\xa7", "shorter than its header"),
        (b"\xa7P\x01\x01abcd", "wrong magic"),
        (b"\xa7S\x02\x01" + b"\0" * 4, "version 2"),
        (b"\xa7S\x01\x02" + b"\0" * 4, "shorter than its slot table"),
        (b"\xa7S\x01\x01\x05\0\0\0abc", "does not match"),
    ):
        with pytest.raises(DecodeError, match=why):
            unpack_shelf(raw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_lua_writer_builds_what_pack_shelf_builds(any_redis: redis.Redis, data: st.DataObject) -> None:
    """Random slot writes through `shelf_put.lua` (each engine, fakeredis included) give the bytes
    of the Python twin; a write that read a slot as it no longer is gets refused and changes nothing
    (but counts as written where the slot already holds the blob it brings)."""
    namespace = f"t{random.getrandbits(40):010x}"  # one per example: the fixture's would be shared
    layer = layer_on(any_redis, namespace)
    key = layer.keys.shelf(3)
    model: list[bytes | None] = [None] * SHELF_SLOTS
    try:
        for _ in range(data.draw(st.integers(1, 6))):
            chosen = data.draw(st.lists(st.integers(0, SHELF_SLOTS - 1), min_size=1, max_size=4, unique=True))
            writes, stale = [], data.draw(st.booleans())
            for slot in chosen:
                body = data.draw(st.one_of(st.just(b""), st.binary(min_size=1, max_size=30)))
                blob = b"\xa7P\x01" + body if body else b""  # a framed blob's prefix, then anything
                held = b"\xa7P\x01stale" + (model[slot] or b"") if stale else model[slot]
                writes.append(SlotWrite(3 * SHELF_SLOTS + slot, held, blob))
            written = layer.shelves.write(writes)
            if stale:  # refused, unless the slot holds that blob already (a write sent again, its reply lost)
                assert written == {w.batch_no for w in writes if w.blob and w.blob == model[w.batch_no % SHELF_SLOTS]}
            for w in writes:
                if w.batch_no in written:
                    model[w.batch_no % SHELF_SLOTS] = w.blob or None
            held_raw = any_redis.get(key)
            assert (held_raw or b"") == pack_shelf([shelved(m) if m else None for m in model])
            got = layer.shelves.read(range(3 * SHELF_SLOTS, 4 * SHELF_SLOTS))
            assert [got[b].slot for b in sorted(got)] == model
    finally:
        delete_namespace(any_redis, namespace)


def _lookup_slot(client: redis.Redis, keys: KeySchema, slot: int) -> tuple[bytes | None, str]:
    """What `lookup.lua` cuts out of shelf 0 for ``slot``, and why it could not ('' if it could)."""
    k = keys
    names = [k.active, k.index, k.completed, k.staging(slot), k.done, k.expiry, k.archive_meta, k.workers]
    reply = Scripts.of(client)("lookup", [*names, k.shelf(0), k.batch(slot), k.cold_map], [1, slot, slot])
    return reply[8] or None, as_text(reply[10])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slots=slot_lists, damage=st.sampled_from(["none", "cut", "table", "magic", "version", "count"]))
def test_the_lookup_script_reads_shelves_as_the_codec_does(
    real_redis: redis.Redis, namespace: str, slots: list[bytes | None], damage: str
) -> None:
    """Every slot `lookup.lua` cuts out of a shelf is the codec's `shelf_slot`, and a slot it cannot
    read is refused with the codec's own words (damage to the header refuses every slot, damage to
    the table the slots it describes); `shelf_put.lua` refuses a shelf with any damage at all, as
    `unpack_shelf` does, and writes nothing."""
    keys = KeySchema(namespace)
    raw = pack_shelf(slots) or pack_shelf([b"x"])
    raw = {
        "none": raw,
        "cut": raw[:-1],
        "table": raw[:4] + b"\xff\xff\xff\x7f" + raw[8:],
        "magic": b"\xa7P" + raw[2:],
        "version": raw[:2] + b"\x02" + raw[3:],
        "count": raw[:3] + b"\x00" + raw[4:],
    }[damage]
    real_redis.set(keys.shelf(0), raw)
    for slot in range(SHELF_SLOTS + 1):
        try:
            expected: tuple[bytes | None, str] = (shelf_slot(raw, slot), "")
        except DecodeError as exc:
            expected = (None, str(exc))
        assert _lookup_slot(real_redis, keys, slot) == expected, slot
    try:
        unpack_shelf(raw)
        whole = ""
    except DecodeError as exc:
        whole = str(exc)
    assert bool(whole) == (damage != "none")
    reply = Scripts.of(real_redis)("shelf_put", [keys.shelf(0)], [SHELF_SLOTS, 0, b"", b"y"])
    if whole:
        assert [as_text(x) for x in reply] == ["err", "corrupt", f"{keys.shelf(0)}: {whole}"]
        assert real_redis.get(keys.shelf(0)) == raw
    else:
        assert reply == [int(shelf_slot(raw, 0) is None)]


def test_a_shelf_key_of_another_type_is_refused_untouched(real_redis: redis.Redis, namespace: str) -> None:
    layer = layer_on(real_redis, namespace)
    real_redis.rpush(layer.keys.shelf(0), "x")
    with pytest.raises(WrongKeyType):
        layer.shelves.write([SlotWrite(1, None, b"\xa7P\x01blob")])
    assert real_redis.lrange(layer.keys.shelf(0), 0, -1) == [b"x"]


def test_a_damaged_shelf_is_reported_then_quarantined_and_rebuilt(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    layer = layer_on(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in parts(100, 100)])
    key = layer.keys.shelf(0)
    damaged = real_redis.get(key)[:-3]  # type: ignore[index]
    real_redis.set(key, damaged)
    answer = flavour.router(real_redis, namespace, policy=layer.policy).get(150)
    assert answer.degraded and "shelf 0 is corrupt" in answer.detail
    assert real_redis.get(key) == damaged  # a read never repairs
    late = parts(200, 1)
    layer.stage(late)
    assert layer.sealing.seal(2)  # the next seal puts the damaged shelf aside and starts it again
    assert real_redis.get(layer.keys.shelf_quarantine(0)) == damaged
    assert layer.sealing.decode_batch(layer.batch_blob(2)) == late  # type: ignore[arg-type]
    assert layer.batch_blob(1) is None
    assert any(b"corrupt shelf" in e[1][b"reason"] for e in real_redis.xrange(layer.keys.dead_letter))


def test_batch_keys_from_before_shelves_are_read_and_moved_by_the_next_seal(
    real_redis: redis.Redis, namespace: str
) -> None:
    layer = layer_on(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in parts(100, 100)])
    old = parts(100, 100)
    blob = encode_blob(old, layer.workers.register({p.worker_id for p in old}))
    layer.shelves.write([SlotWrite(1, layer.shelves.read([1])[1].slot, b"")])
    real_redis.set(layer.keys.batch(1), blob)  # as the version before shelves left it
    router = QueryRouter(real_redis, namespace, policy=layer.policy)
    assert router.get(150).source is Source.BATCH and router.get(150).partition == old[50]
    exported = [pid for pid, _ in Exporter(layer, "native").records()]
    assert exported == list(range(100, 200))
    assert StatsChecker(real_redis, layer.keys, policy=layer.policy).check().partitions_with_detail == 100
    straggler = ArchivedPartition(150, 149001, 150000, "late", NOW, 1)
    layer.stage([straggler])
    assert layer.sealing.seal(1)
    assert not real_redis.exists(layer.keys.batch(1))
    assert layer.sealing.decode_batch(layer.batch_blob(1)) == [*old[:50], straggler, *old[51:]]  # type: ignore[arg-type]


def test_the_sweep_leaves_a_batch_sealed_again_since_it_read_it(real_redis: redis.Redis, namespace: str) -> None:
    layer = layer_on(real_redis, namespace, compressed_from=0, summary_above=0, retention_s=60, seal_idle_s=0)
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in parts(100, 100, completed_at=NOW - 3600)])
    layer.check_batch_size()
    read = layer.shelves.read

    def reseal_meanwhile(numbers: object, **kwargs: bool) -> object:
        got = read(numbers, **kwargs)  # type: ignore[arg-type]
        layer.sealing.seal(1, extra=parts(150, 1))  # a straggler's record (completed now) sealed in between
        return got

    layer.shelves.read = reseal_meanwhile  # type: ignore[method-assign]
    migrate_step(layer)
    layer.shelves.read = read  # type: ignore[method-assign]
    assert layer.batch_blob(1) is not None and int(real_redis.hget(layer.keys.archive_meta, "expired") or 0) == 0
    assert real_redis.zscore(layer.keys.expiry, "1") == NOW  # waits for its new newest completion


def test_a_namespace_from_before_shelves_is_moved_into_shelves_once(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    """Batch keys as the version before shelves left them (one damaged) are moved by the
    maintenance walk; lookups answer throughout and the walk is done once."""
    layer = layer_on(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    records = parts(1, 399)
    workers = layer.workers.register({p.worker_id for p in records})
    for b in range(4):
        real_redis.set(layer.keys.batch(b), encode_blob([p for p in records if p.partition_id // 100 == b], workers))
    real_redis.set(layer.keys.batch(4), b"\xa7P\x01\x01damaged")
    for p in records:
        real_redis.setbit(layer.keys.index, p.partition_id, 1)
    real_redis.hset(layer.keys.archive_meta, mapping={"total": 399, "max_pid": 499, "batch_size": 100})
    router = flavour.router(real_redis, namespace, policy=layer.policy)
    assert all(router.get(pid).source is Source.BATCH for pid in (1, 150, 399))
    steps = 0
    while migrate_step(layer):
        steps += 1
    assert steps == 1 and real_redis.hget(layer.keys.archive_meta, "shelved") == b"1"
    assert not any(real_redis.exists(layer.keys.batch(b)) for b in range(5))
    assert real_redis.get(layer.keys.quarantine(4)) == b"\xa7P\x01\x01damaged"
    assert [layer.sealing.decode_batch(layer.batch_blob(b)) for b in range(4)] == [  # type: ignore[arg-type]
        [p for p in records if p.partition_id // 100 == b] for b in range(4)
    ]
    assert all(router.get(pid).partition == records[pid - 1] for pid in (1, 150, 399))
    assert migrate_step(layer) == 0


def test_the_lookup_script_answers_as_the_pipeline_does(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    """`lookup.lua` (a single server) and the pipeline (Redis Cluster) read the same things: each
    kind of answer, a batch from before shelves, a damaged slot and a damaged shelf agree."""
    layer = layer_on(real_redis, namespace, compressed_from=0, summary_above=0, retention_s=600, seal_idle_s=0)
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in parts(1, 299, completed_at=NOW)])
    archive_now(layer, [(f"0-{p.partition_id}", p) for p in parts(300, 100, completed_at=NOW - 3600)])
    layer.stage(parts(450, 5))
    old = parts(6400, 100)
    real_redis.set(layer.keys.batch(64), encode_blob(old, layer.workers.register({p.worker_id for p in old})))
    blob = bytearray(layer.batch_blob(2))  # type: ignore[arg-type]
    blob[30] ^= 1
    layer.shelves.write([SlotWrite(2, layer.batch_blob(2), bytes(blob))])
    scripted, piped = (flavour.router(real_redis, namespace, policy=layer.policy) for _ in range(2))
    piped._scripted = False
    asked = [1, 150, 250, 350, 452, 499, 6450, 10**6]

    def answers() -> list[tuple[object, ...]]:
        out = []
        for pid in asked:
            a, b = scripted.get(pid), piped.get(pid)
            assert a == b, pid
            out.append((a.source, a.degraded))
        return out

    assert answers() == [
        (Source.BATCH, False),
        (Source.BATCH, False),
        (Source.EXPIRED, True),  # the damaged slot: no statistics in this test to fall back on
        (Source.EXPIRED, True),  # past its retention
        (Source.STAGING, False),
        (Source.NONE, False),
        (Source.BATCH, False),  # from its own key
        (Source.NONE, False),
    ]
    real_redis.setrange(layer.keys.shelf(0), 10, b"\xff\xff")  # the slot table no longer adds up
    answers()
    assert "shelf 0 is corrupt" in scripted.get(150).detail


def test_scripts_run_together_load_again_after_the_server_forgot_them(fake_redis: redis.Redis) -> None:
    """`Scripts.run_many` sends plain EVALSHA (no SCRIPT EXISTS round trip); after SCRIPT FLUSH
    (on fakeredis: never on a shared server) the calls it refused run again and load the script."""
    from layers.plumbing.scripts import Scripts

    scripts = Scripts.of(fake_redis)
    fake_redis.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert scripts.run_many([("hdel_if_equal", ["h"], ["a", "1"]), ("hdel_if_equal", ["h"], ["b", "9"])]) == [1, 0]
    fake_redis.script_flush()
    assert scripts.run_many([("hdel_if_equal", ["h"], ["b", "2"]), ("del_if_equal", ["s"], ["x"])]) == [1, 0]
    assert fake_redis.hgetall("h") == {b"c": b"3"}

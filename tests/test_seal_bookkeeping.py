"""What a seal leaves besides its blob, on the real engine: the expiry index entry of a batch sealed
in the summary tier (however it was sealed and whatever tier its sealer last read), and the byte
counters behind the compression ratio, exact when a page's pipeline fails and is sent again."""

from __future__ import annotations

import pytest
import redis

from layers import Tier
from layers.archive.transitions import index_expiry_step
from tests.test_tiers import archive_layer, page_writes, parts, store, write_page


def seal_page(layer, records: list, tier: Tier) -> None:  # type: ignore[no-untyped-def]
    """A page of records staged and its whole batches sealed, in turn (no seal deferred)."""
    page = layer.stage_page(records)
    layer.sealing.seal_from_reads(page.to_seal, page.read, tier)


def _expiry(client: redis.Redis, key: str, batch_no: int) -> float | None:
    score = client.zscore(key, str(batch_no))
    return None if score is None else float(score)


def test_a_batch_sealed_whole_from_records_in_hand_goes_into_the_expiry_index(
    real_redis: redis.Redis, namespace: str
) -> None:
    """Summary tier: a page that fills batch 1 is sealed from the records in hand, never staged."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, summary_above=0, seal_idle_s=3600)
    store(layer, parts(1, 5))  # the first commit moves the namespace into the summary tier
    assert layer.tier() is Tier.SUMMARY
    page = parts(100, 100)
    seal_page(layer, page, Tier.SUMMARY)
    assert not real_redis.exists(layer.keys.staging(1)) and layer.batch_blob(1)
    assert _expiry(real_redis, layer.keys.expiry, 1) == max(p.completed_at for p in page)


def test_a_batch_sealed_by_an_archiver_that_read_the_tier_before_it_moved_goes_into_the_expiry_index(
    real_redis: redis.Redis, namespace: str
) -> None:
    """Another archiver's commit moved the namespace into the summary tier and the expiry walk has
    gone past batch 0 since this archiver last read the tier; it now seals batch 0 whole from
    records in hand (a slow worker's), with the tier it knows."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, summary_above=150, seal_idle_s=3600)
    store(layer, parts(100, 200))  # batches 1 and 2: the total crosses into the summary tier
    assert layer.tier() is Tier.SUMMARY
    while index_expiry_step(layer):
        pass
    assert real_redis.hget(layer.keys.archive_meta, "expire_cursor") == b"3"  # walked past batch 0
    late = parts(1, 99)
    seal_page(layer, late, Tier.COMPRESSED)  # the tier this archiver read last
    assert layer.batch_blob(0)
    while index_expiry_step(layer):
        pass
    assert _expiry(real_redis, layer.keys.expiry, 0) == max(p.completed_at for p in late)


def _ratio_of_what_is_stored(layer, batches: range, records: list) -> float:  # type: ignore[no-untyped-def]
    blob_bytes = sum(len(layer.batch_blob(b) or b"") for b in batches)
    return round(sum(len(p.to_json()) for p in records) / blob_bytes, 2)


def test_byte_counters_are_exact_when_a_pages_pipeline_fails_and_is_sent_again(
    real_redis: redis.Redis, namespace: str
) -> None:
    """A page's one round trip carries the bookkeeping of the seals written before (byte counters);
    one of its staging writes fails (here a foreign key in the way), so its replies are never read
    and the same bookkeeping goes out again with the next page. Each seal counts once."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=3600)
    writes = page_writes(layer)
    keys = layer.keys
    write_page(writes, parts(1, 99), Tier.COMPRESSED)  # batch 0: encoded
    writes.write_now(bookkeeping=False)  # written (as before a commit): its bookkeeping owed
    real_redis.set(keys.staging(2), b"in the way")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        writes.stage_page(parts(200, 10))  # ran: batch 0's bookkeeping; replies unread
    assert writes.owed and layer.compression_ratio() > 0
    real_redis.delete(keys.staging(2))
    write_page(writes, parts(100, 100), Tier.COMPRESSED)  # the same bookkeeping, sent again; batch 1 encoded
    writes.write_now()
    assert layer.sealing.decode_batch(layer.batch_blob(1)) == parts(100, 100)  # type: ignore[arg-type]
    assert layer.compression_ratio() == _ratio_of_what_is_stored(layer, range(2), parts(1, 199))
    assert layer.sealing.seals[0] == 1 and layer.sealing.seals[1] == 1


def _counters_hold_what_is_stored(layer, batches: range) -> None:  # type: ignore[no-untyped-def]
    """The byte counters equal the stored blobs' bytes and their records' archived JSON bytes."""
    blobs = [layer.batch_blob(b) for b in batches]
    json_bytes = sum(len(p.to_json()) for blob in blobs if blob for p in layer.sealing.decode_batch(blob))
    raw = layer.redis.hmget(layer.keys.archive_meta, ["sealed_json_bytes", "sealed_blob_bytes"])
    assert (int(raw[0]), int(raw[1])) == (json_bytes, sum(len(b or b"") for b in blobs))


@pytest.mark.parametrize("before", ["the same records", "half of them"])
def test_byte_counters_are_exact_when_another_archiver_sealed_the_batch_first(
    real_redis: redis.Redis, namespace: str, before: str
) -> None:
    """Archiver A reads batch 1 to seal it whole from a page in hand; meanwhile archiver B seals it
    (the same page delivered to it too, or half of its records, sealed idle). A's slot write is
    refused and A seals again over B's blob: the records B counted are not counted again."""
    a = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    b = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    page = parts(100, 100)
    read_by_a = a.stage_page(page)
    if before == "the same records":
        seal_page(b, page, Tier.COMPRESSED)
    else:
        store(b, page[:50])
        assert b.sealing.seal_idle() == 1
    assert b.batch_blob(1)
    a.sealing.seal_from_reads(read_by_a.to_seal, read_by_a.read, Tier.COMPRESSED)  # refused, sealed again
    assert a.sealing.seals[1] == 1 and a.sealing.decode_batch(a.batch_blob(1)) == page  # type: ignore[arg-type]
    _counters_hold_what_is_stored(a, range(2))


def test_byte_counters_are_exact_when_a_page_is_delivered_again(real_redis: redis.Redis, namespace: str) -> None:
    """A batch resealed with records it already holds (a page archived again after a crash before
    its commit, a straggler staged twice) adds no JSON bytes for them."""
    layer = archive_layer(real_redis, namespace, compressed_from=0, seal_idle_s=0)
    store(layer, parts(100, 60))
    layer.sealing.seal_idle()
    store(layer, parts(130, 70))  # 30 of them sealed already
    assert layer.sealing.seal_idle() == 1
    assert layer.sealing.decode_batch(layer.batch_blob(1)) == parts(100, 100)  # type: ignore[arg-type]
    _counters_hold_what_is_stored(layer, range(2))

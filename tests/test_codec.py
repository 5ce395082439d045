"""Codec: exact seed text format, columnar round trips (hypothesis), framing, fuzz."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workload import standard_workload
from codec import (
    ArchivedPartition,
    Codec,
    DecodeError,
    ValidationError,
    WorkerNumbering,
    blob_codec,
    blob_record_count,
    decode_blob,
    decode_text,
    encode_blob,
    encode_text,
    find_in_blob,
)
from codec.columnar import RowFilter
from codec.framing import blob_rows
from codec.packing import pack_column, put_svarint, read_column

SEED_EXAMPLE = "P4970:4969001-4970000:w1:1719234405:295,P4971:4970001-4971000:w2:1719234410:300"


def test_seed_example_decodes_exactly() -> None:
    workers = WorkerNumbering({1: "worker1", 2: "worker2"})
    records = decode_text(SEED_EXAMPLE, workers)
    assert records == [
        ArchivedPartition(4970, 4969001, 4970000, "worker1", 1719234405, 295),
        ArchivedPartition(4971, 4970001, 4971000, "worker2", 1719234410, 300),
    ]
    assert encode_text(records, workers) == SEED_EXAMPLE


def test_worker_map_assigns_from_one_and_reverses() -> None:
    workers = WorkerNumbering()
    assert [workers.short_id(w) for w in ("b", "a", "b", "c:,d")] == [1, 2, 1, 3]
    assert workers.worker_id(3) == "c:,d"
    assert WorkerNumbering.from_json(workers.to_json()) == workers
    with pytest.raises(DecodeError):
        workers.worker_id(9)
    with pytest.raises(ValidationError):
        workers.short_id("")
    with pytest.raises(ValidationError):
        workers.add(1, "other")
    with pytest.raises(DecodeError):
        WorkerNumbering.from_json(b"[1]")


worker_ids = st.text(min_size=1, max_size=40).filter(
    lambda s: (
        all(ord(c) >= 32 and ord(c) != 127 and not 0xD800 <= ord(c) <= 0xDFFF for c in s) and len(s.encode()) <= 256
    )
)


@st.composite
def batches(draw: st.DrawFn) -> list[ArchivedPartition]:
    names = draw(
        st.lists(st.one_of(worker_ids, st.sampled_from(["w:1", "a,b", "x y", "ü-工"])), min_size=1, max_size=5)
    )
    n = draw(st.integers(1, 40))
    out = []
    for _ in range(n):
        lo = draw(st.one_of(st.integers(0, 2**53), st.integers(-(2**63), 2**63 - 1)))
        hi = draw(st.one_of(st.just(lo), st.integers(lo, min(2**63 - 1, lo + 2**40)), st.integers(lo, 2**63 - 1)))
        out.append(
            ArchivedPartition(
                draw(st.integers(1, 2**53)),
                lo,
                hi,
                draw(st.sampled_from(names)),
                draw(st.integers(0, 2**40)),
                draw(st.integers(0, 10**9)),
            )
        )
    if draw(st.booleans()):  # realistic runs: contiguous, equal-width, sorted, with gaps
        start, width = draw(st.integers(1, 2**30)), draw(st.integers(1, 10**6))
        pids = sorted(draw(st.sets(st.integers(start, start + 500), min_size=1, max_size=60)))
        if draw(st.booleans()):  # evenly spaced: the one-record read finds them by arithmetic
            step = draw(st.integers(1, 5))
            pids = list(range(start, start + step * len(pids), step))
        out = [ArchivedPartition(p, (p - 1) * width, p * width - 1, names[p % len(names)], p + 7, 300) for p in pids]
        if draw(st.booleans()):  # completed at a steady rate (1/256 s per id upwards), with noise
            rate, noise = draw(st.integers(-(2**12), 2**20)), draw(st.integers(0, 1000))
            t0 = draw(st.integers(2**20, 2**39))
            out = [
                p._replace(
                    completed_at=t0 + ((rate * (p.partition_id - pids[0])) >> 8) + draw(st.integers(0, noise)),
                    duration=draw(st.integers(240, 360)),
                )
                for p in out
            ]
    return out


@settings(max_examples=300)
@given(
    st.integers(0, 2**32).flatmap(
        lambda spread: st.tuples(
            st.integers(-(2**63), 2**63 - 1 - spread),
            st.just(spread),
            st.lists(st.integers(0, spread), min_size=0, max_size=300),
        )
    )
)
def test_a_column_round_trips_in_whichever_packing_is_smaller(case: tuple[int, int, list[int]]) -> None:
    base, _, offsets = case
    values = [base + o for o in offsets]
    packed = pack_column(values)
    column = read_column(packed, 0, len(values))
    assert (column.all(), column.end) == (values, len(packed))
    width = (max(values) - min(values)).bit_length() if values else 0
    assert len(packed) <= 1 + len(bytes(_svarint(min(values, default=0)))) + (len(values) * width + 7) // 8


def test_radix_columns_cost_log2_of_the_range_and_refuse_values_beyond_it() -> None:
    values = [i % 6 for i in range(99)]
    packed = pack_column(values)
    assert packed[0] == 65 and len(packed) <= 3 + 33  # 99 * log2(6) = 256 bits, against 3 bits a value (38 B)
    group = bytearray(packed)
    group[3:9] = (6**17).to_bytes(6, "little")  # the first group (17 values, 44 bits) at R^k: past its range
    with pytest.raises(DecodeError, match="out of range"):
        read_column(bytes(group), 0, 99).all()
    with pytest.raises(DecodeError, match="truncated"):
        read_column(packed[:-1], 0, 99)


def test_times_at_a_steady_rate_are_stored_as_residuals_from_a_line() -> None:
    records = list(standard_workload(199))[99:]  # a batch: 3 s an id plus 0-5 s of noise
    workers = WorkerNumbering()
    plain = encode_blob(records, workers, compress=False)
    assert decode_blob(plain, workers) == records and plain[8 + 1] & 4  # the flag of a time line
    assert plain[8 + 1] & 8  # and of a first min_id where equal-width partitions from id 1 put it
    assert len(plain) <= 220


def _svarint(value: int) -> bytearray:
    out = bytearray()
    put_svarint(out, value)
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(["columnar", "text"]), st.sampled_from([None, True, False]))
def test_round_trip(records: list[ArchivedPartition], fmt: str, compress: bool | None) -> None:
    workers = WorkerNumbering()
    blob = encode_blob(records, workers, fmt=fmt, compress=compress)
    assert decode_blob(blob, WorkerNumbering.from_json(workers.to_json())) == records
    by_pid = {r.partition_id: r for r in reversed(records)}  # the first of a repeated pid is found
    low = min(by_pid)
    for pid in {*list(by_pid)[:10], *range(max(1, low - 1), low + 12), max(by_pid) + 1}:  # gaps too
        assert find_in_blob(blob, workers, pid) == by_pid.get(pid)
    assert blob_record_count(blob) == len(records)
    if fmt == "text":
        assert decode_text(encode_text(records, workers), workers) == records


def test_empty_batch_is_rejected() -> None:
    for fmt in ("columnar", "text"):
        with pytest.raises(ValidationError):
            encode_blob([], WorkerNumbering(), fmt=fmt)
    with pytest.raises(DecodeError):
        decode_text("", WorkerNumbering())


@pytest.mark.parametrize(
    "text",
    [
        "P1:1-2:w1:3",
        "P1:1-2:w1:3:4:5",
        "P01:1-2:w1:3:4",
        "P1:2-1:w1:3:4",
        "P1:1-2:w9:3:4",
        "P1:1-2:x1:3:4",
        "P0:1-2:w1:3:4",
        "P1:1-2:w1:3:4,",
        "p1:1-2:w1:3:4",
        "P1:--1-2:w1:3:4",
        "P1:-0-2:w1:3:4",
        "P1:1-2:w1:3:1099511627777",
    ],
)
def test_malformed_text_is_a_decode_error(text: str) -> None:
    with pytest.raises(DecodeError):
        decode_text(text, WorkerNumbering({1: "a"}))


def _decoded_or_rejected(blob: bytes, workers: WorkerNumbering) -> None:
    """Decoding either raises DecodeError or returns records that pass every validation."""
    try:
        count: int | None = blob_record_count(blob)
    except DecodeError:
        count = None
    try:
        records = decode_blob(blob, workers)
    except DecodeError:
        for pid in (1, 2, 100, 12345):  # the one-record read: a record that passes, or DecodeError
            try:
                found = find_in_blob(blob, workers, pid)
            except DecodeError:
                continue
            assert found is None or ArchivedPartition(*found) == found
        return
    assert records and count == len(records)
    first = {}
    for record in records:
        assert ArchivedPartition(*record) == record  # the validating constructor accepts it
        first.setdefault(record.partition_id, record)
    for pid, record in first.items():
        assert find_in_blob(blob, workers, pid) == record


def _valid_blobs() -> list[tuple[bytes, WorkerNumbering]]:
    records = list(standard_workload(100))
    out = []
    for fmt in ("columnar", "text"):
        for compress in (True, False):
            workers = WorkerNumbering()
            out.append((encode_blob(records, workers, fmt=fmt, compress=compress), workers))
    return out


def test_default_is_columnar_keeping_the_smaller_of_plain_and_zstd() -> None:
    records, workers = list(standard_workload(100)), WorkerNumbering()
    blob = encode_blob(records, workers)
    assert blob_codec(blob) in (Codec.COLUMNAR, Codec.COLUMNAR_ZSTD)
    plain = encode_blob(records, workers, compress=False)
    packed = encode_blob(records, workers, compress=True)
    assert len(blob) == min(len(plain), len(packed)) <= 300


def test_every_single_bit_flip_is_detected() -> None:
    for blob, workers in _valid_blobs():
        for bit in range(len(blob) * 8):
            mutated = bytearray(blob)
            mutated[bit // 8] ^= 1 << (bit % 8)
            with pytest.raises(DecodeError):
                decode_blob(bytes(mutated), workers)


def test_truncations_and_extensions_are_detected() -> None:
    for blob, workers in _valid_blobs():
        for cut in range(len(blob)):
            with pytest.raises(DecodeError):
                decode_blob(blob[:cut], workers)
        with pytest.raises(DecodeError):
            decode_blob(blob + b"\x00", workers)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_blob(data, WorkerNumbering({1: "a"}))


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from(list(Codec)))
def test_garbage_with_a_valid_header_and_checksum_raises_only_decode_error(payload: bytes, codec: Codec) -> None:
    from codec.framing import _frame

    _decoded_or_rejected(_frame(codec, payload), WorkerNumbering({i: f"w{i}" for i in range(1, 40)}))


def test_mutated_blobs_with_recomputed_checksum_never_raise_anything_else() -> None:
    from codec.framing import _HEADER, _frame

    rng = random.Random(7)
    for blob, workers in _valid_blobs():
        codec = Codec(blob[3])
        payload = blob[_HEADER.size :]
        for _ in range(400):
            mutated = bytearray(payload)
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            _decoded_or_rejected(_frame(codec, bytes(mutated)), workers)


@pytest.mark.parametrize("bad", [None, "text", 12, [b"x"]])
def test_non_bytes_input(bad: object) -> None:
    with pytest.raises(DecodeError):
        decode_blob(bad, WorkerNumbering())  # type: ignore[arg-type]


def test_the_head_cache_keeps_the_most_recently_used_heads_within_its_bytes() -> None:
    from codec.framing import HeadCache

    reads: list[bytes] = []

    def read(blob: bytes) -> tuple[str, int]:
        reads.append(blob)
        if blob == b"bad":
            raise DecodeError("bad blob")
        return blob.decode().upper(), 3 * len(blob)  # a payload three times the blob

    cache: HeadCache[str] = HeadCache(max_bytes=3 * (1024 + 400))  # three entries of 100-byte blobs
    blobs = [bytes([97 + i]) * 100 for i in range(4)]
    assert [cache.get(b, read) for b in blobs[:3]] == [b.decode().upper() for b in blobs[:3]]
    assert cache.get(blobs[0], read) == "A" * 100  # kept: now the most recently used
    cache.get(blobs[3], read)  # pushes out the least recently used: blobs[1]
    assert cache.info().entries == 3 and cache.info().size <= cache.max_bytes
    reads.clear()
    for b in (blobs[0], blobs[2], blobs[3], blobs[1]):
        cache.get(b, read)
    assert reads == [blobs[1]]
    for _ in range(2):
        with pytest.raises(DecodeError):
            cache.get(b"bad", read)
    assert reads.count(b"bad") == 2
    assert cache.get(b"x" * 5000, read) == "X" * 5000 and cache.info().size <= cache.max_bytes  # too big to keep
    assert cache.info().entries == 3


def test_a_lookup_in_a_blob_seen_before_reuses_its_head_and_a_bad_blob_is_refused_each_time() -> None:
    """`find_in_blob` keeps decoded heads by the blob's bytes: the same answers from a kept head, a
    resealed batch (other bytes) answered from its own, a damaged blob refused every time."""
    from codec.framing import HEADS

    workers = WorkerNumbering()
    records = [
        ArchivedPartition(pid, pid * 10, pid * 10 + 9, f"w{pid % 3}", 1719234405 + pid, 5) for pid in range(1, 60)
    ]
    blob = encode_blob(records, workers)
    HEADS.clear()
    first = [find_in_blob(blob, workers, r.partition_id) for r in records]
    again = [find_in_blob(bytes(blob), workers, r.partition_id) for r in records]  # equal bytes, another object
    assert first == again == records
    assert HEADS.info().misses == 1 and HEADS.info().hits == 2 * len(records) - 1
    resealed = encode_blob([*records[:-1], ArchivedPartition(59, 1, 2, "w9", 1719234405, 7)], workers)
    assert find_in_blob(resealed, workers, 59) == ArchivedPartition(59, 1, 2, "w9", 1719234405, 7)
    assert find_in_blob(blob, workers, 59) == records[-1]
    damaged = blob[:-1] + bytes([blob[-1] ^ 0xFF])
    for _ in range(2):
        with pytest.raises(DecodeError):
            find_in_blob(damaged, workers, 1)
    assert find_in_blob(bytearray(blob), workers, 3) == records[2]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(["columnar", "text"]), st.data())
def test_a_search_reads_of_a_blob_the_records_a_plain_filter_keeps(
    records: list[ArchivedPartition], fmt: str, data: st.DataObject
) -> None:
    """`blob_rows` (a search's read of a sealed batch: the columns a filter needs decoded first, a few
    records built one by one) keeps exactly what filtering the decoded records keeps, in order."""
    workers = WorkerNumbering()
    blob = encode_blob(records, workers, fmt=fmt)

    def span(values: list[int]) -> tuple[int, int] | None:
        if not data.draw(st.booleans()):
            return None
        bounds = st.integers(min(values) - 1, max(values) + 1)
        a, b = data.draw(bounds), data.draw(bounds)
        return min(a, b), max(a, b)

    shorts = None
    if data.draw(st.booleans()):
        numbers = sorted({workers.short_id(r.worker_id) for r in records})
        shorts = frozenset(data.draw(st.sets(st.sampled_from(numbers))))
    keep = RowFilter(
        shorts=shorts,
        pids=span([r.partition_id for r in records]),
        completed=span([r.completed_at for r in records]),
        duration=span([r.duration for r in records]),
    )
    expected = [
        (r.partition_id, r.min_id, r.max_id, workers.short_id(r.worker_id), r.completed_at, r.duration)
        for r in records
        if (shorts is None or workers.short_id(r.worker_id) in shorts)
        and (keep.pids is None or keep.pids[0] <= r.partition_id <= keep.pids[1])
        and (keep.completed is None or keep.completed[0] <= r.completed_at <= keep.completed[1])
        and (keep.duration is None or keep.duration[0] <= r.duration <= keep.duration[1])
    ]
    assert list(zip(*blob_rows(blob, workers, keep), strict=True)) == expected
    every = [(r.partition_id, r.min_id, r.max_id, workers.short_id(r.worker_id), r.completed_at, r.duration)
             for r in records]  # fmt: skip
    assert list(zip(*blob_rows(blob, workers), strict=True)) == every

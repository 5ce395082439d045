"""elk_coordinator's record and batch formats: byte-exact both ways, Go's rules for what it rejects."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import ArchivedPartition, DecodeError, ValidationError
from codec.elk import (
    ElkRecord,
    archived_as_elk,
    completed_as_archived,
    completed_as_archived_page,
    decode_elk,
    encode_elk,
)
from codec.elk_batch import decode_elk_batch, encode_elk_batch
from codec.gojson import ZERO_TIME, GoTime, go_json, go_string
from codec.stored import parse_archived

FIXTURES = Path(__file__).parent / "fixtures" / "elk"


def dump_values() -> list[tuple[str, bytes]]:
    out = []
    for line in (FIXTURES / "small.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj["type"] == "hash":
            out.append((obj["key"], base64.b64decode(obj["value_b64"])))
    return out


def test_every_go_record_of_the_fixtures_encodes_back_to_its_bytes() -> None:
    samples = (FIXTURES / "samples.jsonl").read_bytes().splitlines()
    records = [raw for key, raw in dump_values() if key.endswith(("elk_partitions", "elk_archived"))]
    assert len(samples) == 5 and len(records) == 1655
    for raw in samples + records:
        assert encode_elk(decode_elk(raw)) == raw


def test_a_record_keeps_zone_nanoseconds_and_64_bit_ids() -> None:
    raw = next(r for k, r in dump_values() if b'"partition_id":10003,' in r)
    rec = decode_elk(raw)
    assert rec.max_id == 2**63 - 1 and rec.min_id == 9223372036854772808
    assert rec.created_at == GoTime.parse("2025-07-05T23:59:14.192469671+08:00")
    assert rec.created_at.offset == 8 * 3600 and rec.created_at.nanos == 192469671
    assert rec.options == {"note": "tail of the int64 id space", "tags": ["backfill", "int64-max"]}
    assert rec.to_partition_info().max_id == 2**63 - 1


def test_the_documented_batch_record_decodes_as_go_reads_it() -> None:
    batches = [raw for key, raw in dump_values() if key.endswith("elk_compressed_archive")]
    entries = [e for raw in batches for e in decode_elk_batch(raw)]
    assert len(batches) == 4 and len(entries) == 2000 and len({e.partition_id for e in entries}) == 2000
    e = next(e for e in entries if e.partition_id == 1385)
    assert (e.min_id, e.max_id, e.worker_no, e.status, e.error) == (3737821, 3738165, 3, "completed", "")
    assert e.updated_at - e.created_at == 15465 - 15421


def test_archived_form_keeps_what_a_batch_keeps() -> None:
    rec = decode_elk((FIXTURES / "samples.jsonl").read_bytes().splitlines()[-1])
    part = rec.to_archived()
    assert part.completed_at == rec.updated_at.seconds
    assert part.duration == rec.updated_at.seconds - rec.created_at.seconds
    back = archived_as_elk(part)
    assert back.created_at.seconds == rec.created_at.seconds and back.updated_at.seconds == rec.updated_at.seconds
    assert parse_archived(encode_elk(back)) == back
    assert parse_archived(part.to_json()) == part


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e+21"),
        (-3e-7, "-3e-7"),
        (1.5, "1.5"),
        (9007199254740992.0, "9007199254740992"),
        (1e-6, "0.000001"),
        (-0.0, "-0"),
        (123456789.0, "123456789"),
        (1.5e-300, "1.5e-300"),
    ],
)
def test_floats_are_written_as_go_writes_them(value: float, text: str) -> None:
    assert go_json(value) == text


def test_strings_are_escaped_as_go_escapes_them() -> None:
    assert (
        go_string('a<b>&\u2028\u2029\n\t\r\x01\x7f"\\é')
        == '"a\\u003cb\\u003e\\u0026\\u2028\\u2029\\n\\t\\r\\u0001\x7f\\"\\\\é"'
    )
    assert go_json({"b": 1, "a": [True, None], "é": {}}) == '{"a":[true,null],"b":1,"é":{}}'


@pytest.mark.parametrize(
    "raw",
    [
        b'{"partition_id":1,"created_at":1751730820}',
        b'{"partition_id":1,"created_at":"2025-07-05 23:53:40"}',
        b'{"partition_id":1,"created_at":"2025-07-05T23:53:40"}',
        b'{"partition_id":1,"created_at":"2025-02-30T23:53:40Z"}',
        b'{"partition_id":"1"}',
        b'{"partition_id":1.5}',
        b'{"partition_id":1e3}',
        b'{"min_id":9223372036854775808}',
        b'{"version":"2"}',
        b'{"options":[1]}',
        b'{"status":3}',
        b"[1,2]",
        b"not json",
    ],
)
def test_what_go_rejects_is_a_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_elk(raw)


def test_what_go_accepts_is_read() -> None:
    rec = decode_elk(b'{"Partition_ID":7,"MIN_ID":-5,"max_id":null,"status":"weird","extra":{"x":1},"options":null}')
    assert (rec.partition_id, rec.min_id, rec.max_id, rec.status, rec.options) == (7, -5, 0, "weird", None)
    assert rec.created_at == ZERO_TIME and rec.created_at.format() == "0001-01-01T00:00:00Z"


def _batch(records: list[tuple[ElkRecord, int]], mutate: Any = None) -> bytes:
    obj = orjson.loads(encode_elk_batch(records))
    if mutate:
        mutate(obj)
    return orjson.dumps(obj)


RECORD = ElkRecord(5, -10, 20, "w", ZERO_TIME, "completed", GoTime(1_751_700_000), None, 3, "", GoTime(1_751_699_000))


def test_batch_round_trip_and_hostile_batches() -> None:
    entries = decode_elk_batch(_batch([(RECORD, 2), (RECORD._replace(partition_id=6, error="é" * 10), 1)]))
    assert [e.to_record("w")._replace(error="") for e in entries[:1]] == [RECORD._replace(version=0)]
    assert entries[1].error == "é" * 10

    def corrupt_gzip(o: dict[str, Any]) -> None:
        data = bytearray(base64.b64decode(o["compressed_data"]))
        data[12] ^= 0xFF
        o["compressed_data"] = base64.b64encode(bytes(data)).decode()

    def truncated(o: dict[str, Any]) -> None:
        data = gzip.decompress(base64.b64decode(o["compressed_data"]))[:-5]
        o["compressed_data"] = base64.b64encode(gzip.compress(data, mtime=0)).decode()

    hostile = [
        lambda o: o.update(compressed_data="%%%"),
        corrupt_gzip,
        truncated,
        lambda o: o.update(partition_count=3),
        lambda o: o.update(compression_algorithm="lz4"),
        lambda o: o.pop("base_timestamp"),
    ]
    for mutate in hostile:
        with pytest.raises(DecodeError):
            decode_elk_batch(_batch([(RECORD, 1), (RECORD, 1)], mutate))
    with pytest.raises(DecodeError):  # its length wraps, so every later record is misread
        decode_elk_batch(_batch([(RECORD._replace(error="x" * 70_000), 1), (RECORD, 1)]))


# --- property tests -------------------------------------------------------------------------

int64 = st.integers(-(2**63), 2**63 - 1)
go_times = st.builds(
    GoTime,
    st.integers(-62135596800, 253402300799 - 86400),
    st.integers(0, 999_999_999),
    st.integers(-14 * 60, 14 * 60).map(lambda m: m * 60),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
go_records = st.builds(
    ElkRecord,
    partition_id=int64,
    min_id=int64,
    max_id=int64,
    worker_id=st.text(max_size=40),
    last_heartbeat=go_times,
    status=st.one_of(st.sampled_from(["pending", "claimed", "running", "completed", "failed"]), st.text(max_size=8)),
    updated_at=go_times,
    options=st.one_of(st.none(), st.dictionaries(st.text(max_size=10), json_values, min_size=1, max_size=4)),
    version=int64,
    error=st.text(max_size=60),
    created_at=go_times,
)


def _no_surrogates(rec: ElkRecord) -> bool:
    return all(
        c < "\ud800" or c > "\udfff" for text in (rec.worker_id, rec.status, rec.error, str(rec.options)) for c in text
    )


@given(go_records.filter(_no_surrogates))
def test_any_go_record_round_trips(rec: ElkRecord) -> None:
    raw = encode_elk(rec)
    back = decode_elk(raw)
    assert encode_elk(back) == raw
    assert back._replace(options=back.options or None) == rec._replace(options=rec.options or None)
    assert orjson.loads(raw)["partition_id"] == rec.partition_id


@given(go_times)
def test_any_go_time_round_trips(t: GoTime) -> None:
    assert GoTime.parse(t.format()) == t


@given(go_times, st.sampled_from(["", "x", "T", "+08", "Z", "0Z", ".Z", ",5Z", " ", "\u0663"]), st.integers(0, 34))
def test_the_bulk_import_reads_times_as_the_parser_does(t: GoTime, noise: str, at: int) -> None:
    rec = ElkRecord(7, 1, 10, "w1", GoTime(1_751_700_000), "completed", GoTime(1_751_700_000), None, 1, "",
                    GoTime(1_751_690_000))  # fmt: skip
    for text in (t.format(), t.format()[:at] + noise + t.format()[at:]):
        for member in ("updated_at", "created_at", "last_heartbeat"):
            data = orjson.loads(encode_elk(rec)) | {member: text}
            got = completed_as_archived(data)
            try:
                expected: ArchivedPartition | None = decode_elk(orjson.dumps(data)).to_archived()
            except (DecodeError, ValidationError):
                expected = None
            assert got is None or got == expected  # None only sends the record to the general path


@given(go_records.filter(_no_surrogates), st.booleans())
def test_the_bulk_import_shortcut_agrees_with_the_general_path(rec: ElkRecord, completed: bool) -> None:
    if completed:
        rec = rec._replace(status="completed", worker_id=rec.worker_id or "w", partition_id=rec.partition_id & 0xFFFF)
    data = orjson.loads(encode_elk(rec))
    got = completed_as_archived(data)
    if got is None:
        return
    assert rec.status == "completed"
    assert got == decode_elk(encode_elk(rec)).to_archived()


@given(
    st.lists(
        st.tuples(go_records.filter(_no_surrogates), st.sampled_from(["updated_at", "created_at", "last_heartbeat"]),
                  st.sampled_from([None, "", "x", "Z", "\n", "2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z",
                                   "2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00.Z", 7])),
        min_size=1, max_size=12,
    )
)
def test_a_page_is_read_as_each_record_alone(rows: list[tuple[ElkRecord, str, Any]]) -> None:
    """The page's column-wise path gives what the one-record path gives, record by record."""
    page = []
    for rec, member, noise in rows:
        rec = rec._replace(status="completed", worker_id=rec.worker_id or "w", partition_id=rec.partition_id & 0xFFFF)
        data = orjson.loads(encode_elk(rec))
        if noise is not None:
            data[member] = noise if not isinstance(noise, str) or noise[:1].isdigit() else data[member] + noise
        page.append(data)
    got = completed_as_archived_page(page)
    assert got == [completed_as_archived(d) for d in page]
    for data, archived in zip(page, got, strict=True):
        if archived is not None:
            assert archived == decode_elk(orjson.dumps(data)).to_archived()


def test_the_bulk_import_shortcut_takes_what_go_writes() -> None:
    rec = ElkRecord(7, -(2**63), 2**63 - 1, "w1", GoTime(1_751_700_000, 5, 3600), "completed",
                    GoTime(1_751_700_100, 7, 3600), None, 3, "", GoTime(1_751_700_000, 1, -3600))
    got = completed_as_archived(orjson.loads(encode_elk(rec)))
    assert got == ArchivedPartition(7, -(2**63), 2**63 - 1, "w1", 1_751_700_100, 100)
    for other in (rec._replace(status="running"), rec._replace(created_at=ZERO_TIME), rec._replace(min_id=5, max_id=4)):
        assert completed_as_archived(orjson.loads(encode_elk(other))) is None


@given(st.lists(go_records.filter(_no_surrogates), min_size=1, max_size=8), st.integers(1, 65535))
def test_any_go_batch_round_trips_what_a_batch_keeps(records: list[ElkRecord], worker_no: int) -> None:
    records = [
        r._replace(
            status="completed",
            partition_id=r.partition_id & 0xFFFF_FFFF,
            max_id=r.min_id + ((r.max_id - r.min_id) & 0xFFFF) if r.min_id <= 2**62 else r.min_id,
            created_at=GoTime(1_700_000_000 + (r.created_at.seconds & 0xFFFF)),
            updated_at=GoTime(1_700_000_000 + (r.created_at.seconds & 0xFFFF) + (r.updated_at.seconds & 0xFFF)),
            error=r.error[:100],
        )
        for r in records
    ]
    entries = decode_elk_batch(encode_elk_batch([(r, worker_no) for r in records]))
    for rec, entry in zip(records, entries, strict=True):
        assert entry.worker_no == worker_no
        got = entry.to_record(rec.worker_id)
        assert (got.partition_id, got.min_id, got.max_id) == (rec.partition_id, rec.min_id, rec.max_id)
        assert (got.updated_at.seconds, got.created_at.seconds) == (rec.updated_at.seconds, rec.created_at.seconds)
        assert got.error == rec.error.encode("utf-8", "replace").decode("utf-8", "replace")


def test_archived_partitions_with_64_bit_ranges_validate() -> None:
    part = ArchivedPartition(1, -(2**63), 2**63 - 1, "w", 0, 0)
    assert part.processed_data == 2**64
    assert ArchivedPartition.from_json(part.to_json()) == part

"""elk_coordinator's compressed batches (``elk_compressed_archive`` values), both ways.

A value is the JSON of Go's ``CompressedBatch``; ``compressed_data`` is base64 of one gzip
member holding ``partition_count`` records back to back, each (little-endian):

    uint32 pid | int64 min_id | uint32 max_id - min_id + 1 (wrapped) | uint16 worker number
    | uint8 status | uint32 updated_at - base | uint32 created_at - base | uint16 L | L bytes error

The worker number is a 1-based position in the ``workers`` sorted set as the writer saw it:
the caller resolves it (see `layers.elk`). Decoding anything malformed raises `DecodeError`.

A range of 2^32 ids or more does not fit the 32-bit count: Go's reader gives back ``max_id =
min_id + (count mod 2^32) - 1``, which for a count of 0 (a multiple of 2^32 ids) is below
``min_id``. `ElkBatchEntry.max_id` then takes the smallest range consistent with the batch,
``min_id + 2^32 - 1``, and says so (`ElkBatchEntry.widened`); a range cut to a non-zero
count cannot be told from a short one.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import orjson

from codec.elk import ElkRecord
from codec.errors import DecodeError, ValidationError
from codec.gojson import GoTime

_RECORD = struct.Struct("<IqIHBIIH")
_INT64_MAX = (1 << 63) - 1
#: The ids a stored range count of 0 stands for, at the least (the count is 32 bits).
CUT_RANGE = 1 << 32
STATUS_CODES = ("pending", "claimed", "running", "completed", "failed")
_MAX_ERROR = 65535


class ElkBatchEntry(NamedTuple):
    """One record of a Go batch, as stored (before worker numbers are resolved)."""

    partition_id: int
    min_id: int
    range_count: int
    worker_no: int
    status: str
    updated_at: int
    created_at: int
    error: str

    @property
    def go_max_id(self) -> int:
        """As Go's reader computes it: ``min_id + range - 1`` in wrapping int64."""
        value = (self.min_id + self.range_count - 1) & 0xFFFF_FFFF_FFFF_FFFF
        return value - (1 << 64) if value >= 1 << 63 else value

    @property
    def widened(self) -> bool:
        """The stored count is 0 (2^32 ids or a multiple, cut by the 32-bit field) and the smallest
        range consistent with it, ``min_id .. min_id + 2^32 - 1``, fits in int64: `max_id` is that."""
        return self.range_count == 0 and self.min_id <= _INT64_MAX - CUT_RANGE + 1

    @property
    def max_id(self) -> int:
        """Go's `go_max_id`, except for a `widened` range: ``min_id + 2^32 - 1``."""
        return self.min_id + CUT_RANGE - 1 if self.widened else self.go_max_id

    def to_record(self, worker_id: str) -> ElkRecord:
        """The record Go's reader rebuilds (UTC times, no options, version 0, zero heartbeat)."""
        return ElkRecord(
            partition_id=self.partition_id,
            min_id=self.min_id,
            max_id=self.max_id,
            worker_id=worker_id,
            status=self.status,
            updated_at=GoTime(self.updated_at),
            created_at=GoTime(self.created_at),
            error=self.error,
        )


def decode_elk_batch(raw: bytes | str) -> list[ElkBatchEntry]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"batch is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise DecodeError("batch is not a JSON object")
    base, data, count = obj.get("base_timestamp"), obj.get("compressed_data"), obj.get("partition_count")
    if type(base) is not int or type(count) is not int or type(data) is not str:
        raise DecodeError("batch lacks base_timestamp, partition_count or compressed_data")
    algorithm = obj.get("compression_algorithm", "gzip")
    if algorithm != "gzip":
        raise DecodeError(f"unknown compression algorithm {algorithm!r}")
    if not 0 <= count <= 10_000_000:
        raise DecodeError(f"implausible partition_count {count}")
    try:
        packed = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"compressed_data is not base64: {exc}") from None
    limit = count * (_RECORD.size + _MAX_ERROR)
    inflater = zlib.decompressobj(wbits=31)
    try:
        payload = inflater.decompress(packed, limit + 1)
    except zlib.error as exc:
        raise DecodeError(f"compressed_data is not valid gzip: {exc}") from None
    if len(payload) > limit or not inflater.eof:
        raise DecodeError("compressed_data is truncated or larger than its partition_count allows")
    return _records(payload, count, base)


def _records(payload: bytes, count: int, base: int) -> list[ElkBatchEntry]:
    out: list[ElkBatchEntry] = []
    offset = 0
    for _ in range(count):
        if offset + _RECORD.size > len(payload):
            raise DecodeError(f"batch payload ends inside record {len(out) + 1} of {count}")
        pid, lo, span, worker, status, upd, created, length = _RECORD.unpack_from(payload, offset)
        offset += _RECORD.size
        if offset + length > len(payload):
            raise DecodeError(f"batch payload ends inside the error text of partition {pid}")
        error = payload[offset : offset + length].decode("utf-8", "replace")
        offset += length
        if status >= len(STATUS_CODES):
            raise DecodeError(f"partition {pid} has unknown status code {status}")
        out.append(ElkBatchEntry(pid, lo, span, worker, STATUS_CODES[status], base + upd, base + created, error))
    if offset != len(payload):
        raise DecodeError(
            f"{len(payload) - offset} bytes after the last of {count} records "
            "(an error text of 64 KiB or more corrupts a Go batch)"
        )
    return out


def encode_elk_batch(records: Sequence[tuple[ElkRecord, int]]) -> bytes:
    """Write a batch the way Go's ``compressAndStoreArchiveBatch`` does (records with worker numbers)."""
    if not records:
        raise ValidationError("a batch needs at least one record")
    base = min(rec.created_at.seconds for rec, _ in records)
    chunks = []
    for rec, worker_no in records:
        error = rec.error.encode("utf-8", "replace")
        upd = rec.updated_at.seconds - base
        chunks.append(
            _RECORD.pack(
                rec.partition_id & 0xFFFF_FFFF,
                rec.min_id,
                (rec.max_id - rec.min_id + 1) & 0xFFFF_FFFF,
                worker_no & 0xFFFF,
                STATUS_CODES.index(rec.status),
                upd if 0 <= upd <= 0xFFFF_FFFF else 0,
                (rec.created_at.seconds - base) & 0xFFFF_FFFF,
                len(error) & 0xFFFF,
            )
            + error
        )
    packed = gzip.compress(b"".join(chunks), mtime=0)
    return orjson.dumps(
        {
            "base_timestamp": base,
            "compressed_data": base64.b64encode(packed).decode("ascii"),
            "partition_count": len(records),
            "compression_algorithm": "gzip",
            "version": 1,
        }
    )

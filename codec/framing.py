"""Framed blobs: every stored batch starts with a header and carries a checksum.

    offset 0  2 bytes  magic b"\\xa7P"
    offset 2  1 byte   format version (1)
    offset 3  1 byte   codec id (see `Codec`)
    offset 4  4 bytes  CRC-32 of every other byte of the blob (header and payload)
    offset 8  payload  columnar or text batch, zstandard-compressed when the codec says so

CRC-32 detects every single-bit flip and every burst up to 32 bits. Decoding anything
that is not a valid blob raises `DecodeError` and nothing else.

`find_in_blob` keeps the decoded heads of the blobs it looked into lately (`HEADS`, a `HeadCache`):
the query router reads the same sealed batches over and over, and a blob's checksum,
decompression and column headers were most of a lookup's decode. A head keeps its payload, so
what a kept head costs is the blob (the key) plus the payload: the bound is in bytes, not in
heads, so small batches (a few hundred bytes each at the default batch size) are kept by the ten
thousand and large compressed ones by the hundred. The blob's bytes are the key: a batch sealed
again is a new entry, and an entry never goes stale.

Shelves: one Redis string holding the sealed blobs of ``SHELF_SLOTS`` consecutive batches.

A key per batch costs Redis ~90 bytes of its own (dictionary entry, object, key name,
allocator rounding): about as much as a sealed batch of 100 partitions weighs. A shelf pays
that once for 64 batches, and batch ``b`` stays addressable: shelf ``b // 64``, slot ``b % 64``.

    offset 0       2 bytes   magic b"\\xa7S"
    offset 2       1 byte    format version (1)
    offset 3       1 byte    slot count N
    offset 4       4N bytes  per slot, little-endian u32: where its blob ends, counted from the
                             start of the data (an empty slot ends where the one before it does)
    offset 4 + 4N  data      the slots' framed blobs less their first three bytes (magic and
                             version, which the shelf header already says), in slot order

A slot's blob keeps its codec byte and checksum (which covers the three bytes left out), so a
damaged slot is found when decoded; `shelved` and `unshelved` convert between the two forms.
`layers/archive/lua/shelf_put.lua` writes this format on the server; `pack_shelf` is its twin for
bulk writers and tests.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

import zstandard

from codec.columnar import (
    MAX_RECORDS,
    PayloadHead,
    RowColumns,
    RowFilter,
    decode_columns,
    encode_columns,
    find_in_head,
    read_head,
    select_columns,
)
from codec.errors import DecodeError, ValidationError
from codec.packing import get_uvarint
from codec.record import ArchivedPartition
from codec.text import decode_text, encode_text
from codec.workers import WorkerNumbering

MAGIC = b"\xa7P"
FORMAT_VERSION = 1
MAX_PAYLOAD = 64 * 1024 * 1024
_HEADER = struct.Struct("<2sBBI")
ZSTD_LEVEL = 12


class Codec(enum.IntEnum):
    COLUMNAR = 1
    COLUMNAR_ZSTD = 2
    TEXT = 3
    TEXT_ZSTD = 4

    @property
    def compressed(self) -> bool:
        return self in (Codec.COLUMNAR_ZSTD, Codec.TEXT_ZSTD)

    @property
    def columnar(self) -> bool:
        return self in (Codec.COLUMNAR, Codec.COLUMNAR_ZSTD)


class _Zstd(threading.local):
    """zstandard contexts are not thread-safe: one pair per thread, reused."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_checksum=False, write_content_size=True, write_dict_id=False
        )
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _Zstd()
_CODECS = {codec.value: codec for codec in Codec}


def _frame(codec: Codec, payload: bytes) -> bytes:
    head = MAGIC + bytes((FORMAT_VERSION, codec))
    crc = zlib.crc32(payload, zlib.crc32(head))
    return _HEADER.pack(MAGIC, FORMAT_VERSION, codec, crc) + payload


def encode_blob(
    records: Sequence[ArchivedPartition],
    workers: WorkerNumbering,
    *,
    fmt: str = "columnar",
    compress: bool | None = None,
) -> bytes:
    """Encode a batch. ``fmt`` is "columnar" (default) or "text"; ``compress=None`` keeps the smaller."""
    if fmt == "columnar":
        raw, plain, packed = encode_columns(records, workers), Codec.COLUMNAR, Codec.COLUMNAR_ZSTD
    elif fmt == "text":
        raw, plain, packed = encode_text(records, workers).encode("utf-8"), Codec.TEXT, Codec.TEXT_ZSTD
    else:
        raise ValidationError(f"unknown format {fmt!r}")
    if compress is False:
        return _frame(plain, raw)
    squeezed = _zstd.compressor.compress(raw)
    if compress is None and len(squeezed) >= len(raw):
        return _frame(plain, raw)
    return _frame(packed, squeezed)


def blob_codec(blob: bytes) -> Codec:
    """Check the header and checksum; return the codec of a valid blob."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise DecodeError(f"a blob is bytes, not {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEADER.size:
        raise DecodeError("blob is shorter than its header")
    magic, version, codec_id, crc = _HEADER.unpack_from(blob, 0)
    if magic != MAGIC:
        raise DecodeError("not a partarchive blob (wrong magic)")
    if version != FORMAT_VERSION:
        raise DecodeError(f"unknown blob format version {version}")
    codec = _CODECS.get(codec_id)
    if codec is None:
        raise DecodeError(f"unknown codec id {codec_id}")
    if zlib.crc32(blob[_HEADER.size :], zlib.crc32(blob[:4])) != crc:
        raise DecodeError("checksum mismatch: the blob is corrupt")
    return codec


def decode_blob(blob: bytes, workers: WorkerNumbering) -> list[ArchivedPartition]:
    codec, payload = _payload(blob)
    try:
        if codec.columnar:
            return decode_columns(payload, workers)
        return decode_text(payload.decode("utf-8"), workers)
    except DecodeError:
        raise
    except (UnicodeDecodeError, ValueError, OverflowError, MemoryError) as exc:
        raise DecodeError(f"invalid {codec.name.lower()} payload: {exc}") from None


def find_in_blob(blob: bytes, workers: WorkerNumbering, pid: int) -> ArchivedPartition | None:
    """Partition ``pid``'s record in a blob, or None: `decode_blob` for one record, building only
    that record in the columnar formats (see `codec.columnar.find_in_columns`), from the blob's
    head as `HEADS` keeps it."""
    head = _columnar_head(blob if type(blob) is bytes else bytes(blob))
    try:
        if head is not None:
            return find_in_head(head, workers, pid)
        _, payload = _payload(blob)
        return next((r for r in decode_text(payload.decode("utf-8"), workers) if r.partition_id == pid), None)
    except DecodeError:
        raise
    except (UnicodeDecodeError, ValueError, OverflowError, MemoryError) as exc:
        raise DecodeError(f"invalid {blob_codec(blob).name.lower()} payload: {exc}") from None


def blob_rows(blob: bytes, workers: WorkerNumbering, keep: RowFilter | None = None) -> RowColumns:
    """The records of a blob that ``keep`` keeps (every one without it), as columns whose workers
    are numbered as ``workers`` numbers them: a search's read of a sealed batch. The columns a
    filter needs are decoded first (`codec.columnar.select_columns`); the head is not kept in
    `HEADS` (a search reads each batch once, and would push out the lookups' heads)."""
    codec, payload = _payload(blob)
    try:
        if codec.columnar:
            return select_columns(read_head(payload), keep or RowFilter())
        records = decode_text(payload.decode("utf-8"), workers)
    except DecodeError:
        raise
    except (UnicodeDecodeError, ValueError, OverflowError, MemoryError) as exc:
        raise DecodeError(f"invalid {codec.name.lower()} payload: {exc}") from None
    out = RowColumns([], [], [], [], [], [])
    for r in records:
        short = workers.short_id(r.worker_id)
        if keep is not None and not _kept(keep, r.partition_id, short, r.completed_at, r.duration):
            continue
        row = (r.partition_id, r.min_id, r.max_id, short, r.completed_at, r.duration)
        for column, value in zip(out, row, strict=True):
            column.append(value)
    return out


def _kept(keep: RowFilter, pid: int, short: int, at: int, duration: int) -> bool:
    return (
        (keep.shorts is None or short in keep.shorts)
        and (keep.pids is None or keep.pids[0] <= pid <= keep.pids[1])
        and (keep.completed is None or keep.completed[0] <= at <= keep.completed[1])
        and (keep.duration is None or keep.duration[0] <= duration <= keep.duration[1])
    )


T = TypeVar("T")

#: Bytes of blobs and payloads kept (plus a fixed allowance an entry for its objects).
HEAD_BYTES_KEPT = 32 * 1024 * 1024
_ENTRY_OVERHEAD = 1024


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    entries: int
    size: int  # bytes accounted


class HeadCache(Generic[T]):
    """``cache.get(blob, read)``: ``read(blob)``'s result, computed once while kept; least recently
    used entries go first once the bytes kept pass ``max_bytes``. ``read`` returns the value and the
    bytes it holds beyond the blob; what it raises is raised each time (never kept)."""

    def __init__(self, max_bytes: int = HEAD_BYTES_KEPT) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, tuple[T, int]] = OrderedDict()
        self._size = self._hits = self._misses = 0
        self._lock = threading.Lock()

    def get(self, blob: bytes, read: Callable[[bytes], tuple[T, int]]) -> T:
        with self._lock:
            kept = self._entries.get(blob)
            if kept is not None:
                self._entries.move_to_end(blob)
                self._hits += 1
                return kept[0]
            self._misses += 1
        value, held = read(blob)
        size = len(blob) + held + _ENTRY_OVERHEAD
        with self._lock:
            if blob not in self._entries and size <= self.max_bytes:
                self._entries[blob] = (value, size)
                self._size += size
                while self._size > self.max_bytes:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self._size -= dropped
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = self._hits = self._misses = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._entries), self._size)


#: The decoded heads `find_in_blob` keeps; None for a text blob.
HEADS: HeadCache[PayloadHead | None] = HeadCache()


def _columnar_head(blob: bytes) -> PayloadHead | None:
    """A columnar blob's payload head (None for the text codec), checked and decompressed once
    while `HEADS` keeps it; a blob that does not decode raises each time."""
    return HEADS.get(blob, _read_columnar_head)


def _read_columnar_head(blob: bytes) -> tuple[PayloadHead | None, int]:
    codec, payload = _payload(blob)
    if not codec.columnar:
        return None, 0
    try:
        return read_head(payload), len(payload)
    except DecodeError:
        raise
    except (ValueError, OverflowError, MemoryError) as exc:
        raise DecodeError(f"invalid {codec.name.lower()} payload: {exc}") from None


def blob_record_count(blob: bytes) -> int:
    """How many records a valid blob holds, without decoding them (the expiry sweep's count)."""
    codec, payload = _payload(blob)
    if not codec.columnar:
        return payload.count(b",") + 1  # records are joined by commas and hold none
    count, _ = get_uvarint(payload, 0)
    if not 1 <= count <= MAX_RECORDS:
        raise DecodeError(f"implausible record count {count}")
    return count


def _payload(blob: bytes) -> tuple[Codec, bytes]:
    """The checked codec and the payload, decompressed."""
    codec = blob_codec(blob)
    payload = bytes(blob[_HEADER.size :])
    if not codec.compressed:
        return codec, payload
    try:
        size = zstandard.frame_content_size(payload)
        if not 0 < size <= MAX_PAYLOAD:
            raise DecodeError(f"implausible compressed payload size {size}")
        return codec, _zstd.decompressor.decompress(payload)
    except (zstandard.ZstdError, ValueError, MemoryError) as exc:
        raise DecodeError(f"invalid {codec.name.lower()} payload: {exc}") from None


SHELF_MAGIC = b"\xa7S"
SHELF_VERSION = 1
SHELF_SLOTS = 64
_SHELF_HEAD = struct.Struct("<2sBB")
_END = struct.Struct("<I")
_BLOB_PREFIX = MAGIC + bytes((FORMAT_VERSION,))  # what a slot leaves out


def shelved(blob: bytes) -> bytes:
    """A framed blob as a slot holds it (b'' stays b'')."""
    if blob and not blob.startswith(_BLOB_PREFIX):
        raise ValidationError("only framed blobs of format 1 go into a shelf")
    return blob[len(_BLOB_PREFIX) :]


def unshelved(stored: bytes | None) -> bytes | None:
    """The framed blob a slot holds (None for an empty slot)."""
    return _BLOB_PREFIX + stored if stored else None


def pack_shelf(slots: Sequence[bytes | None], slot_count: int = SHELF_SLOTS) -> bytes:
    """A shelf holding ``slots`` (index = slot; None or b'' = empty); b'' when every slot is empty."""
    if len(slots) > slot_count or not 1 <= slot_count <= 255:
        raise ValidationError(f"a shelf has 1..255 slots, at most {slot_count} given here")
    blobs = [bytes(s or b"") for s in slots] + [b""] * (slot_count - len(slots))
    if not any(blobs):
        return b""
    ends = []
    end = 0
    for blob in blobs:
        end += len(blob)
        ends.append(end)
    return (
        _SHELF_HEAD.pack(SHELF_MAGIC, SHELF_VERSION, slot_count)
        + struct.pack(f"<{slot_count}I", *ends)
        + b"".join(blobs)
    )


def unpack_shelf(raw: bytes) -> list[bytes | None]:
    """Every slot of a shelf (None = empty); `DecodeError` if the table does not describe the data."""
    raw, data, ends = _shelf_table(raw)
    starts = (0, *ends[:-1])
    return [raw[data + a : data + b] or None for a, b in zip(starts, ends, strict=True)]


def shelf_slot(raw: bytes | None, slot: int) -> bytes | None:
    """The blob in one slot of a shelf (None: no shelf, or an empty slot). Checks the header and the
    two ends this slot needs, as `lookup.lua` does: damage elsewhere in the table is found by the
    reader of the slot it describes, and refused by every writer (`unpack_shelf`, `shelf_put.lua`)."""
    if raw is None:
        return None
    raw, data, count = _shelf_head(raw)
    if slot >= count:
        return None
    start = _END.unpack_from(raw, _SHELF_HEAD.size + 4 * (slot - 1))[0] if slot else 0
    stop = _END.unpack_from(raw, _SHELF_HEAD.size + 4 * slot)[0]
    if start > stop or stop > len(raw) - data:
        raise DecodeError("shelf slot table does not match its data")
    return raw[data + start : data + stop] or None


def _shelf_head(raw: bytes) -> tuple[bytes, int, int]:
    """The shelf with its header checked, where its data starts and its slot count."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise DecodeError(f"a shelf is bytes, not {type(raw).__name__}")
    raw = bytes(raw)
    if len(raw) < _SHELF_HEAD.size:
        raise DecodeError("shelf is shorter than its header")
    magic, version, count = _SHELF_HEAD.unpack_from(raw, 0)
    if magic != SHELF_MAGIC:
        raise DecodeError("not a partarchive shelf (wrong magic)")
    if version != SHELF_VERSION:
        raise DecodeError(f"unknown shelf format version {version}")
    data = _SHELF_HEAD.size + 4 * count
    if count == 0 or len(raw) < data:
        raise DecodeError("shelf is shorter than its slot table")
    return raw, data, count


def _shelf_table(raw: bytes) -> tuple[bytes, int, tuple[int, ...]]:
    """The checked shelf, where its data starts and its slot ends (every one checked)."""
    raw, data, count = _shelf_head(raw)
    ends = struct.unpack_from(f"<{count}I", raw, _SHELF_HEAD.size)
    if ends[-1] != len(raw) - data or list(ends) != sorted(ends):
        raise DecodeError("shelf slot table does not match its data")
    return raw, data, ends

"""Framed blobs: every stored batch starts with a header and carries a checksum.

    offset 0  2 bytes  magic b"\\xa7P"
    offset 2  1 byte   format version (1)
    offset 3  1 byte   codec id (see `Codec`)
    offset 4  4 bytes  CRC-32 of every other byte of the blob (header and payload)
    offset 8  payload  columnar or text batch, zstandard-compressed when the codec says so

CRC-32 detects every single-bit flip and every burst up to 32 bits. Decoding anything
that is not a valid blob raises `DecodeError` and nothing else.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Sequence

import zstandard

from codec.columnar import MAX_RECORDS, PayloadHead, decode_columns, encode_columns, find_in_head, read_head
from codec.errors import DecodeError, ValidationError
from codec.head_cache import HeadCache
from codec.record import ArchivedPartition
from codec.text import decode_text, encode_text
from codec.varint import get_uvarint
from codec.workers import WorkerMap

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
    records: Sequence[ArchivedPartition], workers: WorkerMap, *, fmt: str = "columnar", compress: bool | None = None
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


def decode_blob(blob: bytes, workers: WorkerMap) -> list[ArchivedPartition]:
    codec, payload = _payload(blob)
    try:
        if codec.columnar:
            return decode_columns(payload, workers)
        return decode_text(payload.decode("utf-8"), workers)
    except DecodeError:
        raise
    except (UnicodeDecodeError, ValueError, OverflowError, MemoryError) as exc:
        raise DecodeError(f"invalid {codec.name.lower()} payload: {exc}") from None


def find_in_blob(blob: bytes, workers: WorkerMap, pid: int) -> ArchivedPartition | None:
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


#: The decoded heads `find_in_blob` keeps (`codec.head_cache`); None for a text blob.
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

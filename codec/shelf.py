"""Shelves: one Redis string holding the sealed blobs of ``SHELF_SLOTS`` consecutive batches.

A key per batch costs Redis ~90 bytes of its own (dictionary entry, object, key name,
allocator rounding): about as much as a sealed batch of 100 partitions weighs. A shelf pays
that once for 64 batches, and batch ``b`` stays addressable: shelf ``b // 64``, slot ``b % 64``.

    offset 0       2 bytes   magic b"\\xa7S"
    offset 2       1 byte    format version (1)
    offset 3       1 byte    slot count N
    offset 4       4N bytes  per slot, little-endian u32: where its blob ends, counted from the
                             start of the data (an empty slot ends where the one before it does)
    offset 4 + 4N  data      the slots' framed blobs (see `codec.framing`) less their first three
                             bytes (magic and version, which the shelf header already says), in
                             slot order

A slot's blob keeps its codec byte and checksum (which covers the three bytes left out), so a
damaged slot is found when decoded; `shelved` and `unshelved` convert between the two forms.
`layers/archive/lua/shelf_put.lua` writes this format on the server; `pack_shelf` is its twin for
bulk writers and tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from codec.errors import DecodeError, ValidationError
from codec.framing import FORMAT_VERSION, MAGIC

SHELF_MAGIC = b"\xa7S"
SHELF_VERSION = 1
SHELF_SLOTS = 64
_HEAD = struct.Struct("<2sBB")
_END = struct.Struct("<I")
_BLOB_PREFIX = MAGIC + bytes((FORMAT_VERSION,))


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
    return _HEAD.pack(SHELF_MAGIC, SHELF_VERSION, slot_count) + struct.pack(f"<{slot_count}I", *ends) + b"".join(blobs)


def unpack_shelf(raw: bytes) -> list[bytes | None]:
    """Every slot of a shelf (None = empty); `DecodeError` if the table does not describe the data."""
    raw, data, ends = _table(raw)
    starts = (0, *ends[:-1])
    return [raw[data + a : data + b] or None for a, b in zip(starts, ends, strict=True)]


def shelf_slot(raw: bytes | None, slot: int) -> bytes | None:
    """The blob in one slot of a shelf (None: no shelf, or an empty slot). Checks the header and the
    two ends this slot needs, as `lookup.lua` does: damage elsewhere in the table is found by the
    reader of the slot it describes, and refused by every writer (`unpack_shelf`, `shelf_put.lua`)."""
    if raw is None:
        return None
    raw, data, count = _head(raw)
    if slot >= count:
        return None
    start = _END.unpack_from(raw, _HEAD.size + 4 * (slot - 1))[0] if slot else 0
    stop = _END.unpack_from(raw, _HEAD.size + 4 * slot)[0]
    if start > stop or stop > len(raw) - data:
        raise DecodeError("shelf slot table does not match its data")
    return raw[data + start : data + stop] or None


def _head(raw: bytes) -> tuple[bytes, int, int]:
    """The shelf with its header checked, where its data starts and its slot count."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise DecodeError(f"a shelf is bytes, not {type(raw).__name__}")
    raw = bytes(raw)
    if len(raw) < _HEAD.size:
        raise DecodeError("shelf is shorter than its header")
    magic, version, count = _HEAD.unpack_from(raw, 0)
    if magic != SHELF_MAGIC:
        raise DecodeError("not a partarchive shelf (wrong magic)")
    if version != SHELF_VERSION:
        raise DecodeError(f"unknown shelf format version {version}")
    data = _HEAD.size + 4 * count
    if count == 0 or len(raw) < data:
        raise DecodeError("shelf is shorter than its slot table")
    return raw, data, count


def _table(raw: bytes) -> tuple[bytes, int, tuple[int, ...]]:
    """The checked shelf, where its data starts and its slot ends (every one checked)."""
    raw, data, count = _head(raw)
    ends = struct.unpack_from(f"<{count}I", raw, _HEAD.size)
    if ends[-1] != len(raw) - data or list(ends) != sorted(ends):
        raise DecodeError("shelf slot table does not match its data")
    return raw, data, ends

"""LEB128 variable-length integers (zigzag for signed values)."""

from __future__ import annotations

from codec.errors import DecodeError

_MAX_BYTES = 10


def put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def put_svarint(out: bytearray, value: int) -> None:
    put_uvarint(out, (value << 1) if value >= 0 else ((-value) << 1) - 1)


def get_uvarint(buf: bytes, offset: int) -> tuple[int, int]:
    if offset < len(buf) and buf[offset] < 0x80:  # one byte: most of a batch header's
        return buf[offset], offset + 1
    result = shift = 0
    for i in range(offset, min(offset + _MAX_BYTES, len(buf))):
        byte = buf[i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i + 1
        shift += 7
    raise DecodeError("truncated or overlong varint")


def get_svarint(buf: bytes, offset: int) -> tuple[int, int]:
    value, offset = get_uvarint(buf, offset)
    return (value >> 1) if not value & 1 else -((value + 1) >> 1), offset

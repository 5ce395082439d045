"""One column of integers, packed (the unit `codec.columnar` builds a batch from).

A column is frame-of-reference bit-packed: a bit width byte (0-64) and a zigzag varint base,
then every value's offset from the base in exactly that many bits (nothing at all when every
value equals the base).

A column whose values span a range R that is not a power of two can instead be stored in
base R ("radix" column): byte 65, varint R, zigzag varint base, then the values grouped k at a
time (of the k whose R^k fits in 64 bits, the one wasting the fewest bits a value), each group
one number < R^k, the groups bit-packed at the width of R^k - 1 (the last, shorter group at its
own width). That costs about log2(R) bits a value instead of ceil(log2(R)); `pack_column`
keeps the smaller form.

The varints of both, and of the batch header (`codec.columnar`), are LEB128 (zigzag for signed
values): `put_uvarint`, `get_svarint`, ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from codec.errors import DecodeError

_MAX_BYTES = 10  # of a varint
_RADIX = 65  # the kind byte of a radix column (bit widths are 0..64)
_MAX_RADIX = 1 << 32


def pack_column(values: Sequence[int]) -> bytes:
    """The smaller of the bit-packed and the radix encodings of a column."""
    base = min(values, default=0)
    spread = max(values, default=0) - base
    if _radix_size(len(values), base, spread) < _packed_size(len(values), base, spread):
        return _radix_column(values, base, spread + 1)
    width = spread.bit_length()
    out = bytearray((width,))
    put_svarint(out, base)
    if width:
        packed = 0
        for value in reversed(values):
            packed = (packed << width) | (value - base)
        out += packed.to_bytes((len(values) * width + 7) // 8, "little")
    return bytes(out)


def packed_size(values: Sequence[int]) -> int:
    """What `pack_column` of these values weighs, without building it."""
    base = min(values, default=0)
    spread = max(values, default=0) - base
    return min(_packed_size(len(values), base, spread), _radix_size(len(values), base, spread))


def varint_size(value: int) -> int:
    """Bytes of ``value`` as an unsigned varint."""
    return max(1, (value.bit_length() + 6) // 7)


def zigzag(value: int) -> int:
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def _packed_size(count: int, base: int, spread: int) -> int:
    return 1 + varint_size(zigzag(base)) + (count * spread.bit_length() + 7) // 8


def _radix_size(count: int, base: int, spread: int) -> int:
    """Bytes of the radix form; a large number when radix does not apply (a power of two,
    one value, a range over `_MAX_RADIX`)."""
    radix = spread + 1
    if not 2 < radix <= _MAX_RADIX or not radix & spread or count < 2:
        return 1 << 62
    per_group, width, _, tail_width = _radix_layout(radix, count)
    return _packed_size(0, base, 0) + varint_size(radix) + ((count // per_group) * width + tail_width + 7) // 8


@lru_cache(maxsize=4096)
def _radix_layout(radix: int, count: int) -> tuple[int, int, int, int]:
    """(values a group, bits a group, values in the last group, bits of the last group)."""
    per_group = _group_size(radix)
    tail = count % per_group
    return per_group, (radix**per_group - 1).bit_length(), tail, (radix**tail - 1).bit_length()


@lru_cache(maxsize=4096)
def _group_size(radix: int) -> int:
    """The values a group whose number fits in 64 bits and wastes the fewest bits a value."""
    best, best_cost = 1, (radix - 1).bit_length()
    k = 2
    while radix**k <= 1 << 64:
        cost = (radix**k - 1).bit_length() / k
        if cost <= best_cost:
            best, best_cost = k, cost
        k += 1
    return best


def _radix_column(values: Sequence[int], base: int, radix: int) -> bytes:
    per_group, width, _, tail_width = _radix_layout(radix, len(values))
    offsets = [value - base for value in values]
    packed = shift = 0
    for start in range(0, len(values), per_group):
        group = 0
        for value in reversed(offsets[start : start + per_group]):
            group = group * radix + value
        packed |= group << shift
        shift += width if len(values) - start >= per_group else tail_width
    out = bytearray((_RADIX,))
    put_uvarint(out, radix)
    put_svarint(out, base)
    return bytes(out + packed.to_bytes((shift + 7) // 8, "little"))


@dataclass(slots=True)
class Column:
    """Where one packed column lies in a buffer, read from its header: values on demand."""

    buf: bytes
    offset: int  # of the packed values
    end: int  # where the next column starts
    count: int
    base: int
    width: int  # bits a value (bit-packed) or a group (radix)
    radix: int = 0  # 0: bit-packed

    def all(self) -> list[int]:
        """Every value; a radix group beyond its range is a `DecodeError`."""
        count, base, width = self.count, self.base, self.width
        if not width:
            return [base] * count
        packed = int.from_bytes(self.buf[self.offset : self.end], "little")
        mask = (1 << width) - 1
        if not self.radix:
            if base:
                return [base + ((packed >> shift) & mask) for shift in range(0, count * width, width)]
            return [(packed >> shift) & mask for shift in range(0, count * width, width)]
        radix = self.radix
        per_group, _, tail, _ = _radix_layout(radix, count)
        groups = count // per_group
        limit = radix**per_group
        values: list[int] = []
        for shift, size in [(i * width, per_group) for i in range(groups)] + ([(groups * width, tail)] if tail else []):
            group = (packed >> shift) & mask
            if group >= (limit if size == per_group else radix**size):
                raise DecodeError("radix column value out of range")
            for _ in range(size):
                group, digit = divmod(group, radix)
                values.append(base + digit)
        return values

    def at(self, index: int) -> int:
        """The value at ``index``, reading only the bits that hold it."""
        if self.radix:
            per_group, _, _, tail_width = _radix_layout(self.radix, self.count)
            group_no = index // per_group
            width = self.width if group_no < self.count // per_group else tail_width
            group = self._bits(group_no * self.width, width)
            digit: int = (group // self.radix ** (index % per_group)) % self.radix
            return self.base + digit
        return self.base + self._bits(index * self.width, self.width) if self.width else self.base

    def _bits(self, bit: int, width: int) -> int:
        start = self.offset + bit // 8
        return (int.from_bytes(self.buf[start : self.offset + (bit + width) // 8 + 1], "little") >> (bit % 8)) & (
            (1 << width) - 1
        )


def read_column(buf: bytes, offset: int, count: int) -> Column:
    """The column of ``count`` values at ``offset``, its header checked (`Column.end`: where the
    next one starts)."""
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    kind = buf[offset]
    if kind == _RADIX:
        radix, at = get_uvarint(buf, offset + 1)
        if not 2 < radix <= _MAX_RADIX:
            raise DecodeError(f"radix {radix} is out of range")
        base, at = get_svarint(buf, at)
        per_group, width, _, tail_width = _radix_layout(radix, count)
        column = Column(buf, at, at + ((count // per_group) * width + tail_width + 7) // 8, count, base, width, radix)
    else:
        if kind > 64:
            raise DecodeError(f"column bit width {kind} is over 64")
        base, at = get_svarint(buf, offset + 1)
        column = Column(buf, at, at + (count * kind + 7) // 8, count, base, kind)
    if column.end > len(buf):
        raise DecodeError("truncated columnar payload")
    return column


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

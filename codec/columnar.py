"""The binary columnar batch format (before framing and compression).

Records are stored column by column. Each column is frame-of-reference bit-packed: a
bit width (0-64) and a signed base, then every value's offset from the base in exactly
that many bits (nothing at all when every value equals the base). Columns that follow a
pattern are stored as deltas:

    pid       first pid, then pid[i] - pid[i-1]
    min_id    first min_id, then the error of the guess min[i-1] + (pid[i]-pid[i-1]) * width[i-1]
              (contiguous, equal-width partitions cost nothing); raw values when a guess is huge
    span      max_id - min_id (up to 2^64 - 1: ids are signed 64-bit)
    worker    short worker number
    time      first completed_at, then completed_at[i] - completed_at[i-1]
    duration  seconds

A column whose values span a range R that is not a power of two can instead be stored in
base R ("radix" column): values are grouped k at a time (of the k whose R^k fits in 64 bits,
the one wasting the fewest bits a value), each group is one number < R^k, and the groups are
bit-packed at the width of R^k - 1 (the last, shorter group at its own width). That costs
about log2(R) bits a value instead of ceil(log2(R)); the encoder keeps the smaller form.

Completion times can instead be stored as residuals from a line through the first time with a
slope in 1/256 s per partition id (flag 4): workers claim the lowest pending partitions, so a
batch completes at a roughly steady rate, and the residuals span less than the deltas do. The
encoder keeps whichever form is smaller.

Layout: varint count, flags byte, varints first pid / first min_id (zigzag when flag 2 is set,
always so since signed ids; older blobs have it unsigned; with flag 8 as its difference from
``(pid - 1) * (span + 1) + 1``, where equal-width partitions from id 1 start) / first
completed_at / (flag 4) the zigzag slope, then the six columns, each as: width byte (0-64) and zigzag varint base, then
ceil(n * width / 8) bytes; or byte 65, varint R and zigzag varint base, then the groups.
Record order is kept, so decoding gives back exactly the list that was encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import accumulate
from operator import sub

from codec.errors import DecodeError, ValidationError
from codec.record import ArchivedPartition
from codec.validate import MAX_DURATION, MAX_ID, MAX_INT64, MAX_TIMESTAMP, MIN_INT64
from codec.varint import get_svarint, get_uvarint, put_svarint, put_uvarint
from codec.workers import WorkerMap

_FLAG_PREDICTED_MIN = 1
_FLAG_SIGNED_FIRST_MIN = 2
_FLAG_TIME_LINE = 4
_FLAG_FIRST_MIN_GUESS = 8
_RADIX = 65  # the column-kind byte of a radix column (bit widths are 0..64)
_MAX_RADIX = 1 << 32
_MAX_SLOPE = 1 << 62
_build = partial(tuple.__new__, ArchivedPartition)  # fields already range-checked per column
_MAX_GUESS = 2**62
MAX_RECORDS = 1_000_000


def _column(values: Sequence[int]) -> bytes:
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


def _column_size(values: Sequence[int]) -> int:
    """What `_column` of these values weighs, without building it."""
    base = min(values, default=0)
    spread = max(values, default=0) - base
    return min(_packed_size(len(values), base, spread), _radix_size(len(values), base, spread))


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _packed_size(count: int, base: int, spread: int) -> int:
    zigzag = (base << 1) if base >= 0 else ((-base) << 1) - 1
    return 1 + _varint_size(zigzag) + (count * spread.bit_length() + 7) // 8


def _radix_size(count: int, base: int, spread: int) -> int:
    """Bytes of the radix form; a large number when radix does not apply (a power of two,
    one value, a range over `_MAX_RADIX`)."""
    radix = spread + 1
    if not 2 < radix <= _MAX_RADIX or not radix & spread or count < 2:
        return 1 << 62
    per_group, width, _, tail_width = _radix_layout(radix, count)
    return _packed_size(0, base, 0) + _varint_size(radix) + ((count // per_group) * width + tail_width + 7) // 8


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


def _get_column(buf: bytes, offset: int, count: int) -> tuple[list[int], int]:
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    width = buf[offset]
    if width == _RADIX:
        return _get_radix_column(buf, offset + 1, count)
    base, offset = get_svarint(buf, offset + 1)
    if width == 0:
        return [base] * count, offset
    if width > 64:
        raise DecodeError(f"column bit width {width} is over 64")
    end = offset + (count * width + 7) // 8
    if end > len(buf):
        raise DecodeError("truncated columnar payload")
    packed = int.from_bytes(buf[offset:end], "little")
    mask = (1 << width) - 1
    if base:
        return [base + ((packed >> shift) & mask) for shift in range(0, count * width, width)], end
    return [(packed >> shift) & mask for shift in range(0, count * width, width)], end


def _get_radix_column(buf: bytes, offset: int, count: int) -> tuple[list[int], int]:
    radix, offset = get_uvarint(buf, offset)
    if not 2 < radix <= _MAX_RADIX:
        raise DecodeError(f"radix {radix} is out of range")
    base, offset = get_svarint(buf, offset)
    per_group, width, tail, tail_width = _radix_layout(radix, count)
    groups = count // per_group
    end = offset + (groups * width + tail_width + 7) // 8
    if end > len(buf):
        raise DecodeError("truncated columnar payload")
    packed = int.from_bytes(buf[offset:end], "little")
    mask = (1 << width) - 1
    limit = radix**per_group
    values: list[int] = []
    for shift, size in [(i * width, per_group) for i in range(groups)] + ([(groups * width, tail)] if tail else []):
        group = (packed >> shift) & mask
        if group >= (limit if size == per_group else radix**size):
            raise DecodeError("radix column value out of range")
        for _ in range(size):
            group, digit = divmod(group, radix)
            values.append(base + digit)
    return values, end


def encode_columns(records: Sequence[ArchivedPartition], workers: WorkerMap) -> bytes:
    if not records:
        raise ValidationError("a batch needs at least one record")
    if len(records) > MAX_RECORDS:
        raise ValidationError(f"a batch holds at most {MAX_RECORDS} records")
    if not all(isinstance(r, ArchivedPartition) for r in records):
        raise ValidationError("records must be ArchivedPartition")
    pids = [r.partition_id for r in records]
    mins = [r.min_id for r in records]
    spans = [r.max_id - r.min_id for r in records]
    times = [r.completed_at for r in records]
    pid_deltas = list(map(sub, pids[1:], pids))
    guesses = [mins[i] - (mins[i - 1] + pid_deltas[i - 1] * (spans[i - 1] + 1)) for i in range(1, len(records))]
    predicted = all(-_MAX_GUESS <= g <= _MAX_GUESS for g in guesses)
    slope, time_column = _time_column(pids, times)
    out = bytearray()
    put_uvarint(out, len(records))
    flags = (_FLAG_PREDICTED_MIN if predicted else 0) | _FLAG_SIGNED_FIRST_MIN
    flags |= _FLAG_TIME_LINE if slope is not None else 0
    first_min = mins[0]
    if abs(first_min - _first_min_guess(pids[0], spans[0])) < abs(first_min):
        flags |= _FLAG_FIRST_MIN_GUESS
        first_min -= _first_min_guess(pids[0], spans[0])
    out.append(flags)
    put_uvarint(out, pids[0])
    put_svarint(out, first_min)
    put_uvarint(out, times[0])
    if slope is not None:
        put_svarint(out, slope)
    out += _column(pid_deltas)
    out += _column(guesses if predicted else mins[1:])
    out += _column(spans)
    out += _column([workers.short_id(r.worker_id) for r in records])
    out += time_column
    out += _column([r.duration for r in records])
    return bytes(out)


def _first_min_guess(first_pid: int, first_span: int) -> int:
    """Where the first partition's ids start if every partition before it had its width and
    partition 1 started at id 1 (elk_coordinator's usual layout)."""
    return (first_pid - 1) * (first_span + 1) + 1


def _time_column(pids: list[int], times: list[int]) -> tuple[int | None, bytes]:
    """The smallest of: deltas, or residuals from a line of the batch's mean rate (in 1/256 s
    per id) or of that rate rounded to whole seconds. Returns (slope or None, column)."""
    deltas = list(map(sub, times[1:], times))
    ids = pids[-1] - pids[0]
    if ids <= 0 or len(pids) < 3:
        return None, _column(deltas)
    best: tuple[int, list[int]] | None = None
    best_size = _column_size(deltas)
    mean = round((times[-1] - times[0]) * 256 / ids)
    for slope in {mean, round(mean / 256) * 256}:
        if abs(slope) > _MAX_SLOPE:
            continue
        first_pid, first_time = pids[0], times[0]
        line = zip(pids[1:], times[1:], strict=True)
        residuals = [t - first_time - ((slope * (p - first_pid)) >> 8) for p, t in line]
        size = _column_size(residuals) + _varint_size(slope << 1 if slope >= 0 else ((-slope) << 1) - 1)
        if size < best_size:
            best, best_size = (slope, residuals), size
    return (None, _column(deltas)) if best is None else (best[0], _column(best[1]))


@dataclass(frozen=True, slots=True)
class _ColumnRef:
    """Where one column lies in a payload, read from its header only: values on demand."""

    buf: bytes
    offset: int  # of the packed values
    count: int
    base: int
    width: int  # bits a value (bit-packed) or a group (radix)
    radix: int = 0  # 0: bit-packed

    def all(self) -> list[int]:
        return _get_column(self.buf, self.offset - self._head(), self.count)[0]

    def at(self, index: int) -> int:
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

    def _head(self) -> int:
        zigzag = (self.base << 1) if self.base >= 0 else ((-self.base) << 1) - 1
        return 1 + _varint_size(zigzag) + (_varint_size(self.radix) if self.radix else 0)


def _column_ref(buf: bytes, offset: int, count: int) -> tuple[_ColumnRef, int]:
    """A column's header, checked, and where the next column starts."""
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    kind = buf[offset]
    if kind == _RADIX:
        radix, at = get_uvarint(buf, offset + 1)
        if not 2 < radix <= _MAX_RADIX:
            raise DecodeError(f"radix {radix} is out of range")
        base, at = get_svarint(buf, at)
        per_group, width, _, tail_width = _radix_layout(radix, count)
        end = at + ((count // per_group) * width + tail_width + 7) // 8
        ref = _ColumnRef(buf, at, count, base, width, radix)
    else:
        if kind > 64:
            raise DecodeError(f"column bit width {kind} is over 64")
        base, at = get_svarint(buf, offset + 1)
        end = at + (count * kind + 7) // 8
        ref = _ColumnRef(buf, at, count, base, kind)
    if end > len(buf):
        raise DecodeError("truncated columnar payload")
    return ref, end


@dataclass(frozen=True, slots=True)
class _Payload:
    count: int
    flags: int  # with the flags read into the fields below cleared
    first_pid: int
    first_min: int  # as stored (before the first-min guess is added back)
    first_min_guessed: bool
    first_time: int
    slope: int | None
    pid_deltas: _ColumnRef
    min_col: _ColumnRef
    spans: _ColumnRef
    shorts: _ColumnRef
    times: _ColumnRef
    durations: _ColumnRef


def _read_payload(buf: bytes) -> _Payload:
    count, offset = get_uvarint(buf, 0)
    if not 1 <= count <= MAX_RECORDS:
        raise DecodeError(f"implausible record count {count}")
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    flags = buf[offset]
    first_pid, offset = get_uvarint(buf, offset + 1)
    first_min, offset = (get_svarint if flags & _FLAG_SIGNED_FIRST_MIN else get_uvarint)(buf, offset)
    first_time, offset = get_uvarint(buf, offset)
    slope = None
    if flags & _FLAG_TIME_LINE:
        slope, offset = get_svarint(buf, offset)
        if abs(slope) > _MAX_SLOPE:
            raise DecodeError("time slope out of range")
    refs = []
    for n in (count - 1, count - 1, count, count, count - 1, count):
        ref, offset = _column_ref(buf, offset, n)
        refs.append(ref)
    if offset != len(buf):
        raise DecodeError("trailing bytes after the last column")
    rest = flags & ~(_FLAG_SIGNED_FIRST_MIN | _FLAG_FIRST_MIN_GUESS | _FLAG_TIME_LINE)
    if rest not in (0, _FLAG_PREDICTED_MIN):
        raise DecodeError(f"unknown columnar flags {rest}")
    return _Payload(
        count, rest, first_pid, first_min, bool(flags & _FLAG_FIRST_MIN_GUESS), first_time, slope, *refs
    )


def decode_columns(buf: bytes, workers: WorkerMap) -> list[ArchivedPartition]:
    """Decode a payload; anything malformed or out of range is a `DecodeError`."""
    head = _read_payload(buf)
    pid_deltas, min_col, spans = head.pid_deltas.all(), head.min_col.all(), head.spans.all()
    shorts, time_deltas, durations = head.shorts.all(), head.times.all(), head.durations.all()
    first_pid, first_min = head.first_pid, head.first_min
    pids = list(accumulate(pid_deltas, initial=first_pid))
    if head.first_min_guessed:
        first_min += _first_min_guess(first_pid, spans[0])
    if head.flags == _FLAG_PREDICTED_MIN and not any(min_col) and min(spans) == max(spans):
        step = spans[0] + 1
        mins = [first_min + (pid - first_pid) * step for pid in pids]
    elif head.flags == _FLAG_PREDICTED_MIN:
        mins = [first_min]
        prev = first_min
        for delta, span, error in zip(pid_deltas, spans[:-1], min_col, strict=True):
            prev = prev + delta * (span + 1) + error
            mins.append(prev)
    else:
        mins = [first_min, *min_col]
    first_time, slope = head.first_time, head.slope
    if slope is None:
        times = list(accumulate(time_deltas, initial=first_time))
    else:
        times = [first_time] + [
            first_time + ((slope * (p - first_pid)) >> 8) + r for p, r in zip(pids[1:], time_deltas, strict=True)
        ]
    _check_range("partition_id", pids, 1, MAX_ID)
    _check_range("min_id", mins, MIN_INT64, MAX_INT64)
    _check_range("span", spans, 0, MAX_INT64 - MIN_INT64)
    maxs = [lo + s for lo, s in zip(mins, spans, strict=True)]
    _check_range("max_id", maxs, MIN_INT64, MAX_INT64)
    _check_range("completed_at", times, 0, MAX_TIMESTAMP)
    _check_range("duration", durations, 0, MAX_DURATION)
    table = workers.lookup_table()
    try:
        names = [table[s] for s in shorts]
    except KeyError as exc:
        raise DecodeError(f"unknown worker short id {exc.args[0]}") from None
    return list(map(_build, zip(pids, mins, maxs, names, times, durations, strict=True)))


def find_in_columns(buf: bytes, workers: WorkerMap, pid: int) -> ArchivedPartition | None:
    """The record of partition ``pid`` in a payload (None if it holds none), reading only what
    that record needs where the format allows: the query router's one-record decode. The
    payload's structure is checked as `decode_columns` checks it; value ranges only for the
    record returned (the blob's checksum has vouched for the rest)."""
    head = _read_payload(buf)
    first_pid = head.first_pid
    pid_deltas = head.pid_deltas.all()
    pids = list(accumulate(pid_deltas, initial=first_pid))
    try:
        i = pids.index(pid)
    except ValueError:
        return None
    span = head.spans.at(i)
    first_min = head.first_min
    if head.first_min_guessed:
        first_min += _first_min_guess(first_pid, head.spans.at(0))
    constant = not head.min_col.width and not head.min_col.base and not head.spans.width
    if not i or (head.flags == _FLAG_PREDICTED_MIN and constant):
        low = first_min + (pid - first_pid) * (span + 1)
    elif head.flags == _FLAG_PREDICTED_MIN:
        spans, errors = head.spans.all(), head.min_col.all()
        low = first_min + sum(d * (w + 1) + e for d, w, e in zip(pid_deltas[:i], spans[:i], errors[:i], strict=True))
    else:
        low = head.min_col.at(i - 1)
    if not i:
        at = head.first_time
    elif head.slope is None:
        at = head.first_time + sum(head.times.all()[:i])
    else:
        at = head.first_time + ((head.slope * (pid - first_pid)) >> 8) + head.times.at(i - 1)
    duration, short = head.durations.at(i), head.shorts.at(i)
    for field, value, lo, hi in (
        ("partition_id", pid, 1, MAX_ID),
        ("min_id", low, MIN_INT64, MAX_INT64),
        ("span", span, 0, MAX_INT64 - MIN_INT64),
        ("max_id", low + span, MIN_INT64, MAX_INT64),
        ("completed_at", at, 0, MAX_TIMESTAMP),
        ("duration", duration, 0, MAX_DURATION),
    ):
        _check_range(field, [value], lo, hi)
    name = workers.lookup_table().get(short)
    if name is None:
        raise DecodeError(f"unknown worker short id {short}")
    return _build((pid, low, low + span, name, at, duration))


def _check_range(name: str, values: list[int], lo: int, hi: int) -> None:
    if min(values) < lo or max(values) > hi:
        raise DecodeError(f"{name} out of range in columnar payload")

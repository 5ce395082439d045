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

Layout: varint count, flags byte, varints first pid / first min_id (zigzag when flag 2 is set,
always so since signed ids; older blobs have it unsigned) / first completed_at,
then the six columns, each as: width byte, zigzag varint base, ceil(n * width / 8) bytes.
Record order is kept, so decoding gives back exactly the list that was encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import accumulate
from operator import sub

from codec.errors import DecodeError, ValidationError
from codec.record import ArchivedPartition
from codec.validate import MAX_DURATION, MAX_ID, MAX_INT64, MAX_TIMESTAMP, MIN_INT64
from codec.varint import get_svarint, get_uvarint, put_svarint, put_uvarint
from codec.workers import WorkerMap

_FLAG_PREDICTED_MIN = 1
_FLAG_SIGNED_FIRST_MIN = 2
_build = partial(tuple.__new__, ArchivedPartition)  # fields already range-checked per column
_MAX_GUESS = 2**62
MAX_RECORDS = 1_000_000


def _put_column(out: bytearray, values: Sequence[int]) -> None:
    base = min(values, default=0)
    width = (max(values, default=0) - base).bit_length()
    out.append(width)
    put_svarint(out, base)
    if width:
        packed = 0
        for value in reversed(values):
            packed = (packed << width) | (value - base)
        out += packed.to_bytes((len(values) * width + 7) // 8, "little")


def _get_column(buf: bytes, offset: int, count: int) -> tuple[list[int], int]:
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    width = buf[offset]
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
    out = bytearray()
    put_uvarint(out, len(records))
    out.append((_FLAG_PREDICTED_MIN if predicted else 0) | _FLAG_SIGNED_FIRST_MIN)
    put_uvarint(out, pids[0])
    put_svarint(out, mins[0])
    put_uvarint(out, times[0])
    _put_column(out, pid_deltas)
    _put_column(out, guesses if predicted else mins[1:])
    _put_column(out, spans)
    _put_column(out, [workers.short_id(r.worker_id) for r in records])
    _put_column(out, list(map(sub, times[1:], times)))
    _put_column(out, [r.duration for r in records])
    return bytes(out)


def decode_columns(buf: bytes, workers: WorkerMap) -> list[ArchivedPartition]:
    """Decode a payload; anything malformed or out of range is a `DecodeError`."""
    count, offset = get_uvarint(buf, 0)
    if not 1 <= count <= MAX_RECORDS:
        raise DecodeError(f"implausible record count {count}")
    if offset >= len(buf):
        raise DecodeError("truncated columnar payload")
    flags = buf[offset]
    first_pid, offset = get_uvarint(buf, offset + 1)
    first_min, offset = (get_svarint if flags & _FLAG_SIGNED_FIRST_MIN else get_uvarint)(buf, offset)
    flags &= ~_FLAG_SIGNED_FIRST_MIN
    first_time, offset = get_uvarint(buf, offset)
    pid_deltas, offset = _get_column(buf, offset, count - 1)
    min_col, offset = _get_column(buf, offset, count - 1)
    spans, offset = _get_column(buf, offset, count)
    shorts, offset = _get_column(buf, offset, count)
    time_deltas, offset = _get_column(buf, offset, count - 1)
    durations, offset = _get_column(buf, offset, count)
    if offset != len(buf):
        raise DecodeError("trailing bytes after the last column")
    pids = list(accumulate(pid_deltas, initial=first_pid))
    if flags == _FLAG_PREDICTED_MIN and not any(min_col) and min(spans) == max(spans):
        step = spans[0] + 1
        mins = [first_min + (pid - first_pid) * step for pid in pids]
    elif flags == _FLAG_PREDICTED_MIN:
        mins = [first_min]
        prev = first_min
        for delta, span, error in zip(pid_deltas, spans[:-1], min_col, strict=True):
            prev = prev + delta * (span + 1) + error
            mins.append(prev)
    elif flags == 0:
        mins = [first_min, *min_col]
    else:
        raise DecodeError(f"unknown columnar flags {flags}")
    times = list(accumulate(time_deltas, initial=first_time))
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


def _check_range(name: str, values: list[int], lo: int, hi: int) -> None:
    if min(values) < lo or max(values) > hi:
        raise DecodeError(f"{name} out of range in columnar payload")

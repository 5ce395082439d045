"""The binary columnar batch format (before framing and compression).

Records are stored column by column, each column as frame-of-reference integers: one
signed 64-bit base and, per value, the offset from it in 0, 1, 2, 4 or 8 bytes (0 when
every value equals the base). Columns that follow a pattern are stored as deltas:

    pid       first pid, then pid[i] - pid[i-1]
    min_id    first min_id, then the error of the guess min[i-1] + (pid[i]-pid[i-1]) * width[i-1]
              (contiguous, equal-width partitions cost nothing); raw values when a guess overflows
    span      max_id - min_id
    worker    short worker number
    time      first completed_at, then completed_at[i] - completed_at[i-1]
    duration  seconds

Record order is kept, so decoding gives back exactly the list that was encoded.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate
from operator import sub

from codec.errors import DecodeError, ValidationError
from codec.record import ArchivedPartition
from codec.validate import MAX_DURATION, MAX_ID, MAX_TIMESTAMP
from codec.workers import WorkerMap

_HEAD = struct.Struct("<IBqqq")  # count, flags, first pid, first min_id, first completed_at
_COLUMN = struct.Struct("<Bq")  # width code, base
_WIDTHS = {0: "", 1: "B", 2: "H", 4: "I", 8: "Q"}
_FLAG_PREDICTED_MIN = 1
_I64 = (-(2**63), 2**63 - 1)
MAX_RECORDS = 1_000_000


@lru_cache(maxsize=256)
def _packer(count: int, width: int) -> struct.Struct:
    return struct.Struct(f"<{count}{_WIDTHS[width]}")


def _put_column(out: bytearray, values: Sequence[int]) -> None:
    if not values:
        out += _COLUMN.pack(0, 0)
        return
    base = min(values)
    span = max(values) - base
    width = 0 if span == 0 else 1 if span < 2**8 else 2 if span < 2**16 else 4 if span < 2**32 else 8
    out += _COLUMN.pack(width, base)
    if width:
        out += _packer(len(values), width).pack(*[v - base for v in values])


def _get_column(buf: bytes, offset: int, count: int) -> tuple[list[int], int]:
    width, base = _COLUMN.unpack_from(buf, offset)
    offset += _COLUMN.size
    if width not in _WIDTHS:
        raise DecodeError(f"unknown column width {width}")
    if width == 0:
        return [base] * count, offset
    raw = _packer(count, width).unpack_from(buf, offset)
    values = list(raw) if base == 0 else [base + v for v in raw]
    return values, offset + count * width


def encode_columns(records: Sequence[ArchivedPartition], workers: WorkerMap) -> bytes:
    if not records:
        raise ValidationError("a batch needs at least one record")
    if len(records) > MAX_RECORDS:
        raise ValidationError(f"a batch holds at most {MAX_RECORDS} records")
    for r in records:
        if not isinstance(r, ArchivedPartition):
            raise ValidationError("records must be ArchivedPartition")
    pids = [r.partition_id for r in records]
    mins = [r.min_id for r in records]
    spans = [r.max_id - r.min_id for r in records]
    times = [r.completed_at for r in records]
    pid_deltas = list(map(sub, pids[1:], pids))
    guesses = [mins[i] - (mins[i - 1] + pid_deltas[i - 1] * (spans[i - 1] + 1)) for i in range(1, len(records))]
    predicted = all(_I64[0] <= g <= _I64[1] for g in guesses)
    flags = _FLAG_PREDICTED_MIN if predicted else 0
    out = bytearray(_HEAD.pack(len(records), flags, pids[0], mins[0], times[0]))
    _put_column(out, pid_deltas)
    _put_column(out, guesses if predicted else mins[1:])
    _put_column(out, spans)
    _put_column(out, [workers.short_id(r.worker_id) for r in records])
    _put_column(out, list(map(sub, times[1:], times)))
    _put_column(out, [r.duration for r in records])
    return bytes(out)


def decode_columns(buf: bytes, workers: WorkerMap) -> list[ArchivedPartition]:
    """Decode a payload whose integrity the framing has checked; out-of-range values still fail."""
    try:
        count, flags, first_pid, first_min, first_time = _HEAD.unpack_from(buf, 0)
        if not 1 <= count <= MAX_RECORDS:
            raise DecodeError(f"implausible record count {count}")
        offset = _HEAD.size
        pid_deltas, offset = _get_column(buf, offset, count - 1)
        min_col, offset = _get_column(buf, offset, count - 1)
        spans, offset = _get_column(buf, offset, count)
        shorts, offset = _get_column(buf, offset, count)
        time_deltas, offset = _get_column(buf, offset, count - 1)
        durations, offset = _get_column(buf, offset, count)
    except struct.error as exc:
        raise DecodeError(f"truncated columnar payload: {exc}") from None
    if offset != len(buf):
        raise DecodeError("trailing bytes after the last column")
    pids = list(accumulate(pid_deltas, initial=first_pid))
    if flags == _FLAG_PREDICTED_MIN:
        mins = [first_min]
        prev = first_min
        for i, guess_error in enumerate(min_col):
            prev = prev + pid_deltas[i] * (spans[i] + 1) + guess_error
            mins.append(prev)
    elif flags == 0:
        mins = [first_min, *min_col]
    else:
        raise DecodeError(f"unknown columnar flags {flags}")
    times = list(accumulate(time_deltas, initial=first_time))
    _check_range("partition_id", pids, 1, MAX_ID)
    _check_range("min_id", mins, 0, MAX_ID)
    _check_range("span", spans, 0, MAX_ID)
    maxs = [lo + s for lo, s in zip(mins, spans, strict=True)]
    _check_range("max_id", maxs, 0, MAX_ID)
    _check_range("completed_at", times, 0, MAX_TIMESTAMP)
    _check_range("duration", durations, 0, MAX_DURATION)
    table = workers.lookup_table()
    try:
        names = [table[s] for s in shorts]
    except KeyError as exc:
        raise DecodeError(f"unknown worker short id {exc.args[0]}") from None
    return list(map(ArchivedPartition.trusted, zip(pids, mins, maxs, names, times, durations, strict=True)))


def _check_range(name: str, values: list[int], lo: int, hi: int) -> None:
    if min(values) < lo or max(values) > hi:
        raise DecodeError(f"{name} out of range in columnar payload")

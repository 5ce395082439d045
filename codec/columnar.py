"""The binary columnar batch format (before framing and compression).

Records are stored column by column, each packed as `codec.packing` describes (bit-packed
from a base, or in base R when that is smaller). Columns that follow a pattern are stored as
deltas:

    pid       first pid, then pid[i] - pid[i-1]
    min_id    first min_id, then the error of the guess min[i-1] + (pid[i]-pid[i-1]) * width[i-1]
              (contiguous, equal-width partitions cost nothing); raw values when a guess is huge
    span      max_id - min_id (up to 2^64 - 1: ids are signed 64-bit)
    worker    short worker number
    time      first completed_at, then completed_at[i] - completed_at[i-1]
    duration  seconds

Completion times can instead be stored as residuals from a line through the first time with a
slope in 1/256 s per partition id (flag 4): workers claim the lowest pending partitions, so a
batch completes at a roughly steady rate, and the residuals span less than the deltas do. The
encoder keeps whichever form is smaller.

Layout: varint count, flags byte, varints first pid / first min_id (zigzag when flag 2 is set,
always so since signed ids; older blobs have it unsigned; with flag 8 as its difference from
``(pid - 1) * (span + 1) + 1``, where equal-width partitions from id 1 start) / first
completed_at / (flag 4) the zigzag slope, then the six packed columns. Record order is kept,
so decoding gives back exactly the list that was encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from operator import sub
from typing import NamedTuple

from codec.errors import DecodeError, ValidationError
from codec.packing import (
    Column,
    get_svarint,
    get_uvarint,
    pack_column,
    packed_size,
    put_svarint,
    put_uvarint,
    read_column,
    varint_size,
    zigzag,
)
from codec.record import ArchivedPartition
from codec.validate import MAX_DURATION, MAX_ID, MAX_INT64, MAX_TIMESTAMP, MIN_INT64
from codec.workers import WorkerNumbering

_FLAG_PREDICTED_MIN = 1
_FLAG_SIGNED_FIRST_MIN = 2
_FLAG_TIME_LINE = 4
_FLAG_FIRST_MIN_GUESS = 8
_MAX_SLOPE = 1 << 62
_build = partial(tuple.__new__, ArchivedPartition)  # fields already range-checked per column
_MAX_GUESS = 2**62
MAX_RECORDS = 1_000_000


def encode_columns(records: Sequence[ArchivedPartition], workers: WorkerNumbering) -> bytes:
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
    out += pack_column(pid_deltas)
    out += pack_column(guesses if predicted else mins[1:])
    out += pack_column(spans)
    out += pack_column([workers.short_id(r.worker_id) for r in records])
    out += time_column
    out += pack_column([r.duration for r in records])
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
        return None, pack_column(deltas)
    best: tuple[int, list[int]] | None = None
    best_size = packed_size(deltas)
    mean = round((times[-1] - times[0]) * 256 / ids)
    for slope in {mean, round(mean / 256) * 256}:
        if abs(slope) > _MAX_SLOPE:
            continue
        first_pid, first_time = pids[0], times[0]
        line = zip(pids[1:], times[1:], strict=True)
        residuals = [t - first_time - ((slope * (p - first_pid)) >> 8) for p, t in line]
        size = packed_size(residuals) + varint_size(zigzag(slope))
        if size < best_size:
            best, best_size = (slope, residuals), size
    return (None, pack_column(deltas)) if best is None else (best[0], pack_column(best[1]))


@dataclass(slots=True)
class PayloadHead:
    count: int
    flags: int  # with the flags read into the fields below cleared
    first_pid: int
    first_min: int  # as stored (before the first-min guess is added back)
    first_min_guessed: bool
    first_time: int
    slope: int | None
    pid_deltas: Column
    min_col: Column
    spans: Column
    shorts: Column
    times: Column
    durations: Column


def read_head(buf: bytes) -> PayloadHead:
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
        refs.append(read_column(buf, offset, n))
        offset = refs[-1].end
    if offset != len(buf):
        raise DecodeError("trailing bytes after the last column")
    rest = flags & ~(_FLAG_SIGNED_FIRST_MIN | _FLAG_FIRST_MIN_GUESS | _FLAG_TIME_LINE)
    if rest not in (0, _FLAG_PREDICTED_MIN):
        raise DecodeError(f"unknown columnar flags {rest}")
    return PayloadHead(count, rest, first_pid, first_min, bool(flags & _FLAG_FIRST_MIN_GUESS), first_time, slope, *refs)


class RowColumns(NamedTuple):
    """Records of a payload as one list per field, their workers by short number."""

    pids: list[int]
    mins: list[int]
    maxs: list[int]
    shorts: list[int]
    times: list[int]
    durations: list[int]

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.pids)


class RowFilter(NamedTuple):
    """What `select_columns` keeps: rows whose worker number is in ``shorts``, whose pid, completion
    time and duration lie in the closed ranges given (None: any)."""

    shorts: frozenset[int] | None = None
    pids: tuple[int, int] | None = None
    completed: tuple[int, int] | None = None
    duration: tuple[int, int] | None = None


_NO_ROWS = RowColumns([], [], [], [], [], [])


def decode_columns(buf: bytes, workers: WorkerNumbering) -> list[ArchivedPartition]:
    """Decode a payload; anything malformed or out of range is a `DecodeError`."""
    cols = payload_columns(read_head(buf))
    table = workers.lookup_table()
    try:
        names = [table[s] for s in cols.shorts]
    except KeyError as exc:
        raise DecodeError(f"unknown worker short id {exc.args[0]}") from None
    return list(map(_build, zip(cols.pids, cols.mins, cols.maxs, names, cols.times, cols.durations, strict=True)))


def payload_columns(head: PayloadHead) -> RowColumns:
    """Every record of a payload (its head as `read_head` read it) as columns, range-checked.

    The common batch (consecutive partitions of one width, a constant span) has its ids computed
    as ranges and checked at their ends; a column whose header bounds its values inside their
    range is not checked value by value (a search decodes every batch: this was a third of it)."""
    count, first_pid, deltas, span_col = head.count, head.first_pid, head.pid_deltas, head.spans
    shorts, durations, spans = head.shorts.all(), head.durations.all(), span_col.all()
    step = deltas.base
    if not deltas.width and step > 0:  # consecutive partitions, or a constant stride
        pids = list(range(first_pid, first_pid + count * step, step))
        _check_range("partition_id", [pids[0], pids[-1]], 1, MAX_ID)
        mins = maxs = None
        errors = head.min_col
        if not span_col.width and head.flags == _FLAG_PREDICTED_MIN and not errors.width and not errors.base:
            span = span_col.base
            first_min = head.first_min + (_first_min_guess(first_pid, span) if head.first_min_guessed else 0)
            stride = step * (span + 1)
            _check_range("span", [span], 0, MAX_INT64 - MIN_INT64)
            _check_range("min_id", [first_min, first_min + (count - 1) * stride], MIN_INT64, MAX_INT64)
            _check_range("max_id", [first_min + span, first_min + span + (count - 1) * stride], MIN_INT64, MAX_INT64)
            last_min = first_min + count * stride
            mins = list(range(first_min, last_min, stride)) if stride else [first_min] * count
            maxs = list(range(first_min + span, last_min + span, stride)) if stride else [first_min + span] * count
    else:
        pids = list(accumulate(deltas.all(), initial=first_pid))
        _check_range("partition_id", pids, 1, MAX_ID)
        mins = maxs = None
    if mins is None or maxs is None:
        mins = _mins(head, pids, deltas.all(), spans)
        _check_range("min_id", mins, MIN_INT64, MAX_INT64)
        _check_range("span", spans, 0, MAX_INT64 - MIN_INT64)
        maxs = [lo + s for lo, s in zip(mins, spans, strict=True)]
        _check_range("max_id", maxs, MIN_INT64, MAX_INT64)
    times = _times(head, pids)
    _check_range("completed_at", times, 0, MAX_TIMESTAMP)
    if not _inside(head.durations, 0, MAX_DURATION):
        _check_range("duration", durations, 0, MAX_DURATION)
    return RowColumns(pids, mins, maxs, shorts, times, durations)


def _inside(column: Column, lo: int, hi: int) -> bool:
    """Whether a column's header alone keeps every value of it within ``lo .. hi``."""
    top = column.radix - 1 if column.radix else (1 << column.width) - 1
    return lo <= column.base and column.base + top <= hi


def select_columns(head: PayloadHead, keep: RowFilter) -> RowColumns:
    """The records of a payload that ``keep`` keeps, as columns: the columns a filter reads are
    decoded first, cheapest first (worker numbers, durations, pids, completion times), and the
    rest only when a record is left; a few records are built one by one (`Column.at`), more from
    whole columns. Range-checked as `payload_columns` checks them."""
    rows: list[int] | None = None  # None: every row so far
    if keep.shorts is not None:
        wanted = keep.shorts
        rows = [i for i, s in enumerate(head.shorts.all()) if s in wanted]
        if not rows:
            return _NO_ROWS
    if keep.duration is not None:
        lo, hi = keep.duration
        durations = head.durations.all()
        rows = [i for i in (range(head.count) if rows is None else rows) if lo <= durations[i] <= hi]
        if not rows:
            return _NO_ROWS
    pids: list[int] | None = None
    if keep.pids is not None or keep.completed is not None:
        pids = list(accumulate(head.pid_deltas.all(), initial=head.first_pid))
        if keep.pids is not None:
            lo, hi = keep.pids
            least, most = min(pids), max(pids)
            if least >= lo and most <= hi:
                pass  # the whole payload is inside
            elif most < lo or least > hi:
                return _NO_ROWS
            else:
                rows = [i for i in (range(head.count) if rows is None else rows) if lo <= pids[i] <= hi]
                if not rows:
                    return _NO_ROWS
        if keep.completed is not None:
            lo, hi = keep.completed
            times = _times(head, pids)
            rows = [i for i in (range(head.count) if rows is None else rows) if lo <= times[i] <= hi]
            if not rows:
                return _NO_ROWS
    if rows is None or len(rows) * 4 > head.count:
        cols = payload_columns(head)
        if rows is None:
            return cols
        return RowColumns(*([column[i] for i in rows] for column in cols))
    out = RowColumns([], [], [], [], [], [])
    for i in rows:
        for column, value in zip(out, _fields_at(head, i, None if pids is None else pids[i]), strict=True):
            column.append(value)
    return out


def _times(head: PayloadHead, pids: list[int]) -> list[int]:
    first_time, slope, time_deltas = head.first_time, head.slope, head.times.all()
    if slope is None:
        return list(accumulate(time_deltas, initial=first_time))
    first_pid = head.first_pid
    return [first_time] + [
        first_time + ((slope * (p - first_pid)) >> 8) + r for p, r in zip(pids[1:], time_deltas, strict=True)
    ]


def _mins(head: PayloadHead, pids: list[int], pid_deltas: list[int], spans: list[int]) -> list[int]:
    first_pid, first_min = head.first_pid, head.first_min
    if head.first_min_guessed:
        first_min += _first_min_guess(first_pid, spans[0])
    if head.flags == _FLAG_PREDICTED_MIN:
        min_col = head.min_col.all()
        if not any(min_col) and min(spans) == max(spans):
            step = spans[0] + 1
            return [first_min + (pid - first_pid) * step for pid in pids]
        mins = [first_min]
        prev = first_min
        for delta, span, error in zip(pid_deltas, spans[:-1], min_col, strict=True):
            prev = prev + delta * (span + 1) + error
            mins.append(prev)
        return mins
    return [first_min, *head.min_col.all()]


def find_in_columns(buf: bytes, workers: WorkerNumbering, pid: int) -> ArchivedPartition | None:
    """The record of partition ``pid`` in a payload (None if it holds none), reading only what
    that record needs where the format allows: the query router's one-record decode. The
    payload's structure is checked as `decode_columns` checks it; value ranges only for the
    record returned (the blob's checksum has vouched for the rest)."""
    return find_in_head(read_head(buf), workers, pid)


def find_in_head(head: PayloadHead, workers: WorkerNumbering, pid: int) -> ArchivedPartition | None:
    """`find_in_columns` on a payload's head as `read_head` read it."""
    i = _index_of(head, pid)
    if i is None:
        return None
    got, low, high, short, at, duration = _fields_at(head, i, pid)
    return _build((got, low, high, workers.worker_id(short), at, duration))


def _fields_at(head: PayloadHead, i: int, pid: int | None) -> tuple[int, int, int, int, int, int]:
    """The fields of record ``i`` (pid, min, max, worker number, completion, duration), reading only
    what it needs where the format allows; ``pid`` is its pid if known. Range-checked."""
    first_pid = head.first_pid
    if pid is None:
        deltas = head.pid_deltas
        if not deltas.width:
            pid = first_pid + i * deltas.base
        else:
            pid = first_pid + sum(deltas.all()[:i])
    span = head.spans.at(i)
    first_min = head.first_min
    if head.first_min_guessed:
        first_min += _first_min_guess(first_pid, head.spans.at(0))
    constant = not head.min_col.width and not head.min_col.base and not head.spans.width
    if not i or (head.flags == _FLAG_PREDICTED_MIN and constant):
        low = first_min + (pid - first_pid) * (span + 1)
    elif head.flags == _FLAG_PREDICTED_MIN:
        spans, errors, pid_deltas = head.spans.all(), head.min_col.all(), head.pid_deltas.all()
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
        if not lo <= value <= hi:
            raise DecodeError(f"{field} out of range in columnar payload")
    return pid, low, low + span, short, at, duration


def _index_of(head: PayloadHead, pid: int) -> int | None:
    """Where ``pid`` is among the payload's records (None: not there); by arithmetic when every
    pid delta is the same (a column of width 0: the common batch of consecutive partitions)."""
    deltas = head.pid_deltas
    if not deltas.width and deltas.base > 0:
        i, off = divmod(pid - head.first_pid, deltas.base)
        return i if not off and 0 <= i < head.count else None
    pids = list(accumulate(deltas.all(), initial=head.first_pid))
    try:
        return pids.index(pid)
    except ValueError:
        return None


def _check_range(name: str, values: list[int], lo: int, hi: int) -> None:
    if min(values) < lo or max(values) > hi:
        raise DecodeError(f"{name} out of range in columnar payload")

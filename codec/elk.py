"""elk_coordinator's record format, both ways (``shared/compat/elk_coordinator/FORMAT.md``).

`ElkRecord` is Go's ``model.PartitionInfo``: read with Go's own leniency (unknown members
ignored, missing or ``null`` members zero, member names in any letter case, any status
string) and Go's strictness (integers must be integer literals within int64, times RFC 3339
strings with a zone, ``options`` an object). `encode_elk` writes members in struct order with
Go's omissions, so a record Go wrote decodes and encodes back to the same bytes.

An archived partition keeps ``completed_at`` = ``updated_at`` and ``duration`` =
``updated_at - created_at`` in whole seconds: Go records have no claim time, and these are
the two times Go's own compressed batches keep, so a record can be given back from any tier
with the times Go itself would have.
"""

from __future__ import annotations

import operator
import re
from itertools import repeat
from typing import Any, NamedTuple

import orjson

from codec.errors import DecodeError, ValidationError
from codec.gojson import CLOCKS, DATE_DAYS, ZERO_TIME, ZONES, GoTime, go_json, go_string
from codec.record import ArchivedPartition, PartitionInfo, Status, load_json
from codec.validate import (
    MAX_DURATION,
    MAX_ID,
    MAX_INT64,
    MAX_TIMESTAMP,
    MAX_WORKER_ID_BYTES,
    MIN_INT64,
    check_pid,
    check_range,
    has_control_characters,
)

KNOWN_STATUSES = frozenset(s.value for s in Status)


class ElkRecord(NamedTuple):
    """A PartitionInfo record of elk_coordinator, fields in Go's struct order."""

    partition_id: int = 0
    min_id: int = 0
    max_id: int = 0
    worker_id: str = ""
    last_heartbeat: GoTime = ZERO_TIME
    status: str = ""
    updated_at: GoTime = ZERO_TIME
    options: dict[str, Any] | None = None
    version: int = 0
    error: str = ""
    created_at: GoTime = ZERO_TIME

    def to_json(self) -> bytes:
        return encode_elk(self)

    def to_dict(self) -> dict[str, Any]:
        """The record as Go's JSON has it (times as RFC 3339 text)."""
        return orjson.loads(encode_elk(self))  # type: ignore[no-any-return]

    def to_archived(self) -> ArchivedPartition:
        """What the archive keeps; `ValidationError` if the record cannot be represented."""
        if self.updated_at.seconds < 0:
            raise ValidationError("completion time (updated_at) is before 1970")
        duration = 0 if self.created_at.is_zero else self.updated_at.seconds - self.created_at.seconds
        return ArchivedPartition.checked(
            self.partition_id,
            self.min_id,
            self.max_id,
            self.worker_id,
            self.updated_at.seconds,
            min(max(duration, 0), MAX_DURATION),
        )

    def to_partition_info(self) -> PartitionInfo:
        """The active-layer view (Unix-second times, zero time as 0) for the worker SDK."""
        check_pid(self.partition_id)
        check_range(self.min_id, self.max_id)
        if self.status not in KNOWN_STATUSES:
            raise DecodeError(f"partition {self.partition_id} has unknown status {self.status!r}")
        times = [max(t.seconds, 0) for t in (self.created_at, self.updated_at, self.last_heartbeat)]
        fields = (
            self.partition_id,
            self.min_id,
            self.max_id,
            Status(self.status),
            self.worker_id,
            self.version,
            self.error,
            *times,
            0,
            dict(self.options or {}),
        )
        return tuple.__new__(PartitionInfo, fields)


def archived_as_elk(part: ArchivedPartition) -> ElkRecord:
    """An archived partition in Go's form, with the fields a compressed tier keeps (see module doc)."""
    return ElkRecord(
        partition_id=part.partition_id,
        min_id=part.min_id,
        max_id=part.max_id,
        worker_id=part.worker_id,
        status="completed",
        updated_at=GoTime(part.completed_at),
        created_at=GoTime(part.completed_at - part.duration),
    )


def encode_elk(rec: ElkRecord) -> bytes:
    out = [
        f'{{"partition_id":{rec.partition_id},"min_id":{rec.min_id},"max_id":{rec.max_id},',
        f'"worker_id":{go_string(rec.worker_id)},"last_heartbeat":"{rec.last_heartbeat.format()}",',
        f'"status":{go_string(rec.status)},"updated_at":"{rec.updated_at.format()}"',
    ]
    if rec.options:
        out.append(f',"options":{go_json(rec.options)}')
    out.append(f',"version":{rec.version}')
    if rec.error:
        out.append(f',"error":{go_string(rec.error)}')
    out.append(f',"created_at":"{rec.created_at.format()}"}}')
    return "".join(out).encode("utf-8")


_INT_FIELDS = ("partition_id", "min_id", "max_id", "version")
_STR_FIELDS = ("worker_id", "status", "error")
_TIME_FIELDS = ("last_heartbeat", "updated_at", "created_at")
_BY_LOWER = {name: name for name in ElkRecord._fields}


def _go_value(name: str, value: Any) -> Any:
    if name in _INT_FIELDS:
        if value is None:
            return 0
        if type(value) is not int or not MIN_INT64 <= value <= MAX_INT64:
            raise DecodeError(f"{name} must be a 64-bit integer, got {str(value)[:40]!r}")
        return value
    if name in _STR_FIELDS:
        if value is None:
            return ""
        if type(value) is not str:
            raise DecodeError(f"{name} must be a string")
        return value
    if name in _TIME_FIELDS:
        if value is None:
            return ZERO_TIME
        if type(value) is not str:
            raise DecodeError(f"{name} must be an RFC 3339 string")
        return GoTime.parse(value)
    if value is not None and type(value) is not dict:
        raise DecodeError("options must be a JSON object")
    return value


def decode_elk(raw: bytes | str) -> ElkRecord:
    """Read a record as Go's ``json.Unmarshal`` would; anything Go rejects is a `DecodeError`."""
    return elk_from_data(load_json(raw))


def elk_from_data(data: Any) -> ElkRecord:
    if type(data) is not dict:
        raise DecodeError("an elk_coordinator record is a JSON object")
    fast = _as_written_by_go(data)
    if fast is not None:
        return fast
    values: dict[str, Any] = {}
    for member, value in data.items():
        name = _BY_LOWER.get(member) or _BY_LOWER.get(member.lower())
        if name is not None:
            values[name] = _go_value(name, value)
    return ElkRecord(**values)


def _as_written_by_go(d: dict[str, Any]) -> ElkRecord | None:
    """The record if ``d`` has exactly the members Go writes, with the right types, else None
    (the general path then applies Go's rules member by member and explains a rejection)."""
    try:
        pid, lo, hi, version = d["partition_id"], d["min_id"], d["max_id"], d["version"]
        worker, status = d["worker_id"], d["status"]
        beat, updated, created = d["last_heartbeat"], d["updated_at"], d["created_at"]
    except KeyError:
        return None
    options, error = d.get("options"), d.get("error", "")
    if not (
        len(d) == 9 + ("options" in d) + ("error" in d)
        and type(pid) is int
        and type(lo) is int
        and type(hi) is int
        and type(version) is int
        and MIN_INT64 <= pid <= MAX_INT64
        and MIN_INT64 <= lo <= MAX_INT64
        and MIN_INT64 <= hi <= MAX_INT64
        and MIN_INT64 <= version <= MAX_INT64
        and type(worker) is str
        and type(status) is str
        and type(error) is str
        and type(beat) is str
        and type(updated) is str
        and type(created) is str
        and (options is None or type(options) is dict)
    ):
        return None
    parse = GoTime.parse
    fields = (pid, lo, hi, worker, parse(beat), status, parse(updated), options, version, error, parse(created))
    return tuple.__new__(ElkRecord, fields)


def completed_as_archived_page(page: list[Any]) -> list[ArchivedPartition | None]:
    """`completed_as_archived` of each decoded record of a page: the bulk import's path.

    The usual records of a page (completed, no options nor error) are checked and converted
    column by column, a few C-level passes per page instead of a loop per record; if any of
    them is not in the usual form, or for the others, each record is read alone.
    """
    usual = [i for i, d in enumerate(page) if type(d) is dict and len(d) == 9 and d.get("status") == "completed"]
    got = _usual_records([page[i] for i in usual]) if usual else None
    if got is None:
        return [completed_as_archived(d) for d in page]
    if len(usual) == len(page):
        return got  # type: ignore[return-value]
    by_index = dict(zip(usual, got, strict=True))
    return [by_index[i] if i in by_index else completed_as_archived(d) for i, d in enumerate(page)]


_GO_TIME_LINES = re.compile(
    r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})\n)*"
)


def _seconds_column(column: list[Any]) -> list[int] | None:
    """Unix seconds of a column of RFC 3339 times in the form Go writes, or None if any is not."""
    try:
        lines = "\n".join(column) + "\n"  # TypeError for a value that is not a string
        if lines.count("\n") != len(column) or not _GO_TIME_LINES.fullmatch(lines):
            return None
        dates, clocks, zones = DATE_DAYS, CLOCKS, ZONES  # None for an invalid part: TypeError below
        return [dates[t[:10]] * 86400 + clocks[t[11:19]] - (0 if t[-1] == "Z" else zones[t[-6:]]) for t in column]  # type: ignore[operator]
    except TypeError:
        return None


def _usual_records(rows: list[dict[str, Any]]) -> list[ArchivedPartition] | None:
    """Completed records of exactly Go's nine members, all valid, as archived partitions; None if
    any one is not (the caller then takes the page record by record, which explains)."""
    try:
        pids = [d["partition_id"] for d in rows]
        los = [d["min_id"] for d in rows]
        his = [d["max_id"] for d in rows]
        versions = [d["version"] for d in rows]
        workers = [d["worker_id"] for d in rows]
        done = _seconds_column([d["updated_at"] for d in rows])
        start = _seconds_column([d["created_at"] for d in rows])
        beats = _seconds_column([d["last_heartbeat"] for d in rows])
    except KeyError:
        return None
    if done is None or start is None or beats is None or ZERO_TIME.seconds in start:
        return None  # a zero created_at means "no duration": the general path has the rule
    ints = {int}
    if not (
        set(map(type, pids)) == ints
        and set(map(type, los)) == ints
        and set(map(type, his)) == ints
        and set(map(type, versions)) == ints
        and set(map(type, workers)) == {str}
        and min(pids) >= 1
        and max(pids) <= MAX_ID
        and min(los) >= MIN_INT64
        and max(his) <= MAX_INT64
        and all(map(operator.le, los, his))
        and min(versions) >= MIN_INT64
        and max(versions) <= MAX_INT64
        and min(done) >= 0
        and max(done) <= MAX_TIMESTAMP
        and min(map(len, workers)) > 0
        and max(map(len, workers)) <= MAX_WORKER_ID_BYTES // 4
        and not has_control_characters("".join(workers))
    ):
        return None
    spent = map(operator.sub, done, start)
    durations = [x if 0 <= x <= MAX_DURATION else (0 if x < 0 else MAX_DURATION) for x in spent]
    fields = zip(pids, los, his, workers, done, durations, strict=True)
    return list(map(tuple.__new__, repeat(ArchivedPartition), fields))


def completed_as_archived(data: Any) -> ArchivedPartition | None:
    """What the archive keeps of a completed record exactly as Go writes it, valid in every
    field, or None for anything else (`decode_elk` then applies Go's rules and explains).

    The same answer as ``decode_elk(raw).to_archived()`` for such a record, without building
    the record or its times (`GoTime.parse`'s fast path is inlined, without the nanoseconds).
    """
    if type(data) is not dict or data.get("status") != "completed":
        return None
    try:
        pid, lo, hi, version = data["partition_id"], data["min_id"], data["max_id"], data["version"]
        worker, times = data["worker_id"], (data["updated_at"], data["created_at"], data["last_heartbeat"])
    except KeyError:
        return None
    dates, clocks, zones = DATE_DAYS, CLOCKS, ZONES
    seconds = []
    offset: int | None
    for t in times:
        if type(t) is not str or len(t) < 20 or t[10] != "T":
            return None
        if t[-1] == "Z":
            offset, frac = 0, t[19:-1]
        else:
            offset, frac = zones[t[-6:]], t[19:-6]
        days, clock = dates[t[:10]], clocks[t[11:19]]
        if offset is None or days is None or clock is None:
            return None
        if frac and not (frac[0] == "." and 1 < len(frac) <= 10 and frac.isascii() and frac[1:].isdigit()):
            return None
        seconds.append(days * 86400 + clock - offset)
    done, start = seconds[0], seconds[1]
    options = data.get("options")
    if (
        start != ZERO_TIME.seconds
        and len(data) == 9 + ("options" in data) + ("error" in data)
        and type(version) is int
        and MIN_INT64 <= version <= MAX_INT64
        and type(data.get("error", "")) is str
        and (options is None or type(options) is dict)
    ):
        duration = min(max(done - start, 0), MAX_DURATION)
        try:  # the archived fields' own checks, in one place
            return ArchivedPartition.checked(pid, lo, hi, worker, done, duration)
        except ValidationError:
            pass
    return None


class ElkWorker(NamedTuple):
    """A member of Go's ``workers`` sorted set (``model.WorkerInfo``)."""

    worker_id: str
    register_time: GoTime
    stop_time: GoTime | None = None


def decode_elk_worker(raw: bytes | str) -> ElkWorker:
    data = load_json(raw)
    if type(data) is not dict or type(data.get("worker_id")) is not str:
        raise DecodeError("worker member has no worker_id")
    register = data.get("register_time")
    stop = data.get("stop_time")
    return ElkWorker(
        data["worker_id"],
        GoTime.parse(register) if isinstance(register, str) else ZERO_TIME,
        GoTime.parse(stop) if isinstance(stop, str) else None,
    )

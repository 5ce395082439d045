"""A page of completed partitions as the archive queue hands them over, read into columns.

The archiver reads 500 queue entries at a time and needs, for each, the six archived fields (for
the index, the statistics and the batch encoder) and the JSON to keep as its detail. Reading them
into one list per field, instead of one record object per entry, is what lets the statistics be
rolled up with builtins over whole columns and the checks run once per column: a payload that
``complete.lua`` wrote (the usual case) is parsed once and kept as it is. Anything else (Go's
whole record, from a namespace bound to elk_coordinator; a hand-made entry) takes the general
path, `codec.stored.parse_archived`, which explains what is wrong with a payload it refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import le
from typing import Any

import orjson

from codec.elk import ElkRecord
from codec.errors import DecodeError
from codec.record import ArchivedPartition
from codec.stored import as_archived, parse_archived
from codec.validate import (
    MAX_DURATION,
    MAX_INT64,
    MAX_PARTITION_ID,
    MAX_TIMESTAMP,
    MIN_INT64,
    check_worker_id,
)

#: The members of an archived record as `complete.lua` writes it.
ARCHIVED_MEMBERS = frozenset(ArchivedPartition._fields)
_LISTS = ("pids", "min_ids", "max_ids", "workers", "completed_at", "durations", "details")


@dataclass(slots=True)
class Columns:
    """Archived partitions as one list per field (`ArchivedPartition`'s order), plus for each the
    JSON kept as its detail and, for Go's records, the whole record (kept whole in the simple hash
    and in staging, so it can be given back byte for byte)."""

    pids: list[int] = field(default_factory=list)
    min_ids: list[int] = field(default_factory=list)
    max_ids: list[int] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    completed_at: list[int] = field(default_factory=list)
    durations: list[int] = field(default_factory=list)
    details: list[bytes] = field(default_factory=list)
    go_records: dict[int, ElkRecord] = field(default_factory=dict)  # position -> Go's record

    def __len__(self) -> int:
        return len(self.pids)

    def append(self, part: ArchivedPartition, detail: bytes, go_record: ElkRecord | None = None) -> None:
        if go_record is not None:
            self.go_records[len(self.pids)] = go_record
        self.pids.append(part.partition_id)
        self.min_ids.append(part.min_id)
        self.max_ids.append(part.max_id)
        self.workers.append(part.worker_id)
        self.completed_at.append(part.completed_at)
        self.durations.append(part.duration)
        self.details.append(detail)

    def extend(self, other: Columns) -> None:
        offset = len(self.pids)
        self.go_records.update((offset + i, rec) for i, rec in other.go_records.items())
        for name in _LISTS:
            getattr(self, name).extend(getattr(other, name))

    def select(self, keep: Sequence[bool]) -> Columns:
        """The rows where ``keep`` is true, in order."""
        out = Columns()
        for name in _LISTS:
            setattr(out, name, list(compress(getattr(self, name), keep)))
        if self.go_records:
            new_positions = {old: new for new, old in enumerate(i for i, k in enumerate(keep) if k)}
            out.go_records = {new_positions[i]: rec for i, rec in self.go_records.items() if i in new_positions}
        return out

    def archived(self) -> list[ArchivedPartition]:
        """One record per row (for the batch encoder); the columns were checked when read."""
        rows = zip(self.pids, self.min_ids, self.max_ids, self.workers, self.completed_at, self.durations, strict=True)
        return [ArchivedPartition.trusted(row) for row in rows]

    def records(self) -> list[ArchivedPartition | ElkRecord]:
        """One record per row as its detail keeps it: Go's whole record where there is one."""
        parts: list[ArchivedPartition | ElkRecord] = list(self.archived())
        for i, rec in self.go_records.items():
            parts[i] = rec
        return parts

    @classmethod
    def of(cls, parts: Sequence[ArchivedPartition | ElkRecord]) -> Columns:
        out = cls()
        for part in parts:
            if isinstance(part, ElkRecord):
                out.append(part.to_archived(), part.to_json(), part)
            else:
                out.append(part, part.to_json())
        return out


def read_payloads(payloads: Sequence[bytes]) -> tuple[Columns, list[int], dict[int, str]]:
    """The payloads as columns; the position of each payload taken, and why each other one
    (by position) cannot be archived."""
    cols = Columns()
    taken: list[int] = []
    refused: dict[int, str] = {}
    slow: list[int] = []
    loads = orjson.loads
    for i, raw in enumerate(payloads):
        try:
            d: Any = loads(raw)
        except orjson.JSONDecodeError:
            slow.append(i)
            continue
        if type(d) is dict and d.keys() == ARCHIVED_MEMBERS:
            taken.append(i)
            cols.pids.append(d["partition_id"])
            cols.min_ids.append(d["min_id"])
            cols.max_ids.append(d["max_id"])
            cols.workers.append(d["worker_id"])
            cols.completed_at.append(d["completed_at"])
            cols.durations.append(d["duration"])
            cols.details.append(raw)
        else:
            slow.append(i)
    if taken and not _well_formed(cols):  # some row is wrong: find it the slow way
        slow = sorted(slow + taken)
        taken, cols = [], Columns()
    for i in slow:
        try:
            rec = parse_archived(payloads[i])
            part = as_archived(rec)
            if part.partition_id > MAX_PARTITION_ID:
                raise DecodeError(f"partition id {part.partition_id} is beyond the index")
        except DecodeError as exc:
            refused[i] = str(exc)
            continue
        taken.append(i)
        cols.append(part, rec.to_json(), rec if isinstance(rec, ElkRecord) else None)
    if slow and taken != sorted(taken):  # the slow ones were appended last: restore queue order
        order = sorted(range(len(taken)), key=taken.__getitem__)
        cols = _reordered(cols, order)
        taken = [taken[j] for j in order]
    return cols, taken, refused



def _well_formed(cols: Columns) -> bool:
    """Every row has the types and ranges `ArchivedPartition` accepts (checked per column)."""
    ints = (cols.pids, cols.min_ids, cols.max_ids, cols.completed_at, cols.durations)
    if any(set(map(type, col)) != {int} for col in ints) or set(map(type, cols.workers)) != {str}:
        return False
    if not (min(cols.pids) >= 1 and max(cols.pids) <= MAX_PARTITION_ID):
        return False
    if not (min(cols.min_ids) >= MIN_INT64 and max(cols.max_ids) <= MAX_INT64):
        return False
    if not (min(cols.completed_at) >= 0 and max(cols.completed_at) <= MAX_TIMESTAMP):
        return False
    if not (min(cols.durations) >= 0 and max(cols.durations) <= MAX_DURATION):
        return False
    if not all(map(le, cols.min_ids, cols.max_ids)):
        return False
    try:
        for worker in set(cols.workers):
            check_worker_id(worker)
    except ValueError:
        return False
    return True


def _reordered(cols: Columns, order: list[int]) -> Columns:
    out = Columns()
    for name in _LISTS:
        column = getattr(cols, name)
        setattr(out, name, [column[j] for j in order])
    where = {old: new for new, old in enumerate(order)}
    out.go_records = {where[i]: rec for i, rec in cols.go_records.items()}
    return out

"""Archived partitions as Parquet: the cold tier's files and ``export --format parquet``.

One row per partition, the archived fields as typed columns::

    partition_id  int64                 min_id  int64        max_id  int64
    worker_id     string (dictionary)   completed_at  timestamp[s, UTC]   duration  int64 (seconds)

A file's rows are sorted by ``partition_id`` and cut into row groups of at most `ROW_GROUP_ROWS`;
its key-value metadata keeps a small index, the first partition id of each row group
(``partarchive.row_groups``), so a lookup finds the one row group that can hold a partition
without reading any other (`FileIndex`). Row groups also carry Parquet's own statistics (min and
max of every column), which DuckDB and other readers use to skip them.

Needs pyarrow (the ``cold`` extra); importing this module without it raises ImportError.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from codec.errors import DecodeError
from codec.record import ArchivedPartition

FORMAT = "1"
#: Rows per row group: a lookup reads one (a few kilobytes), a file of 100,000 rows has 49.
ROW_GROUP_ROWS = 2048
SCHEMA = pa.schema(
    [
        pa.field("partition_id", pa.int64(), nullable=False),
        pa.field("min_id", pa.int64(), nullable=False),
        pa.field("max_id", pa.int64(), nullable=False),
        pa.field("worker_id", pa.string(), nullable=False),
        pa.field("completed_at", pa.timestamp("s", tz="UTC"), nullable=False),
        pa.field("duration", pa.int64(), nullable=False),
    ]
)
COLUMNS = tuple(SCHEMA.names)
_INDEX_KEY = b"partarchive.row_groups"
_FORMAT_KEY = b"partarchive.format"


@dataclass(slots=True)
class Rows:
    """Archived partitions as one list per field (`ArchivedPartition`'s order)."""

    pids: list[int]
    mins: list[int]
    maxs: list[int]
    workers: list[str]
    times: list[int]
    durations: list[int]

    def __len__(self) -> int:
        return len(self.pids)

    @classmethod
    def empty(cls) -> Rows:
        return cls([], [], [], [], [], [])

    @classmethod
    def of(cls, parts: Sequence[ArchivedPartition]) -> Rows:
        if not parts:
            return cls.empty()
        pids, mins, maxs, workers, times, durations = (list(c) for c in zip(*parts, strict=True))
        return cls(pids, mins, maxs, workers, times, durations)

    def extend(self, other: Rows) -> None:
        for mine, theirs in zip(self.columns(), other.columns(), strict=True):
            mine.extend(theirs)

    def columns(self) -> tuple[list[Any], ...]:
        return self.pids, self.mins, self.maxs, self.workers, self.times, self.durations

    def records(self) -> list[ArchivedPartition]:
        return [ArchivedPartition.trusted(row) for row in zip(*self.columns(), strict=True)]

    def sorted(self) -> Rows:
        """The rows in partition id order."""
        if all(a < b for a, b in pairwise(self.pids)):
            return self
        order = sorted(range(len(self.pids)), key=self.pids.__getitem__)
        return Rows(*([column[i] for i in order] for column in self.columns()))


def table_of(rows: Rows) -> pa.Table:
    return pa.Table.from_arrays(
        [
            pa.array(rows.pids, pa.int64()),
            pa.array(rows.mins, pa.int64()),
            pa.array(rows.maxs, pa.int64()),
            pa.array(rows.workers, pa.string()),
            pa.array(rows.times, pa.int64()).cast(pa.timestamp("s", tz="UTC")),
            pa.array(rows.durations, pa.int64()),
        ],
        schema=SCHEMA,
    )


def rows_of(table: pa.Table) -> Rows:
    """The rows of a table with (a subset of rows of) `SCHEMA`'s columns; `DecodeError` if it has
    not got them."""
    try:
        columns = [table.column(name) for name in COLUMNS]
        times = columns[4].cast(pa.timestamp("s", tz="UTC")).cast(pa.int64())  # Parquet keeps milliseconds
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DecodeError(f"not a partarchive Parquet table: {exc}") from None
    return Rows(
        columns[0].to_pylist(),
        columns[1].to_pylist(),
        columns[2].to_pylist(),
        columns[3].to_pylist(),
        times.to_pylist(),
        columns[5].to_pylist(),
    )


def encode_file(rows: Rows, metadata: dict[str, str] | None = None) -> bytes:
    """A Parquet file of ``rows`` (sorted here by partition id), zstd-compressed, with row groups of
    `ROW_GROUP_ROWS` and their first partition ids in the metadata."""
    rows = rows.sorted()
    firsts = rows.pids[::ROW_GROUP_ROWS]
    meta = {_FORMAT_KEY: FORMAT.encode(), _INDEX_KEY: orjson.dumps(firsts)}
    meta.update({k.encode(): v.encode() for k, v in (metadata or {}).items()})
    table = table_of(rows).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=ROW_GROUP_ROWS,
        compression="zstd",
        use_dictionary=["worker_id"],
        write_statistics=True,
    )
    return bytes(sink.getvalue().to_pybytes())


@dataclass(frozen=True, slots=True)
class FileIndex:
    """Where the rows of a file are: the first partition id of each row group, ascending."""

    firsts: tuple[int, ...]
    rows: int

    def row_groups_between(self, lo: int, hi: int) -> list[int]:
        """The row groups that can hold partition ids ``lo .. hi``."""
        first = max(0, bisect.bisect_right(self.firsts, lo) - 1)
        last = bisect.bisect_right(self.firsts, hi) - 1
        return list(range(first, last + 1)) if last >= first else []


def file_index(parquet: pq.ParquetFile) -> FileIndex:
    """The index of an open file: from its metadata, or from its row groups' statistics (a file
    written by another tool); `DecodeError` if it is not one of ours."""
    meta = parquet.metadata
    if parquet.schema_arrow.names[: len(COLUMNS)] != list(COLUMNS):
        raise DecodeError(f"not a partarchive Parquet file (columns {parquet.schema_arrow.names})")
    kv = meta.metadata or {}
    try:
        if _INDEX_KEY in kv:
            firsts = tuple(int(p) for p in orjson.loads(kv[_INDEX_KEY]))
        else:
            firsts = tuple(int(meta.row_group(i).column(0).statistics.min) for i in range(meta.num_row_groups))
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
        raise DecodeError(f"the file's row group index is unreadable: {exc}") from None
    if len(firsts) != meta.num_row_groups or list(firsts) != sorted(firsts):
        raise DecodeError("the file's row group index does not match its row groups")
    return FileIndex(firsts, meta.num_rows)


"""``partarchive export --format parquet --output DIR``: the whole archive (every tier and the cold
store) as Parquet files partitioned by completion day, Hive style::

    DIR/completed_day=2024-06-24/part-00000.parquet

Each file has the cold tier's columns (`codec.parquet`), sorted by partition id. Rows are kept per
day until a file's worth (`FILE_ROWS`) is there, or all days together hold `BUFFERED_ROWS`, then
written under a temporary name and renamed: a file that exists under its name is whole. Query
them straight from the files, e.g. with DuckDB (docs/runbook.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from codec.errors import ValidationError
from stats.rollup import day_of

FILE_ROWS = 500_000
BUFFERED_ROWS = 2_000_000
DAY_FOLDER = "completed_day"


class ParquetExport:
    def __init__(self, output: str) -> None:
        from codec.parquet import Rows

        self.root = Path(output)
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise ValidationError(f"{output} is not an empty directory: export --format parquet writes a new one")
        self._days: dict[str, Rows] = {}
        self._parts: dict[str, int] = {}
        self._buffered = 0
        self.files = 0
        self.rows = 0

    def add(self, pid: int, min_id: int, max_id: int, worker: str, at: int, duration: int) -> None:
        from codec.parquet import Rows

        day = day_of(at)
        rows = self._days.get(day)
        if rows is None:
            rows = self._days[day] = Rows.empty()
        rows.pids.append(pid)
        rows.mins.append(min_id)
        rows.maxs.append(max_id)
        rows.workers.append(worker)
        rows.times.append(at)
        rows.durations.append(duration)
        self._buffered += 1
        if len(rows) >= FILE_ROWS:
            self._write(day)
        elif self._buffered >= BUFFERED_ROWS:
            largest = sorted(self._days, key=lambda d: len(self._days[d]), reverse=True)
            for each in largest[: len(largest) // 2 + 1]:
                self._write(each)

    def close(self) -> None:
        for day in sorted(self._days):
            self._write(day)

    def _write(self, day: str) -> None:
        from codec.parquet import encode_file

        rows = self._days.pop(day)
        if not len(rows):
            return
        folder = self.root / f"{DAY_FOLDER}={day}"
        folder.mkdir(parents=True, exist_ok=True)
        part = self._parts.get(day, 0)
        self._parts[day] = part + 1
        final = folder / f"part-{part:05d}.parquet"
        temp = folder / f".part-{part:05d}.parquet.tmp"
        temp.write_bytes(encode_file(rows))
        os.replace(temp, final)
        self._buffered -= len(rows)
        self.files += 1
        self.rows += len(rows)

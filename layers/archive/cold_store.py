"""Where the cold tier's files live: a directory, or any fsspec URL (``s3://bucket/prefix`` with
that filesystem's package installed). The ``cold`` extra brings pyarrow and fsspec.

Files are named by number (``0000000012.parquet``, `name_of`): a number is handed out once per
namespace (`layers.archive.cold`), so a name never means two contents and a reader may keep a file
open. A file is written whole under a temporary name, flushed to disk (fsync, then the directory's
too, on a local filesystem) and renamed: a reader never sees half a file, and a file that exists
under its name is durable. Only then is it recorded in Redis; a file under its name that no record
names (its writer died in between) is an orphan, deleted by the next writer.

The URL may carry a password (``ftp://user:pw@host/dir``); everything shown (logs, errors, status,
what Redis keeps) has it replaced (`codec.redact`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codec.errors import DecodeError
from codec.redact import redact_text, redact_url
from layers.errors import ColdFileDamaged, ColdStoreUnavailable

if TYPE_CHECKING:
    from codec.parquet import Rows
    from codec.record import ArchivedPartition

_NAME = re.compile(r"^(\d{10})\.parquet$")
_TEMP = re.compile(r"^\.((\d{10})\.parquet\.[0-9a-f]{12}\.tmp|partarchive-probe\.[0-9a-f]{12})$")
#: Files kept open for lookups (their footer read and parsed once).
OPEN_FILES = 128


def name_of(number: int) -> str:
    return f"{number:010d}.parquet"


def number_of(name: str) -> int | None:
    """The number of a file named by `name_of` (None for any other name)."""
    match = _NAME.match(name)
    return int(match[1]) if match else None


def needs_extra(what: str = "the cold store") -> ColdStoreUnavailable | None:
    """The error to raise when the ``cold`` extra is not installed (None when it is): ``what`` needs it."""
    try:
        import fsspec  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        return ColdStoreUnavailable(
            f"{what} needs the cold extra ({exc.name} is not installed): pip install 'partarchive[cold]'"
        )
    return None


@dataclass(slots=True)
class _Open:
    parquet: Any  # pyarrow.parquet.ParquetFile
    index: Any  # codec.parquet.FileIndex
    lock: threading.Lock


class ColdStore:
    """One namespace's files in a cold store (in its folder ``<namespace>`` there): written,
    listed, deleted and read by row group."""

    def __init__(self, url: str, namespace: str) -> None:
        missing = needs_extra()
        if missing is not None:
            raise missing
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        self.shown = redact_url(url)
        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except Exception as exc:  # an unknown protocol, its package missing, a URL it cannot parse
            raise ColdStoreUnavailable(f"cold store {self.shown}: {self._said(exc)}") from None
        self.local = isinstance(self.fs, LocalFileSystem)
        base = root.rstrip("/")
        #: what the archive meta keeps and every face shows: a local store's absolute path, else
        #: the URL without its password (the namespace's folder not included)
        self.base_location = base if self.local else self.shown
        self.root = f"{base}/{namespace}"
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._lock = threading.Lock()

    def _said(self, exc: BaseException) -> str:
        return redact_text(str(exc) or type(exc).__name__)

    def _failed(self, doing: str, exc: BaseException) -> ColdStoreUnavailable:
        return ColdStoreUnavailable(f"cold store {self.shown}: cannot {doing}: {self._said(exc)}")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def check_writable(self) -> None:
        """Write, flush and delete a probe file; `ColdStoreUnavailable` saying why not."""
        name = f".partarchive-probe.{uuid.uuid4().hex[:12]}"
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self._write_durably(name, b"partarchive")
        except Exception as exc:  # a filesystem's own errors are not all OSError: each said in one line
            raise self._failed("write", exc) from None
        self._remove_quietly(name)  # one left by a process killed here is deleted with the orphans

    def write(self, number: int, data: bytes) -> str:
        """``data`` under the name of file ``number``, durably (temporary name, fsync, rename);
        returns the name."""
        name = name_of(number)
        temp = f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self._write_durably(temp, data)
            if self.local:
                os.replace(self.path(temp), self.path(name))
                self._sync_directory()
            else:
                self.fs.mv(self.path(temp), self.path(name))
        except Exception as exc:  # a filesystem's own errors are not all OSError: each said in one line
            self._remove_quietly(temp)
            raise self._failed(f"write {name}", exc) from None
        return name

    def _write_durably(self, name: str, data: bytes) -> None:
        if not self.local:
            self.fs.pipe_file(self.path(name), data)
            return
        with open(self.path(name), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remove_quietly(self, name: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.rm_file(self.path(name))

    def listing(self) -> tuple[list[str], list[str]]:
        """The names of the store's files, and of the temporary ones (and probes) left by writers that died."""
        try:
            entries = self.fs.ls(self.root, detail=False) if self.fs.exists(self.root) else []
        except Exception as exc:  # a filesystem's own errors are not all OSError: each said in one line
            raise self._failed("list its files", exc) from None
        names = [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return sorted(n for n in names if _NAME.match(n)), sorted(n for n in names if _TEMP.match(n))

    def delete(self, name: str) -> None:
        """Delete a file (a missing one is no error)."""
        self.forget(name)
        try:
            if self.fs.exists(self.path(name)):
                self.fs.rm_file(self.path(name))
        except Exception as exc:  # a filesystem's own errors are not all OSError: each said in one line
            raise self._failed(f"delete {name}", exc) from None

    def size(self, name: str) -> int:
        try:
            return int(self.fs.size(self.path(name)))
        except Exception as exc:  # a filesystem's own errors are not all OSError: each said in one line
            raise self._failed(f"read the size of {name}", exc) from None

    def forget(self, name: str) -> None:
        """Close a file kept open for lookups."""
        with self._lock:
            self._open.pop(name, None)

    def read_file(self, name: str) -> Any:
        """A whole file as a pyarrow Table; `ColdFileDamaged` if missing or not one of ours."""
        entry = self._opened(name)
        try:
            with entry.lock:
                return entry.parquet.read()
        except Exception as exc:  # pyarrow's, the filesystem's
            self.forget(name)
            raise self._damaged(name, exc) from None

    def rows_between(self, name: str, lo: int, hi: int) -> Rows:
        """The rows of a file with partition ids ``lo .. hi``, reading only the row groups that can
        hold them; `ColdFileDamaged` as `read_file`."""
        from codec.parquet import Rows, rows_of

        try:
            rows = rows_of(self.read_row_groups(name, lo, hi))
        except DecodeError as exc:
            raise ColdFileDamaged(f"cold file {name} is corrupt: {exc}") from None
        first, last = bisect.bisect_left(rows.pids, lo), bisect.bisect_right(rows.pids, hi)
        if first == 0 and last == len(rows):
            return rows
        return Rows(*(column[first:last] for column in rows.columns()))

    def read_row_groups(self, name: str, lo: int, hi: int, columns: list[str] | None = None) -> Any:
        """The rows of a file's row groups that can hold partitions ``lo .. hi``, as a pyarrow Table
        (the file kept open for the next read); `ColdFileDamaged` as `read_file`."""

        entry = self._opened(name)
        groups = entry.index.row_groups_between(lo, hi)
        try:
            with entry.lock:
                if not groups:
                    return entry.parquet.schema_arrow.empty_table()
                return entry.parquet.read_row_groups(groups, columns=columns)
        except Exception as exc:  # pyarrow's, the filesystem's
            self.forget(name)
            raise self._damaged(name, exc) from None

    def _damaged(self, name: str, exc: Exception) -> ColdFileDamaged:
        if isinstance(exc, FileNotFoundError):
            return ColdFileDamaged(f"cold file {name} is missing")
        why = str(exc) if isinstance(exc, DecodeError) else self._said(exc)
        return ColdFileDamaged(f"cold file {name} is corrupt: {why}")

    def _opened(self, name: str) -> _Open:
        with self._lock:
            entry = self._open.get(name)
            if entry is not None:
                self._open.move_to_end(name)
                return entry
        import pyarrow.parquet as pq

        from codec.parquet import file_index

        try:
            if self.local:
                parquet = pq.ParquetFile(self.path(name), memory_map=True)
            else:
                parquet = pq.ParquetFile(self.fs.open(self.path(name), "rb"))
            entry = _Open(parquet, file_index(parquet), threading.Lock())
        except Exception as exc:  # a missing file, pyarrow's errors, the filesystem's
            raise self._damaged(name, exc) from None
        with self._lock:
            self._open[name] = entry
            while len(self._open) > OPEN_FILES:
                self._open.popitem(last=False)
        return entry


class ColdReads:
    """How a reader (the query router, ``find``, ``export``) reaches a namespace's cold store: the
    configured URL (``PARTARCHIVE_COLD_STORE``), else the location the archive meta keeps, when it
    carries no credentials; opened once."""

    def __init__(self, configured: str | None, namespace: str) -> None:
        self.configured = configured
        self.namespace = namespace
        self._stores: dict[str, ColdStore] = {}
        self._lock = threading.Lock()

    def store(self, location: str | None) -> ColdStore:
        """The store, given the location the archive meta keeps (None: none kept);
        `ColdStoreUnavailable` saying why it cannot be read here."""
        url = self.configured or location
        if url is None:
            raise ColdStoreUnavailable("no cold store is configured")
        if self.configured is None and "***@" in url:
            raise ColdStoreUnavailable(
                f"the cold store {url} needs its credentials: set PARTARCHIVE_COLD_STORE where this reader runs"
            )
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = self._stores[url] = ColdStore(url, self.namespace)
            return store

    def find(self, location: str | None, number: int, pid: int) -> ArchivedPartition | None:
        """Partition ``pid``'s record in cold file ``number`` (None if the file holds none)."""
        rows = self.store(location).rows_between(name_of(number), pid, pid)
        return rows.records()[0] if len(rows) else None

    async def find_async(self, location: str | None, number: int, pid: int) -> ArchivedPartition | None:
        """`find` in a thread of the event loop's executor."""
        import asyncio

        return await asyncio.to_thread(self.find, location, number, pid)

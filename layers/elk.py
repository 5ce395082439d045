"""An elk_coordinator deployment in Redis, read as the importer needs it.

Go's keys share no hash tag, so everything here works key by key (one key per command or
script): finding deployments, checking each family's type, a survey (counts per status,
time span, bytes), the completed partitions of each source in Go's own precedence (active
hash, then ``elk_archived``, then the compressed batches in field order), and deleting a
source record only while it still holds the bytes that were imported.

Batch records name their worker by a position in the ``workers`` sorted set, which drifts
when members are removed or sort out of order. A position is trusted only when that worker
was registered (and not yet stopped) when the partition completed, give or take five
minutes of clock skew; otherwise the record gets Go's own placeholder ``unknown_worker_<n>``
and a flag saying why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import redis

from codec import ArchivedPartition, DecodeError, ValidationError
from codec.elk import ElkRecord, ElkWorker, completed_as_archived_page, decode_elk, decode_elk_worker
from codec.elk_batch import ElkBatchEntry, decode_elk_batch
from codec.gojson import GoTime
from codec.validate import MAX_PARTITION_ID
from layers.errors import WrongKeyType
from layers.keys import ElkKeys
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import Scripts

CLOCK_SKEW_S = 300
_SCAN_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Rejected:
    """A source record that cannot be imported, and why."""

    source: str
    field: str
    reason: str


class Item(NamedTuple):
    """A completed partition found in a source, ready to import.

    ``raw`` is the source value (the record's own bytes, or its whole batch); ``record`` the Go
    record, whose bytes are what the simple tier keeps.
    """

    record: ElkRecord | None
    archived: ArchivedPartition
    source: str
    field: str
    raw: bytes
    flag: str | None = None  # why its worker is uncertain
    widened: bool = False  # a Go batch's range cut at 32 bits, imported as the smallest it allows

    @property
    def note(self) -> str | None:
        """Why the imported record is uncertain, as the import keeps it: its worker, its range, or both."""
        notes = [self.flag] if self.flag else []
        if self.widened:
            lo, hi = self.archived.min_id, self.archived.max_id
            notes.append(
                f"a range of 2^32 ids or more, cut by Go's batch (Go reads max_id {lo - 1}): "
                f"imported as the smallest range the batch allows, {lo}..{hi}"
            )
        return "; ".join(notes) or None

    @property
    def detail(self) -> bytes:
        """The Go record's bytes: as stored in the source when it held the record alone."""
        if self.source != "batch":
            return self.raw
        assert self.record is not None
        return self.record.to_json()


@dataclass
class FamilySurvey:
    key: str
    type: str
    entries: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    first_updated: int | None = None
    last_updated: int | None = None
    bytes: int = 0

    def note(self, status: str, updated: int) -> None:
        self.by_status[status] += 1
        if updated > 0:
            self.first_updated = updated if self.first_updated is None else min(self.first_updated, updated)
            self.last_updated = updated if self.last_updated is None else max(self.last_updated, updated)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "type": self.type,
            "entries": self.entries,
            "by_status": dict(sorted(self.by_status.items())),
            "first_updated": self.first_updated,
            "last_updated": self.last_updated,
            "bytes": self.bytes,
        }


def find_deployments(client: redis.Redis) -> list[str]:
    """KeyPrefixes of every elk_coordinator active hash on the server (SCAN, key by key)."""
    found = set()
    for key in client.scan_iter(match=ElkKeys.SCAN_PATTERN, count=_SCAN_COUNT):
        prefix = ElkKeys.prefix_of(as_text(key))
        if prefix is not None:
            found.add(prefix)
    return sorted(found)


class ElkSource:
    """The key families of one elk_coordinator deployment (one KeyPrefix)."""

    EXPECTED = (("partitions", "hash"), ("archived", "hash"), ("compressed", "hash"), ("stats", "hash"),
                ("workers", "zset"))

    def __init__(self, client: redis.Redis, key_prefix: str) -> None:
        self.redis = client
        self.keys = ElkKeys(key_prefix)
        self._scripts = Scripts.of(client)
        self._workers: list[ElkWorker] | None = None

    def check_types(self) -> dict[str, str]:
        """Each family's Redis type ('none' if absent); `WrongKeyType` naming a key of another type."""
        types = {}
        for name, kind in self.EXPECTED:
            key = getattr(self.keys, name)
            actual = as_text(self.redis.type(key))
            if actual not in ("none", kind):
                raise WrongKeyType(f"{key} is a {actual}, not a {kind}: this is not an elk_coordinator key")
            types[name] = actual
        return types

    def exists(self) -> bool:
        return any(t != "none" for t in self.check_types().values())

    # workers

    def workers(self) -> list[ElkWorker]:
        """Members that decode, in Go's ``GetAllWorkers`` order: score, then member bytes."""
        if self._workers is None:
            members: Any = self.redis.zrange(self.keys.workers, 0, -1)
            out = []
            for raw in members:
                try:
                    out.append(decode_elk_worker(raw))
                except DecodeError:
                    continue  # Go skips members that do not decode, and so shifts the numbering
            self._workers = out
        return self._workers

    def resolve_worker(self, number: int, completed_at: int) -> tuple[str, str | None]:
        """The worker a batch number names, or ``unknown_worker_<n>`` and the reason it is not certain."""
        workers = self.workers()
        if not 1 <= number <= len(workers):
            return f"unknown_worker_{number}", f"worker number {number} is not in the workers set ({len(workers)})"
        worker = workers[number - 1]
        started = worker.register_time.seconds - CLOCK_SKEW_S
        stopped = None if worker.stop_time is None else worker.stop_time.seconds + CLOCK_SKEW_S
        if completed_at < started or (stopped is not None and completed_at > stopped):
            return (
                f"unknown_worker_{number}",
                f"worker number {number} is now {worker.worker_id}, which was not running when the partition completed",
            )
        return worker.worker_id, None

    # reading

    def scan(self, key: str) -> Iterator[tuple[str, bytes]]:
        for fld, raw in self.redis.hscan_iter(key, count=_SCAN_COUNT):
            yield as_text(fld), raw

    def pages_in_pid_order(self, key: str) -> Iterator[list[tuple[str, bytes]]]:
        """Every field of a hash whose fields are partition ids, in id order (HKEYS, then HMGET by
        1,000, the next page read while the caller works on this one), so an import touches each
        batch and statistics range in one stretch; in pages."""
        names: Any = self.redis.hkeys(key)
        canonical = [n for n in names if n.isdigit() and len(n) < 20 and n[:1] != b"0"]  # strconv.Itoa's form
        others = sorted(as_text(n) for n in names if not (n.isdigit() and len(n) < 20 and n[:1] != b"0"))
        ordered = [str(i) for i in sorted(map(int, canonical))] + others
        chunks = [ordered[start : start + _SCAN_COUNT] for start in range(0, len(ordered), _SCAN_COUNT)]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="partarchive-read") as pool:
            ahead = [pool.submit(self.redis.hmget, key, chunk) for chunk in chunks[:1]]
            for i, chunk in enumerate(chunks):
                values: Any = ahead.pop().result()
                if i + 1 < len(chunks):
                    ahead.append(pool.submit(self.redis.hmget, key, chunks[i + 1]))
                yield [(fld, raw) for fld, raw in zip(chunk, values, strict=True) if raw is not None]

    def completed_in_hash_pages(self, source: str, keep_detail: bool = True) -> Iterator[list[Item | Rejected]]:
        """Completed records of the active hash (``source='active'``) or of ``elk_archived`` in id
        order, by pages, with those that cannot be imported as `Rejected`. Without ``keep_detail``
        the items carry only the archived fields (a bulk import into a batch tier keeps nothing
        else): records exactly as Go writes them are then read column by column
        (`completed_as_archived_page`), anything else by Go's rules one by one."""
        key = self.keys.partitions if source == "active" else self.keys.archived
        new = tuple.__new__
        for page in self.pages_in_pid_order(key):
            fast: list[ArchivedPartition | None] = [None] * len(page)
            if not keep_detail:
                fast = completed_as_archived_page([_loads_or_none(raw) for _, raw in page])
            out: list[Item | Rejected] = []
            for (fld, raw), archived in zip(page, fast, strict=True):
                if archived is not None and archived.partition_id <= MAX_PARTITION_ID:
                    out.append(new(Item, (None, archived, source, fld, b"", None, False)))
                    continue
                try:
                    rec = decode_elk(raw)
                except DecodeError as exc:
                    out.append(Rejected(source, fld, f"not a record Go can read: {exc}"))
                    continue
                if rec.status != "completed":
                    if source == "archived" or rec.status not in ("pending", "claimed", "running", "failed"):
                        out.append(Rejected(source, fld, f"status {rec.status!r} in {key}"))
                    continue
                out.append(_item(rec, source, fld, raw, keep_detail=keep_detail))
            yield out

    def completed_pids(self, source: str) -> Iterator[tuple[int, str, bytes]]:
        """(pid, field, value) of every record that says it is completed, read without its times:
        for the verification and deletion passes, which only need to know which ids to look up."""
        if source == "batch":
            for fld, raw in self.scan(self.keys.compressed):
                try:
                    entries = decode_elk_batch(raw)
                except DecodeError:
                    continue
                for entry in entries:
                    if entry.status == "completed":
                        yield entry.partition_id, fld, raw
            return
        key = self.keys.partitions if source == "active" else self.keys.archived
        for fld, raw in self.scan(key):
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if type(data) is dict and data.get("status") == "completed":
                pid = data.get("partition_id")
                if type(pid) is int and 1 <= pid <= MAX_PARTITION_ID:
                    yield pid, fld, raw

    def completed_in_batches(self, keep_detail: bool = True) -> Iterator[Item | Rejected]:
        """Records of every compressed batch, in id order; among copies of one id in several
        batches (the same completion, compressed twice) the batch first by field name comes first.

        A Go batch is a random subset of ids, so every batch is decoded before the first record
        is given out (about 100 bytes of memory per record).
        """
        found: list[tuple[int, str, bytes, ElkBatchEntry]] = []
        for name in sorted(fld for fld, _ in self.scan(self.keys.compressed)):
            raw: Any = self.redis.hget(self.keys.compressed, name)
            if raw is None:
                continue
            try:
                entries = decode_elk_batch(raw)
            except DecodeError as exc:
                yield Rejected("batch", name, f"batch cannot be read: {exc}")
                continue
            for entry in entries:
                if entry.status != "completed":
                    yield Rejected("batch", f"{name}/{entry.partition_id}", f"status {entry.status!r} in a batch")
                    continue
                found.append((entry.partition_id, name, raw, entry))
        found.sort(key=lambda f: (f[0], f[1]))
        for _, name, raw, entry in found:
            worker, flag = self.resolve_worker(entry.worker_no, entry.updated_at)
            got = _item(entry.to_record(worker), "batch", name, raw, flag, keep_detail=keep_detail)
            yield got._replace(widened=True) if entry.widened and isinstance(got, Item) else got

    def survey(self) -> dict[str, FamilySurvey]:
        """Counts per family and status, time span of completions and bytes, reading every record."""
        types = self.check_types()
        out: dict[str, FamilySurvey] = {}
        for name, _ in self.EXPECTED:
            key = getattr(self.keys, name)
            fam = out[name] = FamilySurvey(key, types[name])
            if types[name] == "none":
                continue
            fam.bytes = int(self.redis.memory_usage(key, samples=0) or 0)  # type: ignore[arg-type]
            if name in ("partitions", "archived"):
                for _, raw in self.scan(key):
                    fam.entries += 1
                    try:
                        data = orjson.loads(raw)
                        fam.note(str(data["status"]), GoTime.parse(data["updated_at"]).seconds)
                    except (orjson.JSONDecodeError, DecodeError, KeyError, TypeError):
                        fam.by_status["<unreadable>"] += 1
            elif name == "compressed":
                for _, raw in self.scan(key):
                    try:
                        for entry in decode_elk_batch(raw):
                            fam.entries += 1
                            fam.note(entry.status, entry.updated_at)
                    except DecodeError:
                        fam.by_status["<unreadable batch>"] += 1
            elif name == "stats":
                fam.entries = int(self.redis.hlen(key))  # type: ignore[arg-type]
            else:
                fam.entries = int(self.redis.zcard(key))  # type: ignore[arg-type]
        return out

    def stats_hash(self) -> dict[str, str]:
        raw: Any = self.redis.hgetall(self.keys.stats)
        return {as_text(k): as_text(v) for k, v in raw.items()}

    # deleting

    def delete_if_unchanged(self, source: str, pairs: list[tuple[str, bytes]]) -> int:
        """Delete records of ``source`` ('active', 'archived' or 'batch') still holding these bytes."""
        key = {"active": self.keys.partitions, "archived": self.keys.archived, "batch": self.keys.compressed}[source]
        deleted = 0
        for start in range(0, len(pairs), 500):
            args: list[Any] = []
            for fld, raw in pairs[start : start + 500]:
                args += [fld, raw]
            deleted += int(self._scripts("hdel_if_equal", [key], args))
        return deleted


def _loads_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _item(
    rec: ElkRecord, source: str, fld: str, raw: bytes, flag: str | None = None, *, keep_detail: bool = True
) -> Item | Rejected:
    where = fld if source != "batch" else f"{fld}/{rec.partition_id}"
    if not 1 <= rec.partition_id <= MAX_PARTITION_ID:
        return Rejected(source, where, f"partition id {rec.partition_id} is outside 1..2^32-1 (the index's reach)")
    if rec.max_id < rec.min_id:
        why = "range wider than 32 bits, cut by Go's batch" if source == "batch" else "inverted range"
        return Rejected(source, where, f"{why}: min_id {rec.min_id} > max_id {rec.max_id}")
    try:
        archived = rec.to_archived()
    except ValidationError as exc:
        return Rejected(source, where, f"cannot be archived: {exc}")
    if not keep_detail:
        return Item(None, archived, source, fld, b"", flag)
    return Item(rec, archived, source, fld, raw, flag)

"""The active layer: the worker SDK over the ``elk_partitions`` hash.

Every state change is one Lua script, so the record, the pending/lease/failed indexes
and the per-status counts change together. Each change bumps ``version``; callers may
pass ``expected_version`` to make an update conditional (optimistic concurrency).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from codec import ACTIVE_STATUSES, ArchivedPartition, PartitionInfo, ValidationError
from codec.validate import MAX_ERROR_BYTES, check_int, check_text, check_worker_id
from layers.errors import InvalidTransition, NotOwner, PartitionNotFound, VersionConflict
from layers.keys import KeySchema
from layers.metrics import SDK_COMPLETE_SECONDS
from layers.replies import as_text
from layers.scripts import Scripts

#: Bitmaps address at most 2^32 bits, so partition ids of the Redis layers stop there.
MAX_PARTITION_ID = 2**32 - 1
MAX_PARTITIONS_PER_CALL = 10_000_000
_CREATE_CHUNK = 5_000


def check_partition_id(pid: Any) -> int:
    return check_int("partition_id", pid, 1, MAX_PARTITION_ID)


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of `ActiveLayer.complete`."""

    partition_id: int
    already_completed: bool
    archived: ArchivedPartition | None = None
    entry_id: str | None = None


class ActiveLayer:
    """Worker SDK: create, claim, start, heartbeat, complete, fail and inspect partitions."""

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str = "elk",
        *,
        cluster: bool = False,
        lease_timeout: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis_client
        self.keys = KeySchema(namespace, cluster)
        if not lease_timeout > 0:
            raise ValidationError("lease_timeout must be positive")
        self.lease_timeout = lease_timeout
        self._clock = clock
        self._scripts = Scripts(redis_client)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # leader side

    def create_partitions(self, first_id: int, last_id: int, size: int, options: dict[str, Any] | None = None) -> range:
        """Split ``first_id..last_id`` into partitions of ``size`` IDs; returns their pids."""
        check_int("first_id", first_id, 0, 2**53)
        check_int("last_id", last_id, 0, 2**53)
        check_int("size", size, 1, 2**53)
        if last_id < first_id:
            raise ValidationError(f"inverted range: first_id {first_id} > last_id {last_id}")
        count = (last_id - first_id) // size + 1
        if count > MAX_PARTITIONS_PER_CALL:
            raise ValidationError(f"{count} partitions in one call; the limit is {MAX_PARTITIONS_PER_CALL}")
        options_json = self._options_json(options)
        first_pid = last_pid = 0
        k = self.keys
        for start in range(0, count, _CREATE_CHUNK):
            lo = first_id + start * size
            hi = min(last_id, lo + _CREATE_CHUNK * size - 1)
            got = self._scripts(
                "create",
                [k.active, k.pending, k.counts, k.meta],
                [lo, hi, size, int(self._clock()), options_json],
            )
            first_pid = first_pid or int(got[0])
            last_pid = int(got[1])
        if last_pid > MAX_PARTITION_ID:
            raise ValidationError("partition ids passed 2^32 - 1")
        return range(first_pid, last_pid + 1)

    @staticmethod
    def _options_json(options: dict[str, Any] | None) -> bytes:
        if options is None:
            return b"{}"
        if not isinstance(options, dict):
            raise ValidationError("options must be a dict")
        try:
            blob = orjson.dumps(options)
        except TypeError as exc:
            raise ValidationError(f"options are not JSON-serialisable: {exc}") from None
        if len(blob) > 16384:
            raise ValidationError("options are larger than 16 KiB")
        return blob

    # worker side

    def claim(self, worker_id: str) -> PartitionInfo | None:
        """Take the lowest pending partition, or one whose holder stopped heartbeating."""
        check_worker_id(worker_id)
        k = self.keys
        got = self._scripts(
            "claim",
            [k.active, k.pending, k.leases, k.counts],
            [worker_id, self._now_ms(), int(self.lease_timeout * 1000)],
        )
        if as_text(got[0]) == "none":
            return None
        return PartitionInfo.from_json(got[1])

    def start(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> PartitionInfo:
        return self._update("start", pid, worker_id, expected_version)

    def heartbeat(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> PartitionInfo:
        return self._update("heartbeat", pid, worker_id, expected_version)

    def fail(self, pid: int, worker_id: str, error: str, *, expected_version: int | None = None) -> PartitionInfo:
        check_text("error", error, MAX_ERROR_BYTES, allow_empty=True, multiline=True)
        return self._update("fail", pid, worker_id, expected_version, error)

    def _update(
        self, op: str, pid: int, worker_id: str, expected_version: int | None, error: str = ""
    ) -> PartitionInfo:
        check_partition_id(pid)
        check_worker_id(worker_id)
        k = self.keys
        got = self._scripts(
            "update",
            [k.active, k.leases, k.failed, k.counts],
            [op, pid, worker_id, _version_arg(expected_version), self._now_ms(), error],
        )
        _raise_for(got, pid, op)
        return PartitionInfo.from_json(got[1])

    def complete(self, pid: int, worker_id: str, *, expected_version: int | None = None) -> Completion:
        """Remove the partition from the active layer and queue it for the archiver, atomically."""
        check_partition_id(pid)
        check_worker_id(worker_id)
        k = self.keys
        with SDK_COMPLETE_SECONDS.time():
            got = self._scripts(
                "complete",
                [k.active, k.leases, k.counts, k.done, k.queue],
                [pid, worker_id, _version_arg(expected_version), self._now_ms()],
            )
        if as_text(got[0]) == "already":
            return Completion(pid, already_completed=True)
        _raise_for(got, pid, "complete")
        return Completion(pid, False, ArchivedPartition.from_json(got[1]), as_text(got[2]))

    def retry_failed(self, limit: int | None = None) -> int:
        """Move failed partitions back to pending; returns how many moved."""
        if limit is not None:
            check_int("limit", limit, 1, 2**31)
        k = self.keys
        moved = 0
        while limit is None or moved < limit:
            step = 1000 if limit is None else min(1000, limit - moved)
            n = int(
                self._scripts("retry_failed", [k.active, k.failed, k.pending, k.counts], [int(self._clock()), step])
            )
            moved += n
            if n < step:
                break
        return moved

    # reads

    def get(self, pid: int) -> PartitionInfo | None:
        check_partition_id(pid)
        raw = self.redis.hget(self.keys.active, str(pid))
        return None if raw is None else PartitionInfo.from_json(raw)  # type: ignore[arg-type]

    def all_active(self) -> list[PartitionInfo]:
        """Every active partition, ordered by pid. Reads only the active hash."""
        raw = self.redis.hgetall(self.keys.active)
        records = [PartitionInfo.from_json(v) for v in raw.values()]  # type: ignore[union-attr]
        return sorted(records, key=lambda r: r.partition_id)

    get_all_active = all_active

    def page(
        self, *, status: str | None = None, after: int = 0, limit: int = 100
    ) -> tuple[list[PartitionInfo], int | None]:
        """Active partitions with pid > ``after`` in pid order, at most ``limit``; and the next ``after``.

        Reads the pid list of the active hash (small by design) or, for pending and failed, of
        their sorted sets, then only the records of the page.
        """
        if status is not None and status not in {s.value for s in ACTIVE_STATUSES}:
            raise ValidationError(f"unknown status {status!r}")
        check_int("after", after, 0, 2**53)
        check_int("limit", limit, 1, 10_000)
        chosen: list[PartitionInfo] = []
        cursor = after
        while len(chosen) < limit:
            if status in ("pending", "failed"):
                zset = self.keys.pending if status == "pending" else self.keys.failed
                raw: Any = self.redis.zrangebyscore(zset, f"({cursor}", "+inf", start=0, num=limit)
                pids = [int(p) for p in raw]
            else:
                every: Any = self.redis.hkeys(self.keys.active)
                pids = sorted(p for p in map(int, every) if p > cursor)[: limit * 4]
            if not pids:
                return chosen, None
            records: Any = self.redis.hmget(self.keys.active, [str(p) for p in pids])
            for raw_record in records:
                if raw_record is None:
                    continue
                part = PartitionInfo.from_json(raw_record)
                if status is None or part.status.value == status:
                    chosen.append(part)
                    if len(chosen) == limit:
                        return chosen, part.partition_id
            cursor = pids[-1]
        return chosen, None

    def iter_active(self, batch: int = 1000) -> Iterator[PartitionInfo]:
        """Every active partition, in no particular order, without loading them all at once."""
        for _, raw in self.redis.hscan_iter(self.keys.active, count=batch):
            yield PartitionInfo.from_json(raw)

    def counts(self) -> dict[str, int]:
        raw = self.redis.hgetall(self.keys.counts)
        got = {as_text(k): int(v) for k, v in raw.items()}  # type: ignore[union-attr]
        return {s.value: got.get(s.value, 0) for s in ACTIVE_STATUSES}

    def size(self) -> int:
        return int(self.redis.hlen(self.keys.active))  # type: ignore[arg-type]

    def is_completed(self, pid: int) -> bool:
        """True once `complete` succeeded for this partition (archived or still queued)."""
        check_partition_id(pid)
        return bool(self.redis.getbit(self.keys.done, pid))


def _version_arg(expected: int | None) -> str:
    if expected is None:
        return ""
    return str(check_int("expected_version", expected, 0, 2**53))


def _raise_for(reply: list[Any], pid: int, op: str) -> None:
    if as_text(reply[0]) == "ok":
        return
    code, detail = as_text(reply[1]), as_text(reply[2])
    if code == "not_found":
        raise PartitionNotFound(f"partition {pid} is not active")
    if code == "not_owner":
        raise NotOwner(f"partition {pid} is held by another worker")
    if code == "version":
        raise VersionConflict(f"partition {pid} is at version {detail}")
    raise InvalidTransition(f"cannot {op} partition {pid}: it is {detail}")

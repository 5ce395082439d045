"""The worker SDK's reads of the active layer, as steps (`layers.plumbing.steps`): an object
`layers.active.core.ActiveCore` holds (its ``reads``), apart because they write nothing and need
nothing of the core's but the keys."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from codec import ACTIVE_STATUSES, DecodeError, PartitionInfo, ValidationError
from codec.stored import parse_active
from codec.validate import check_int, check_partition_id
from layers.keys import KeySchema
from layers.plumbing.key_types import typed_steps
from layers.plumbing.roundtrip import Part, RoundTrip
from layers.plumbing.steps import Steps, one

P = ParamSpec("P")
T = TypeVar("T")


def typed(method: Callable[Concatenate[Any, P], Steps[T]]) -> Callable[Concatenate[Any, P], Steps[T]]:
    """A WRONGTYPE reply inside ``method`` becomes `WrongKeyType` naming the key."""

    def wrapper(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Steps[T]:
        return typed_steps(self.keys, method(self, *args, **kwargs))

    functools.update_wrapper(wrapper, method)
    return wrapper


def add_counts(trip: RoundTrip, keys: KeySchema) -> Part[dict[str, int]]:
    """Add to ``trip`` the reads of the active partitions per status; the part's value is the
    count of each of `COUNTED` (its replies must be results: the caller checks them first). The
    counts are the sizes of the indexes (pending, failed) and of the leases by their sign
    (`KeySchema.leases`): no step keeps a counter of its own."""
    part = trip.part(lambda replies: {status: int(reply) for status, reply in zip(COUNTED, replies, strict=True)})
    part.zcard(keys.pending)
    part.zcount(keys.leases, "(0", "+inf")
    part.zcount(keys.leases, "-inf", "(0")
    part.zcard(keys.failed)
    return part


#: The statuses `add_counts` reads, in its order: as many commands as there are.
COUNTED = ("pending", "claimed", "running", "failed")


class ActiveReads:
    """The reads of the worker SDK (`ActiveCore.reads`)."""

    def __init__(self, keys: KeySchema) -> None:
        self.keys = keys
        self.skipped_records = 0

    @typed
    def _get(self, pid: int) -> Steps[PartitionInfo | None]:
        check_partition_id(pid)
        raw = yield one().hget(self.keys.active, str(pid))
        return None if raw is None else parse_active(raw)

    def _parse_listed(self, raw: bytes) -> PartitionInfo | None:
        """A listed record, or None (counted in ``skipped_records``) if it cannot be read, as Go's
        listing calls skip a record they reject instead of failing the whole listing."""
        try:
            return parse_active(raw)
        except (DecodeError, ValidationError):
            self.skipped_records += 1
            return None

    @typed
    def _all_active(self) -> Steps[list[PartitionInfo]]:
        """Every readable active partition, ordered by pid. Reads only the active hash."""
        raw = yield one().hgetall(self.keys.active)
        records = [p for v in raw.values() if (p := self._parse_listed(v)) is not None]
        return sorted(records, key=lambda r: r.partition_id)

    @typed
    def _page(
        self, *, status: str | None = None, after: int = 0, limit: int = 100
    ) -> Steps[tuple[list[PartitionInfo], int | None]]:
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
                raw = yield one().zrangebyscore(zset, f"({cursor}", "+inf", start=0, num=limit)
                pids = [int(p) for p in raw if p.isdigit()]
            else:
                every = yield one().hkeys(self.keys.active)
                pids = sorted(p for p in (int(f) for f in every if f.isdigit()) if p > cursor)[: limit * 4]
            if not pids:
                return chosen, None
            records = yield one().hmget(self.keys.active, [str(p) for p in pids])
            for raw_record in records:
                part = None if raw_record is None else self._parse_listed(raw_record)
                if part is None:
                    continue
                if status is None or part.status.value == status:
                    chosen.append(part)
                    if len(chosen) == limit:
                        return chosen, part.partition_id
            cursor = pids[-1]
        return chosen, None

    @typed
    def _active_scan(self, cursor: int, batch: int) -> Steps[tuple[int, list[PartitionInfo]]]:
        """One HSCAN step of `iter_active`: the next cursor (0 at the end) and the readable records."""
        cursor, page = yield one().hscan(self.keys.active, cursor, count=batch)
        return int(cursor), [part for raw in page.values() if (part := self._parse_listed(raw)) is not None]

    @typed
    def _size(self) -> Steps[int]:
        return int((yield one().hlen(self.keys.active)))

    @typed
    def _is_completed(self, pid: int) -> Steps[bool]:
        """True once `complete` succeeded for this partition (archived or still queued)."""
        check_partition_id(pid)
        return bool((yield one().getbit(self.keys.done, pid)))

    @typed
    def _unreadable(self, limit: int = 100) -> Steps[list[tuple[int, int]]]:
        """Partitions whose records no reader can read, set aside out of the claim indexes: (pid,
        unix ms set aside), oldest first, at most ``limit``."""
        check_int("limit", limit, 1, 10_000)
        found = yield one().zrange(self.keys.unreadable, 0, limit - 1, withscores=True)
        return [(int(pid), int(since)) for pid, since in found]

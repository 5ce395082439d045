"""The partition record types and their JSON form.

`PartitionInfo` is the active-layer record with the field names of the original
`PartitionInfo` JSON (plus `claimed_at`, from which the completion duration is
computed). `ArchivedPartition` is what the archive keeps of a completed partition.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple, TypeVar

import orjson

from codec.errors import DecodeError, ValidationError
from codec.validate import (
    MAX_DURATION,
    MAX_ERROR_BYTES,
    MAX_ID,
    MAX_INT64,
    MAX_TIMESTAMP,
    MAX_WORKER_ID_BYTES,
    MIN_INT64,
    check_int,
    check_pid,
    check_range,
    check_text,
    check_worker_id,
)
from codec.validate import (
    has_control_characters as _has_control,
)

MAX_OPTIONS_BYTES = 16384


class Status(enum.StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    RUNNING = "running"
    FAILED = "failed"
    COMPLETED = "completed"


ACTIVE_STATUSES = (Status.PENDING, Status.CLAIMED, Status.RUNNING, Status.FAILED)


class _PartitionFields(NamedTuple):
    partition_id: int
    min_id: int
    max_id: int
    status: Status = Status.PENDING
    worker_id: str = ""
    version: int = 0
    error: str = ""
    created_at: int = 0
    updated_at: int = 0
    last_heartbeat: int = 0
    claimed_at: int = 0
    options: dict[str, Any] = {}


class PartitionInfo(_PartitionFields):
    """An active-layer record. Immutable; the constructor validates every field."""

    __slots__ = ()

    def __new__(
        cls,
        partition_id: int,
        min_id: int,
        max_id: int,
        status: Status | str = Status.PENDING,
        worker_id: str = "",
        version: int = 0,
        error: str = "",
        created_at: int = 0,
        updated_at: int = 0,
        last_heartbeat: int = 0,
        claimed_at: int = 0,
        options: dict[str, Any] | None = None,
    ) -> PartitionInfo:
        check_pid(partition_id)
        check_range(min_id, max_id)
        try:
            status = Status(status)
        except ValueError:
            raise ValidationError(f"unknown status {status!r}") from None
        if worker_id:
            check_worker_id(worker_id)
        elif not isinstance(worker_id, str):
            raise ValidationError("worker_id must be a string")
        check_int("version", version, 0, 2**53)
        check_text("error", error, MAX_ERROR_BYTES, allow_empty=True, multiline=True)
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise ValidationError("options must be a JSON object")
        for name, value in (
            ("created_at", created_at),
            ("updated_at", updated_at),
            ("last_heartbeat", last_heartbeat),
            ("claimed_at", claimed_at),
        ):
            check_int(name, value, 0, MAX_TIMESTAMP)
        return tuple.__new__(
            cls,
            (
                partition_id,
                min_id,
                max_id,
                status,
                worker_id,
                version,
                error,
                created_at,
                updated_at,
                last_heartbeat,
                claimed_at,
                dict(options),
            ),
        )

    @property
    def processed_data(self) -> int:
        return self.max_id - self.min_id + 1

    def to_dict(self) -> dict[str, Any]:
        data = self._asdict()
        data["status"] = self.status.value
        return data

    def to_json(self) -> bytes:
        try:
            blob = orjson.dumps(self.to_dict())
        except TypeError as exc:
            raise ValidationError(f"options are not JSON-serialisable: {exc}") from None
        if len(blob) > MAX_OPTIONS_BYTES + MAX_ERROR_BYTES + 2048:
            raise ValidationError("record is too large")
        return blob

    @classmethod
    def from_json(cls, raw: bytes | str) -> PartitionInfo:
        """Parse a stored record. The common, well-formed case skips the per-field error paths."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _from_json(cls, raw)
        return cls.from_parsed(data, raw)

    @classmethod
    def from_parsed(cls, data: Any, raw: bytes | str) -> PartitionInfo:
        """`from_json` of ``raw`` when the caller has already parsed it into ``data``."""
        try:
            fast = _fast_partition(data)
        except (TypeError, KeyError):
            fast = None
        if fast is not None:
            return tuple.__new__(cls, fast)
        return _from_json(cls, raw)


_STATUSES = {s.value: s for s in Status}
_TS = MAX_TIMESTAMP


def _fast_partition(data: Any) -> tuple[Any, ...] | None:
    """The record's fields if ``data`` is a well-formed record, else None (the slow path explains)."""
    if type(data) is not dict or len(data) != 12:
        return None
    pid, lo, hi = data["partition_id"], data["min_id"], data["max_id"]
    worker, error, version, options = data["worker_id"], data["error"], data["version"], data["options"]
    created, updated = data["created_at"], data["updated_at"]
    heartbeat, claimed = data["last_heartbeat"], data["claimed_at"]
    status = _STATUSES.get(data["status"])
    if not (
        status is not None
        and type(pid) is int
        and type(lo) is int
        and type(hi) is int
        and type(version) is int
        and 1 <= pid <= MAX_ID
        and MIN_INT64 <= lo <= hi <= MAX_INT64
        and 0 <= version <= MAX_ID
        and type(created) is int
        and type(updated) is int
        and type(heartbeat) is int
        and type(claimed) is int
        and 0 <= created <= _TS
        and 0 <= updated <= _TS
        and 0 <= heartbeat <= _TS
        and 0 <= claimed <= _TS
        and type(worker) is str
        and len(worker) <= MAX_WORKER_ID_BYTES // 4
        and not _has_control(worker)
        and type(error) is str
        and not error
        and type(options) is dict
    ):
        return None
    return (pid, lo, hi, status, worker, version, error, created, updated, heartbeat, claimed, options)


class _ArchivedFields(NamedTuple):
    partition_id: int
    min_id: int
    max_id: int
    worker_id: str
    completed_at: int
    duration: int


class ArchivedPartition(_ArchivedFields):
    """What the archive keeps of a completed partition.

    A named tuple, so decoders can build thousands per millisecond with `trusted` once
    they have checked a whole column's range; the public constructor validates each field.
    """

    __slots__ = ()

    def __new__(
        cls, partition_id: int, min_id: int, max_id: int, worker_id: str, completed_at: int, duration: int
    ) -> ArchivedPartition:
        check_pid(partition_id)
        check_range(min_id, max_id)
        check_worker_id(worker_id)
        check_int("completed_at", completed_at, 0, MAX_TIMESTAMP)
        check_int("duration", duration, 0, MAX_DURATION)
        return tuple.__new__(cls, (partition_id, min_id, max_id, worker_id, completed_at, duration))

    @classmethod
    def checked(cls, pid: Any, lo: Any, hi: Any, worker: Any, at: Any, duration: Any) -> ArchivedPartition:
        """The constructor's checks, inline for the well-formed case (this runs per archived
        partition); anything unusual goes through the constructor, which says what is wrong."""
        if (
            type(pid) is int
            and type(lo) is int
            and type(hi) is int
            and type(at) is int
            and type(duration) is int
            and 1 <= pid <= MAX_ID
            and MIN_INT64 <= lo <= hi <= MAX_INT64
            and 0 <= at <= MAX_TIMESTAMP
            and 0 <= duration <= MAX_DURATION
            and type(worker) is str
            and 0 < len(worker) <= MAX_WORKER_ID_BYTES // 4
            and not _has_control(worker)
        ):
            return tuple.__new__(cls, (pid, lo, hi, worker, at, duration))
        return cls(pid, lo, hi, worker, at, duration)

    @classmethod
    def trusted(cls, fields: tuple[int, int, int, str, int, int]) -> ArchivedPartition:
        """Build without per-field checks: only for values a decoder has already validated."""
        return tuple.__new__(cls, fields)

    @property
    def processed_data(self) -> int:
        return self.max_id - self.min_id + 1

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    def to_json(self) -> bytes:
        return orjson.dumps(self._asdict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> ArchivedPartition:
        return cls.from_dict(load_json(raw))

    @classmethod
    def from_dict(cls, data: Any) -> ArchivedPartition:
        """From decoded JSON; anything malformed is a `DecodeError`."""
        if type(data) is dict and len(data) == 6:
            try:
                return cls.checked(
                    data["partition_id"], data["min_id"], data["max_id"], data["worker_id"], data["completed_at"],
                    data["duration"],
                )
            except KeyError:
                pass
            except ValidationError as exc:
                raise DecodeError(f"record JSON is invalid: {exc}") from None
        return _from_json(cls, orjson.dumps(data))


_R = TypeVar("_R", PartitionInfo, ArchivedPartition)


def _from_json(cls: type[_R], raw: bytes | str) -> _R:
    """Parse stored JSON into `cls`; anything malformed is a `DecodeError`."""
    data = load_json(raw)
    if not isinstance(data, dict):
        raise DecodeError("record JSON is not an object")
    try:
        return cls(**data)  # type: ignore[arg-type]
    except TypeError as exc:
        raise DecodeError(f"record JSON has the wrong fields: {exc}") from None
    except ValidationError as exc:
        raise DecodeError(f"record JSON is invalid: {exc}") from None


def load_json(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None

"""Range and shape checks shared by the record types and the encoders."""

from __future__ import annotations

import re
from typing import Any

from codec.errors import ValidationError

MAX_ID = 2**53
#: Bitmaps address at most 2^32 bits, so the partition ids of the Redis layers stop there.
MAX_PARTITION_ID = 2**32 - 1
#: ``min_id``/``max_id`` are signed 64-bit, as Go's ``int64`` in elk_coordinator.
MIN_INT64 = -(2**63)
MAX_INT64 = 2**63 - 1
MAX_TIMESTAMP = 2**40
MAX_DURATION = 10**9
MAX_WORKER_ID_BYTES = 256
MAX_ERROR_BYTES = 8192
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CONTROL_MULTILINE = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValidationError(f"{name} must be in {lo}..{hi}, got {value}")
    return value


def check_partition_id(pid: Any) -> int:
    """A partition id as the Redis layers address it (1 .. `MAX_PARTITION_ID`)."""
    return check_int("partition_id", pid, 1, MAX_PARTITION_ID)


def check_seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds (an int or a float; not a bool, a string or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < float("inf"):
        raise ValidationError(f"{name} must be a positive number of seconds, got {value}")
    return float(value)


def check_pid(value: Any) -> int:
    return check_int("partition_id", value, 1, MAX_ID)


def check_range(min_id: Any, max_id: Any) -> tuple[int, int]:
    check_int("min_id", min_id, MIN_INT64, MAX_INT64)
    check_int("max_id", max_id, MIN_INT64, MAX_INT64)
    if max_id < min_id:
        raise ValidationError(f"inverted range: min_id {min_id} > max_id {max_id}")
    return min_id, max_id


def check_text(name: str, value: Any, max_bytes: int, *, allow_empty: bool, multiline: bool = False) -> str:
    """Reject non-strings, empty (unless allowed), oversized, unencodable or control-character text."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise ValidationError(f"{name} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(f"{name} is not valid unicode text") from None
    if size > max_bytes:
        raise ValidationError(f"{name} is {size} bytes, the limit is {max_bytes}")
    if (_CONTROL_MULTILINE if multiline else _CONTROL).search(value):
        raise ValidationError(f"{name} contains control characters")
    return value


def check_worker_id(value: Any) -> str:
    return check_text("worker_id", value, MAX_WORKER_ID_BYTES, allow_empty=False)


def has_control_characters(value: str) -> bool:
    return _CONTROL.search(value) is not None

"""A stored record in either format, partarchive's own or elk_coordinator's, told apart and read.

The archive and the active hash hold both formats side by side (a namespace bound to a Go
deployment, a takeover in progress): these readers take whichever a value is, and hand back
what the reader asked for.
"""

from __future__ import annotations

from typing import Any

from codec.elk import ElkRecord, elk_from_data
from codec.errors import DecodeError, ValidationError
from codec.record import ArchivedPartition, PartitionInfo, load_json


def is_elk_json(data: dict[str, Any]) -> bool:
    """Tell a decoded Go record from partarchive's own JSON (whose times are integers)."""
    for name in ("updated_at", "created_at", "last_heartbeat"):
        if name in data:
            return not isinstance(data[name], int)
    return "completed_at" not in data


def parse_archived(raw: bytes | str) -> ArchivedPartition | ElkRecord:
    """A stored archive record in either format: partarchive's own or Go's full record."""
    data = load_json(raw)
    if type(data) is dict and is_elk_json(data):
        rec = elk_from_data(data)
        try:
            rec.to_archived()
        except ValidationError as exc:
            raise DecodeError(f"record cannot be archived: {exc}") from None
        return rec
    return ArchivedPartition.from_dict(data)


def decode_active(raw: bytes | str) -> PartitionInfo | ElkRecord:
    """An active-hash record in either format, Go's kept as Go wrote it."""
    data = load_json(raw)
    if type(data) is dict and is_elk_json(data):
        return elk_from_data(data)
    return PartitionInfo.from_parsed(data, raw)


def parse_active(raw: bytes | str) -> PartitionInfo:
    """An active-hash record in either format, as the worker SDK's `PartitionInfo`."""
    data = load_json(raw)
    if type(data) is dict and is_elk_json(data):
        return elk_from_data(data).to_partition_info()
    return PartitionInfo.from_parsed(data, raw)


def as_archived(rec: ArchivedPartition | ElkRecord) -> ArchivedPartition:
    return rec if isinstance(rec, ArchivedPartition) else rec.to_archived()

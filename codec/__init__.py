"""Partition records and their encodings. Pure code: no Redis."""

from codec.errors import DecodeError, PartArchiveError, ValidationError
from codec.record import ACTIVE_STATUSES, ArchivedPartition, PartitionInfo, Status

__all__ = [
    "ACTIVE_STATUSES",
    "ArchivedPartition",
    "DecodeError",
    "PartArchiveError",
    "PartitionInfo",
    "Status",
    "ValidationError",
]

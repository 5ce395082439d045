"""Partition records and their encodings. Pure code: no Redis."""

from codec.errors import DecodeError, PartArchiveError, ValidationError
from codec.framing import Codec, blob_codec, blob_record_count, decode_blob, encode_blob, find_in_blob
from codec.record import ACTIVE_STATUSES, ArchivedPartition, PartitionInfo, Status
from codec.text import decode_text, encode_text
from codec.workers import WorkerNumbering

__all__ = [
    "ACTIVE_STATUSES",
    "ArchivedPartition",
    "Codec",
    "DecodeError",
    "PartArchiveError",
    "PartitionInfo",
    "Status",
    "ValidationError",
    "WorkerNumbering",
    "blob_codec",
    "blob_record_count",
    "decode_blob",
    "decode_text",
    "encode_blob",
    "encode_text",
    "find_in_blob",
]

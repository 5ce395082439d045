"""The record types: validation and JSON round trip."""

from __future__ import annotations

import pytest

from codec import ArchivedPartition, DecodeError, PartitionInfo, Status, ValidationError


def test_partition_info_json_round_trip() -> None:
    info = PartitionInfo(4970, 4969001, 4970000, Status.RUNNING, "worker1", 3, "", created_at=5, options={"k": [1, 2]})
    assert PartitionInfo.from_json(info.to_json()) == info
    assert info.processed_data == 1000


def test_archived_round_trip() -> None:
    part = ArchivedPartition(4970, 4969001, 4970000, "worker1", 1719234405, 295)
    assert ArchivedPartition.from_json(part.to_json()) == part


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partition_id": 0},
        {"partition_id": 2**53 + 1},
        {"min_id": 10, "max_id": 9},
        {"min_id": -(2**63) - 1},
        {"max_id": 2**63},
        {"worker_id": ""},
        {"worker_id": "a\nb"},
        {"worker_id": "x" * 300},
        {"completed_at": -1},
        {"duration": 10**9 + 1},
        {"partition_id": True},
        {"min_id": 1.0},
    ],
)
def test_archived_validation(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {
        "partition_id": 1,
        "min_id": 1,
        "max_id": 1000,
        "worker_id": "w",
        "completed_at": 0,
        "duration": 0,
    }
    with pytest.raises(ValidationError):
        ArchivedPartition(**(base | kwargs))  # type: ignore[arg-type]


def test_partition_info_validation() -> None:
    with pytest.raises(ValidationError):
        PartitionInfo(1, 1, 10, status="done")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        PartitionInfo(1, 1, 10, error="e" * 9000)
    with pytest.raises(ValidationError):
        PartitionInfo(1, 1, 10, options=[])  # type: ignore[arg-type]
    assert PartitionInfo(1, 1, 10, status="failed").status is Status.FAILED  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b"{",
        b'{"partition_id": 1}',
        b'{"partition_id": "x"}',
        b'{"zzz": 1, "partition_id": 1, "min_id": 1, "max_id": 1}',
        b"\xff\xfe",
    ],
)
def test_stored_garbage_is_a_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        PartitionInfo.from_json(raw)
    with pytest.raises(DecodeError):
        ArchivedPartition.from_json(raw)

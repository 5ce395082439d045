"""Worker ID <-> short number mapping, as data (the Redis-backed registry lives in `layers`)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from codec.errors import DecodeError, ValidationError
from codec.validate import check_int, check_worker_id

MAX_SHORT_ID = 2**32 - 1


class WorkerNumbering:
    """Stable, reversible numbering of worker IDs, from 1 upwards."""

    __slots__ = ("_by_id", "_by_short")

    def __init__(self, mapping: Mapping[int, str] | None = None) -> None:
        self._by_id: dict[str, int] = {}
        self._by_short: dict[int, str] = {}
        for short, worker_id in (mapping or {}).items():
            self.add(short, worker_id)

    def add(self, short: int, worker_id: str) -> None:
        """Record a known pair; re-adding the same pair is a no-op, a conflicting one an error."""
        check_int("short id", short, 1, MAX_SHORT_ID)
        check_worker_id(worker_id)
        if self._by_short.get(short, worker_id) != worker_id or self._by_id.get(worker_id, short) != short:
            raise ValidationError(f"worker {worker_id!r} / short id {short} conflicts with the map")
        self._by_id[worker_id] = short
        self._by_short[short] = worker_id

    def short_id(self, worker_id: str) -> int:
        """The worker's number, assigning the next free one when the worker is new."""
        short = self._by_id.get(worker_id)
        if short is None:
            check_worker_id(worker_id)
            short = max(self._by_short, default=0) + 1
            self.add(short, worker_id)
        return short

    def known_short_id(self, worker_id: str) -> int | None:
        return self._by_id.get(worker_id)

    def worker_id(self, short: int) -> str:
        try:
            return self._by_short[short]
        except KeyError:
            raise DecodeError(f"unknown worker short id {short}") from None

    def __len__(self) -> int:
        return len(self._by_short)

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._by_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkerNumbering) and self._by_short == other._by_short

    __hash__ = None  # type: ignore[assignment]

    def lookup_table(self) -> dict[int, str]:
        """short -> worker ID (a copy), for decoders."""
        return dict(self._by_short)

    def to_json(self) -> bytes:
        return orjson.dumps({str(k): v for k, v in sorted(self._by_short.items())})

    @classmethod
    def from_json(cls, raw: bytes | str) -> WorkerNumbering:
        try:
            data = orjson.loads(raw)
            if not isinstance(data, dict):
                raise DecodeError("worker map JSON is not an object")
            return cls({int(k): v for k, v in data.items()})
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"invalid worker map: {exc}") from None

"""The decoded heads of the blobs a reader looked into lately, bounded by the bytes they hold.

The query router reads the same sealed batches over and over; a blob's checksum, decompression
and column headers were most of a lookup's decode. A head keeps its payload, so what a kept head
costs is the blob (the key) plus the payload: the bound is in bytes, not in heads, so small
batches (a few hundred bytes each at the default batch size) are kept by the ten thousand and
large compressed ones by the hundred. The blob's bytes are the key: a batch sealed again is a new
entry, and an entry never goes stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

#: Bytes of blobs and payloads kept (plus a fixed allowance an entry for its objects).
HEAD_BYTES_KEPT = 32 * 1024 * 1024
_ENTRY_OVERHEAD = 1024


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    entries: int
    size: int  # bytes accounted


class HeadCache(Generic[T]):
    """``cache.get(blob, read)``: ``read(blob)``'s result, computed once while kept; least recently
    used entries go first once the bytes kept pass ``max_bytes``. ``read`` returns the value and the
    bytes it holds beyond the blob; what it raises is raised each time (never kept)."""

    def __init__(self, max_bytes: int = HEAD_BYTES_KEPT) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, tuple[T, int]] = OrderedDict()
        self._size = self._hits = self._misses = 0
        self._lock = threading.Lock()

    def get(self, blob: bytes, read: Callable[[bytes], tuple[T, int]]) -> T:
        with self._lock:
            kept = self._entries.get(blob)
            if kept is not None:
                self._entries.move_to_end(blob)
                self._hits += 1
                return kept[0]
            self._misses += 1
        value, held = read(blob)
        size = len(blob) + held + _ENTRY_OVERHEAD
        with self._lock:
            if blob not in self._entries and size <= self.max_bytes:
                self._entries[blob] = (value, size)
                self._size += size
                while self._size > self.max_bytes:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self._size -= dropped
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = self._hits = self._misses = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._entries), self._size)

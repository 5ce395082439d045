"""Where a partition is kept in the archive's keys, spelled once for every reader and writer.

A partition's batch is ``pid // batch_size`` (the namespace's stored batch size, whatever a process
is configured with); a sealed batch sits in a shelf of `SHELF_SLOTS` batches (`KeySchema.shelf`), in
the slot ``batch_no % SHELF_SLOTS``. A number's bit in a bitmap (the index and done bits by pid,
the expired batches by batch number) is Redis's SETBIT order: byte ``n // 8``, the most significant
bit of a byte first. The Lua scripts spell the same arithmetic for themselves.
"""

from __future__ import annotations

from collections.abc import Iterable

from codec.framing import SHELF_SLOTS


def batch_of(pid: int, batch_size: int) -> int:
    """The batch that holds partition ``pid``."""
    return pid // batch_size


def shelf_of(batch_no: int) -> int:
    """The shelf that holds batch ``batch_no``."""
    return batch_no // SHELF_SLOTS


def slot_of(batch_no: int) -> int:
    """Batch ``batch_no``'s slot in its shelf."""
    return batch_no % SHELF_SLOTS


def byte_of(n: int) -> int:
    """The byte of a bitmap that holds bit ``n``."""
    return n >> 3


def bit_set(bitmap: bytes, n: int, first_byte: int = 0) -> bool:
    """Whether bit ``n`` is set in ``bitmap``, a Redis bitmap read from byte ``first_byte`` on
    (a bit past what was read is not set)."""
    at = (n >> 3) - first_byte
    return 0 <= at < len(bitmap) and bitmap[at] & (0x80 >> (n & 7)) != 0


def bits_as_bytes(numbers: Iterable[int], first_byte: int, last_byte: int) -> bytes:
    """Bytes ``first_byte`` to ``last_byte`` of a bitmap whose set bits are ``numbers`` (all within them)."""
    out = bytearray(last_byte - first_byte + 1)
    for n in numbers:
        out[(n >> 3) - first_byte] |= 0x80 >> (n & 7)
    return bytes(out)

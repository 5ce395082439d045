"""Where a partition is kept (`layers.archive.places`): its batch, the batch's shelf and slot, and a
number's bit in a bitmap as Redis's SETBIT and GETRANGE have it."""

from __future__ import annotations

import redis

from codec.framing import SHELF_SLOTS
from layers.archive.places import batch_of, bit_set, bits_as_bytes, byte_of, shelf_of, slot_of


def test_a_partition_s_batch_and_the_batch_s_shelf_and_slot() -> None:
    assert [batch_of(pid, 100) for pid in (1, 99, 100, 250)] == [0, 0, 1, 2]
    batch_no = 3 * SHELF_SLOTS + 5
    assert (shelf_of(batch_no), slot_of(batch_no)) == (3, 5)
    assert (shelf_of(SHELF_SLOTS - 1), slot_of(SHELF_SLOTS - 1)) == (0, SHELF_SLOTS - 1)


def test_a_bitmap_is_read_and_written_in_redis_bit_order(fake_redis: redis.Redis, namespace: str) -> None:
    numbers = [0, 7, 8, 13, 64, 1001]
    key = f"{namespace}:bits"
    for n in numbers:
        fake_redis.setbit(key, n, 1)
    whole = fake_redis.get(key)
    assert isinstance(whole, bytes)
    assert bits_as_bytes(numbers, 0, byte_of(max(numbers))) == whole
    assert [n for n in range(1100) if bit_set(whole, n)] == numbers
    first = byte_of(13)
    part = fake_redis.getrange(key, first, byte_of(64))
    assert isinstance(part, bytes)
    assert [n for n in range(1100) if bit_set(part, n, first)] == [8, 13, 64]  # past what was read: not set
    assert bits_as_bytes([13, 64], first, byte_of(64)) == bytes([0b0000_0100, *bytes(6), 0b1000_0000])

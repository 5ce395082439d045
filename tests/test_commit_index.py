"""The commit's index bits, both ways ``commit.lua`` reads and sets them: a page whose pids lie
close together (one byte range of the bitmap) and one spread wider (BITFIELD); in any order, with
a partition counted already, on every engine. Bits land exactly on the counted pids."""

from __future__ import annotations

import random

import pytest
import redis

from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema
from stats.commit import Committer, Pending

CLOSE = [9, 10, 11, 17, 8, 1000, 7, 3, 31_999, 4242]  # within 4,000 bytes of the bitmap
WIDE = [5, 70_000, 1_000_000, 123, 2**32 - 1, 64]  # wider: BITFIELD


def _part(pid: int) -> ArchivedPartition:
    return ArchivedPartition(pid, pid * 10, pid * 10 + 9, f"w{pid % 3}", 1_700_000_000 + pid % 1000, 5)


@pytest.mark.parametrize("pids", [CLOSE, WIDE], ids=["close", "wide"])
def test_bits_are_set_for_the_counted_pids_and_a_counted_one_is_named(
    any_redis: redis.Redis, namespace: str, pids: list[int]
) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    ArchiveQueue(any_redis, keys).ensure_group()
    committer = Committer(ArchiveLayer(any_redis, keys))
    order = list(pids)
    random.Random(7).shuffle(order)
    first, rest = order[: len(order) // 2], order[len(order) // 2 :]
    assert committer.commit(Pending.of([("-", _part(p)) for p in first])).newly_archived == len(first)
    again = [first[0], *rest]  # one counted already: named, the rest counted in a second call
    result = committer.commit(Pending.of([("-", _part(p)) for p in again]))
    assert (result.newly_archived, result.total) == (len(rest), len(pids))
    assert committer.result(committer._run(committer.call(Pending.of([("-", _part(p)) for p in again])))) == sorted(
        again, key=again.index
    )
    assert all(any_redis.getbit(keys.index, p) for p in pids)
    assert int(any_redis.bitcount(keys.index)) == len(pids)  # no bit beside them
    for p in pids:
        for near in (p - 1, p + 1):
            if near not in pids and 0 <= near < 2**32:
                assert not any_redis.getbit(keys.index, near)

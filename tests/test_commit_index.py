"""The commit's index bits, both ways ``commit.lua`` reads and sets them: a page whose pids lie
close together (bytes OR-ed into one range of the bitmap, also where a byte holds bits set
already) and one spread wider (BITFIELD); in any order, with a partition counted already, on
every engine. Bits land exactly on the counted pids."""

from __future__ import annotations

import random

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codec import ArchivedPartition, ValidationError, WorkerNumbering
from codec.page import Columns
from layers import ArchiveLayer, ArchiveQueue, KeySchema
from layers.archive.commit import CommitResult, Committer, Uncommitted, index_bits
from stats.rollup import CommitRollups
from stats.rollup import committer as archive_committer

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
    committer = archive_committer(ArchiveLayer(any_redis, keys))
    order = list(pids)
    random.Random(7).shuffle(order)
    first, rest = order[: len(order) // 2], order[len(order) // 2 :]
    assert committer.commit(Uncommitted.of([("-", _part(p)) for p in first])).newly_archived == len(first)
    again = [first[0], *rest]  # one counted already: named, the rest counted in a second call
    result = committer.commit(Uncommitted.of([("-", _part(p)) for p in again]))
    assert (result.newly_archived, result.total) == (len(rest), len(pids))
    named = committer.result(committer._run(committer.call(Uncommitted.of([("-", _part(p)) for p in again]))))
    assert isinstance(named, list) and sorted(named) == sorted(again)  # each counted one named, once
    assert all(any_redis.getbit(keys.index, p) for p in pids)
    assert int(any_redis.bitcount(keys.index)) == len(pids)  # no bit beside them
    for p in pids:
        for near in (p - 1, p + 1):
            if near not in pids and 0 <= near < 2**32:
                assert not any_redis.getbit(keys.index, near)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=st.sets(st.integers(1, 300), max_size=60),
    page=st.sets(st.integers(1, 300), min_size=1, max_size=60),
)
def test_a_page_of_bytes_ors_into_the_bitmap_and_names_exactly_the_counted(
    real_redis: redis.Redis, namespace: str, before: set[int], page: set[int]
) -> None:
    """Any bits set before, any page sent as bytes: the page's counted ones are named (nothing
    written), the others counted after, and the bitmap ends as the union, not a bit more."""
    keys = KeySchema.of(namespace, client=real_redis)
    real_redis.delete(keys.index, keys.archive_meta)
    for pid in before:
        real_redis.setbit(keys.index, pid, 1)
    committer = archive_committer(ArchiveLayer(real_redis, keys))
    assert index_bits(sorted(page))[0] == "bytes"
    pending = Uncommitted.of([("-", _part(p)) for p in sorted(page)])
    result = committer.result(committer._run(committer.call(pending)))
    if page & before:
        assert isinstance(result, list) and sorted(result) == sorted(page & before)
        assert int(real_redis.bitcount(keys.index)) == len(before)  # nothing written
        result = committer.commit(pending, already=page & before)
    assert isinstance(result, CommitResult) and result.newly_archived == len(page - before)
    raw = real_redis.get(keys.index) or b""
    set_bits = {8 * i + b for i, byte in enumerate(raw) for b in range(8) if byte & (0x80 >> b)}
    assert set_bits == before | page


class _Recording:
    """`CommitStatistics` that records the partitions it is asked about and hands on the namespace's."""

    def __init__(self, inner: CommitRollups) -> None:
        self.inner = inner
        self.asked: list[list[int]] = []
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        self.inner.check()

    def segments(
        self, cols: Columns, workers: WorkerNumbering, now: int, first_key: int
    ) -> tuple[list[str], list[str | int]]:
        self.asked.append(list(cols.pids))
        return self.inner.segments(cols, workers, now, first_key)


def test_the_statistics_handed_to_a_commit_are_asked_again_for_what_it_counts_after_a_duplicate(
    any_redis: redis.Redis, namespace: str
) -> None:
    """The commit (layers) takes its statistics from the statistics layer: asked once per call
    built, again without the partitions found counted, and checked once; what is stored is what
    those statistics said, the duplicate counted once."""
    keys = KeySchema.of(namespace, client=any_redis)
    ArchiveQueue(any_redis, keys).ensure_group()
    archive = ArchiveLayer(any_redis, keys)
    statistics = _Recording(CommitRollups(any_redis, keys, range_width=10))
    committer = Committer(archive, statistics)
    assert committer.commit(Uncommitted.of([("-", _part(3))])).newly_archived == 1
    result = committer.commit(Uncommitted.of([("-", _part(p)) for p in (2, 3, 4)]))
    assert result.newly_archived == 2 and result.total == 3
    assert statistics.asked == [[3], [2, 3, 4], [2, 4]] and statistics.checks == 1
    assert int(any_redis.hget(keys.stats_global, "completed") or 0) == 3  # type: ignore[arg-type]
    assert int(any_redis.hget(keys.stats_range(0), "count") or 0) == 3  # type: ignore[arg-type]  # width 10: one range
    with pytest.raises(ValidationError, match="per 10 partitions"):
        Committer(archive, CommitRollups(any_redis, keys, range_width=20)).commit(Uncommitted.of([("-", _part(5))]))

"""The statistics rollup (pure): its column-wise sums equal the per-partition definition."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import ArchivedPartition, ValidationError, WorkerNumbering
from layers import KeySchema
from stats.progress import MINUTES_KEPT
from stats.rollup import RollupBuilder, add_partitions, day_of, rollup_segments

NUMBERS = WorkerNumbering({7: "w1", 1: "w:2", 12: "w3"})

KEYS = KeySchema("rollup")


def by_definition(
    parts: list[ArchivedPartition], width: int, numbered: bool
) -> dict[tuple[str, str], tuple[str, int]]:
    """Each partition on its own: +1 and its sums on global, worker, range, range-worker and day
    fields; a range names a worker ``#{number}c`` when ``numbered``, else ``{worker_id}:c``."""
    out: dict[tuple[str, str], tuple[str, int]] = {}
    sums: dict[tuple[str, str], int] = defaultdict(int)

    def keep(key: str, field: str, op: str, value: int) -> None:
        old = out.get((key, field))
        pick = min if op == "<" else max
        out[(key, field)] = (op, value if old is None else pick(old[1], value))

    for p in parts:
        data, rng, day = p.max_id - p.min_id + 1, KEYS.stats_range(p.partition_id // width), day_of(p.completed_at)
        in_range = f"#{NUMBERS.known_short_id(p.worker_id)}" if numbered else f"{p.worker_id}:"
        for key, field, value in [
            (KEYS.stats_global, "completed", 1),
            (KEYS.stats_global, "processed", data),
            (KEYS.stats_global, "duration", p.duration),
            (KEYS.stats_workers, f"{p.worker_id}:c", 1),
            (KEYS.stats_workers, f"{p.worker_id}:d", p.duration),
            (KEYS.stats_workers, f"{p.worker_id}:p", data),
            (rng, "count", 1),
            (rng, "data", data),
            (rng, "duration", p.duration),
            (rng, f"{in_range}c", 1),
            (rng, f"{in_range}d", p.duration),
            (rng, f"{in_range}p", data),
            (KEYS.stats_day(day), f"h{p.completed_at // 3600 % 24:02d}", 1),
            (KEYS.stats_day(day), f"s{p.completed_at // 3600 % 24:02d}", p.duration),
            (KEYS.stats_day(day), f"w:{p.worker_id}", 1),
            (KEYS.stats_minutes, str(p.completed_at // 60), 1),
        ]:
            sums[(key, field)] += value
        keep(KEYS.stats_global, "first_completed_at", "<", p.completed_at)
        keep(KEYS.stats_global, "last_completed_at", ">", p.completed_at)
        keep(rng, "min_id", "<", p.min_id)
        keep(rng, "max_id", ">", p.max_id)
        keep(rng, "first_at", "<", p.completed_at)
        keep(rng, "last_at", ">", p.completed_at)
    out.update({k: ("+", v) for k, v in sums.items()})
    return out


parts_strategy = st.lists(
    st.tuples(
        st.integers(1, 5000),
        st.integers(-(2**40), 2**40),
        st.integers(0, 10**9),
        st.sampled_from(["w1", "w:2", "w3"]),
        st.integers(0, 10**6),
        st.integers(0, 5000),
    ).map(lambda t: ArchivedPartition(t[0], t[1], t[1] + t[2], *t[3:])),
    min_size=1,
    max_size=60,
)


@given(parts_strategy, st.sampled_from([1, 7, 1000]), st.booleans(), st.booleans())
def test_the_rollup_equals_the_per_partition_definition(
    parts: list[ArchivedPartition], width: int, sort: bool, numbered: bool
) -> None:
    if sort:  # the import's case (ids in order) and the daemon's (any order)
        parts = sorted(parts)
    builder = RollupBuilder()
    add_partitions(builder, parts, KEYS, width, NUMBERS if numbered else None)
    keys, ops = builder.build()
    got = {(keys[pos], field): (op, value) for pos, op, field, value in ops}
    assert len(got) == len(ops)
    assert got == by_definition(parts, width, numbered)


def test_a_worker_without_a_number_is_refused() -> None:
    part = ArchivedPartition(1, 1, 10, "unregistered", 1_700_000_000, 5)
    with pytest.raises(ValidationError, match="unregistered"):
        add_partitions(RollupBuilder(), [part], KEYS, 1000, NUMBERS)


def test_a_commit_counts_minutes_only_for_the_hours_the_dashboard_keeps() -> None:
    """Completions older than `MINUTES_KEPT` (an import of old records, a backlog) count in their
    hours and days, but add no minute the progress sampler would drop at once."""
    now = 2_000_000_000
    recent = ArchivedPartition(1, 1, 10, "w1", now - 60 * MINUTES_KEPT + 30, 5)
    old = ArchivedPartition(2, 11, 20, "w1", now - 60 * MINUTES_KEPT - 90, 5)
    keys, segments = rollup_segments([recent, old], KEYS, 1000, now, NUMBERS)
    fields, at = {}, 0
    while at < len(segments):  # position, then how many fields add, keep min, keep max; names; values
        n = sum(int(c) for c in segments[at + 1 : at + 4])
        names, values = segments[at + 4 : at + 4 + n], segments[at + 4 + n : at + 4 + 2 * n]
        fields[keys[int(segments[at])]] = dict(zip(names, values, strict=True))
        at += 4 + 2 * n
    assert fields[KEYS.stats_minutes] == {str(recent.completed_at // 60): 1}
    assert sum(v for k, v in fields[KEYS.stats_day(day_of(now))].items() if str(k).startswith("h")) == 2

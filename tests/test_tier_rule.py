"""The tier rule has one definition in Python (`TierPolicy.tier_after`) and one mirror in
``commit.lua``, which moves the stored tier as it counts: the two give the same tier at and
around both thresholds, from every stored tier (a tier never moves down)."""

from __future__ import annotations

import itertools

import pytest
import redis

from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, KeySchema, Tier, TierPolicy
from layers.archive.commit import Uncommitted
from stats.rollup import committer as archive_committer

POLICY = TierPolicy(compressed_from=1_000, summary_above=5_000)
TOTALS = sorted({t for edge in (POLICY.compressed_from, POLICY.summary_above) for t in range(edge - 2, edge + 3)})


def test_python_rule_at_the_thresholds() -> None:
    assert [POLICY.tier_for(t) for t in (999, 1_000, 5_000, 5_001)] == [
        Tier.SIMPLE,
        Tier.COMPRESSED,
        Tier.COMPRESSED,
        Tier.SUMMARY,
    ]
    assert POLICY.tier_after(Tier.SUMMARY, 0) is Tier.SUMMARY


@pytest.mark.parametrize("stored", list(Tier))
def test_commit_script_moves_the_tier_as_the_python_rule_says(
    any_redis: redis.Redis, namespace: str, stored: Tier
) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    ArchiveQueue(any_redis, keys).ensure_group()
    committer = archive_committer(ArchiveLayer(any_redis, keys, POLICY))
    pids = itertools.count(1)
    for total in TOTALS:
        any_redis.hset(keys.archive_meta, mapping={"total": total - 1, "tier": stored.value})
        pid = next(pids)
        result = committer.commit(Uncommitted.of([("-", ArchivedPartition(pid, pid * 10, pid * 10 + 9, "w", 1, 1))]))
        expected = POLICY.tier_after(stored, total)
        assert (result.total, result.tier) == (total, expected), f"stored {stored}, total {total}"
        assert any_redis.hget(keys.archive_meta, "tier") == expected.value.encode()

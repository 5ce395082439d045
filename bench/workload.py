"""The standard workload every benchmark uses (seeded, so runs compare).

Partition k covers IDs (k-1)*1000+1 .. k*1000; 32 workers worker1..worker32 picked uniformly;
duration uniform in 240..360 s; completion time 1719234405 (or ``base_time``) + 3k + uniform(0..5) s;
seed 1.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from codec import ArchivedPartition

BASE_TIME = 1_719_234_405


def standard_workload(
    count: int, first: int = 1, seed: int = 1, base_time: int = BASE_TIME
) -> Iterator[ArchivedPartition]:
    rng = random.Random(seed)
    for k in range(first, first + count):
        worker = f"worker{rng.randint(1, 32)}"
        duration = rng.randint(240, 360)
        completed_at = base_time + 3 * k + rng.randint(0, 5)
        yield ArchivedPartition.trusted(((k), (k - 1) * 1000 + 1, k * 1000, worker, completed_at, duration))

"""The cold tier (`layers.archive.cold`) on the real engine and a local cluster (`server_redis`): the
summary tier's expired batches go to Parquet files before they leave Redis, recorded once, the
files few; the router (blocking and asyncio) answers them from there; a step that dies half way,
a straggler, an unwritable store and a missing or corrupt file lose nothing and write nothing twice.
The crashes of real processes are `tests/test_cold_crash.py`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.namespace import Namespace
from archiver.router import QueryRouter, Source
from codec import ArchivedPartition
from layers import migrate_step
from layers.archive.cold import ColdTier, add_map_reads
from layers.archive.cold_store import ColdStore, name_of
from layers.archive.commit import Uncommitted
from layers.archive.transitions import index_expiry_step
from layers.errors import ColdStoreUnavailable
from stats.rollup import committer
from tests.flavours import Flavour

DAY = 86400


def parts_of(pids: range, completed_at: int, worker: str = "w") -> list[ArchivedPartition]:
    return [
        ArchivedPartition(p, p * 1000 + 1, p * 1000 + 1000, f"{worker}{p % 3}", completed_at + p, 60 + p % 50)
        for p in pids
    ]


def cold_namespace(client: redis.Redis, namespace: str, store: Path, **settings: object) -> Namespace:
    """A summary-tier namespace (everything archived is in it) keeping a day of detail, with a cold store."""
    config = Config(
        namespace=namespace,
        cluster=isinstance(client, redis.RedisCluster),
        compressed_from=0,
        summary_above=0,
        retention_s=DAY,
        seal_idle_s=0,
        cold_store=str(store),
        cold_gather_s=0,
        **settings,  # type: ignore[arg-type]
    )
    ns = Namespace(client, config)
    ns.archive.check_cold()
    return ns


def archive(ns: Namespace, parts: list[ArchivedPartition]) -> None:
    """Detail written (batches sealed) and committed, with the statistics, as the archiver does."""
    for start in range(0, len(parts), 500):
        chunk = parts[start : start + 500]
        ns.archive.write_detail(chunk)
        committer(ns.archive).commit(Uncommitted.of([("-", p) for p in chunk]))
    ns.archive.sealing.seal_idle(now=time.time() + 10)
    while index_expiry_step(ns.archive):  # batches sealed before the first commit moved the tier up
        pass


def run_steps(ns: Namespace, now: float) -> int:
    steps = 0
    while migrate_step(ns.archive, now=now):
        steps += 1
        assert steps < 1000
    return steps


def cold_map(ns: Namespace, batches: list[int]) -> dict[int, int]:
    pipe = ns.redis.pipeline(transaction=False)
    parse = add_map_reads(pipe, ns.keys, batches)
    return parse(pipe.execute())  # type: ignore[no-any-return]


def recorded(ns: Namespace) -> dict[int, dict[str, object]]:
    raw = ns.redis.hgetall(ns.keys.cold_files)
    return {int(k): orjson.loads(v) for k, v in raw.items()}  # type: ignore[union-attr]


def files_in(store: Path, namespace: str) -> list[str]:
    folder = store / namespace
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_expired_batches_go_to_few_cold_files_and_the_router_answers_them(
    server_redis: redis.Redis, namespace: str, tmp_path: Path, flavour: Flavour
) -> None:
    now = time.time()
    ns = cold_namespace(server_redis, namespace, tmp_path, cold_file_batches=8)
    parts = parts_of(range(1, 3000), int(now) - 3 * DAY)  # batches 0..29, all past the retention
    archive(ns, parts)  # the first 500 sealed before the first commit moved the tier: indexed by a step
    run_steps(ns, now)
    assert server_redis.zcard(ns.keys.expiry) == 0
    assert ns.archive.shelves.read(range(30))[3].blob is None  # left Redis ...
    files = recorded(ns)
    assert len(files) == 4 and sum(f["batches"] for f in files.values()) == 30  # ... for 4 files of <= 8 batches
    assert files_in(tmp_path, namespace) == sorted(str(f["name"]) for f in files.values())
    owners = cold_map(ns, list(range(30)))
    assert set(owners.values()) == set(files) and all(owners.values())
    meta = server_redis.hgetall(ns.keys.archive_meta)
    assert int(meta[b"cold_partitions"]) == len(parts) and int(meta[b"expired"]) == len(parts)
    assert meta[b"cold_store"] == str(tmp_path).encode()
    router = flavour.router(server_redis, ns.keys, archive=ns.archive)
    for part in parts[::37]:
        answer = router.get(part.partition_id)
        assert (answer.source, answer.partition, answer.degraded) == (Source.COLD, part, False)
    snapshot = ns.snapshot()
    cold = snapshot.archive.cold
    assert (cold.files, cold.partitions, cold.store) == (4, len(parts), str(tmp_path))
    assert cold.bytes == sum(os.path.getsize(tmp_path / namespace / n) for n in files_in(tmp_path, namespace))


def test_small_files_are_merged_so_files_follow_the_data_not_the_sweeps(
    server_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """Batches expiring a few at a time (a trickle) go into the last small file, which a new file
    takes the place of: after 6 steps there is one file, and the retired ones are deleted once no
    reader can be on its way to them."""
    ns = cold_namespace(server_redis, namespace, tmp_path, cold_file_batches=64)
    old = int(time.time()) - 3 * DAY
    parts = parts_of(range(1, 1800), old)
    for round_ in range(6):  # three batches come due at each round
        archive(ns, parts[300 * round_ - (1 if round_ else 0) : 300 * round_ + 299])
        assert migrate_step(ns.archive, now=time.time()) > 0
        files = recorded(ns)
        assert len(files) == 1 and next(iter(files.values()))["batches"] == 3 * (round_ + 1)
    assert len(files_in(tmp_path, namespace)) == 6  # the five retired ones wait out their grace
    assert server_redis.zcard(ns.keys.cold_retired) == 5
    tier = ns.archive.cold
    assert isinstance(tier, ColdTier)
    tier.step(time.time() + 120)
    assert len(files_in(tmp_path, namespace)) == 1 and server_redis.zcard(ns.keys.cold_retired) == 0
    assert int(server_redis.hget(ns.keys.archive_meta, "cold_partitions")) == len(parts)  # type: ignore[arg-type]
    router = QueryRouter(server_redis, ns.keys, archive=ns.archive)
    assert [router.get(p.partition_id).partition for p in parts[::50]] == parts[::50]


def test_a_straggler_sealed_after_its_batch_went_cold_is_merged_with_it(
    server_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    ns = cold_namespace(server_redis, namespace, tmp_path)
    old = int(time.time()) - 3 * DAY
    parts = parts_of(range(1, 300), old)  # batches 0..2
    late = parts_of(range(300, 301), old)  # batch 3, one partition
    straggler = ArchivedPartition(350, 350_001, 351_000, "late", old + 500, 7)
    archive(ns, parts + late)
    run_steps(ns, time.time())
    first = cold_map(ns, [3])[3]
    assert first
    archive(ns, [straggler])  # batch 3 sealed again: a new blob holding the straggler alone
    assert ns.archive.shelves.read([3])[3].blob is not None
    run_steps(ns, time.time())
    owner = cold_map(ns, [3])[3]
    assert owner not in (0, first)
    rows = ColdStore(str(tmp_path), namespace).rows_between(name_of(owner), 300, 399).records()
    assert rows == [*late, straggler]  # the batch's earlier row and the straggler, together
    assert int(server_redis.hget(ns.keys.archive_meta, "cold_partitions")) == len(parts) + 2  # type: ignore[arg-type]
    router = QueryRouter(server_redis, ns.keys, archive=ns.archive)
    assert router.get(300).partition == late[0] and router.get(350).partition == straggler


class Died(Exception):
    """A step stopped dead at a fault point (what kill -9 does to a process, short of the process)."""


@pytest.mark.parametrize("where", ["cold_written", "cold_recorded"])
def test_a_step_that_dies_half_way_loses_nothing_and_records_nothing_twice(
    server_redis: redis.Redis, namespace: str, tmp_path: Path, where: str
) -> None:
    ns = cold_namespace(server_redis, namespace, tmp_path, cold_file_batches=8)
    parts = parts_of(range(1, 2000), int(time.time()) - 3 * DAY)
    archive(ns, parts)
    tier = ns.archive.cold
    assert isinstance(tier, ColdTier)

    def die(point: str) -> None:
        if point == where:
            raise Died(point)

    tier.fault_point = die  # type: ignore[method-assign]
    with pytest.raises(Died):
        tier.step(time.time())
    assert len(files_in(tmp_path, namespace)) == 1  # written (and recorded, or not)
    assert server_redis.zcard(ns.keys.expiry) == 20  # nothing left Redis
    after = Namespace(server_redis, ns.config)  # the next lock holder
    after.archive.check_cold()
    run_steps(after, time.time())
    files = recorded(after)
    assert sum(f["batches"] for f in files.values()) == 20  # every batch in one recorded file
    assert files_in(tmp_path, namespace) == sorted(str(f["name"]) for f in files.values())  # the orphan deleted
    store = ColdStore(str(tmp_path), namespace)
    rows = [p for f in files.values() for p in store.rows_between(str(f["name"]), 1, 10**6).records()]
    assert sorted(rows) == parts  # nothing lost, nothing twice
    assert int(server_redis.hget(after.keys.archive_meta, "cold_partitions")) == len(parts)  # type: ignore[arg-type]


def test_an_unwritable_store_keeps_the_batches_in_redis_and_says_why(
    server_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """A store that cannot be written (here: its folder is a file): the step writes nothing, keeps the
    batches in Redis, notes why in the archive meta (status shows it), and backs off; the start of
    an archiver refuses it with one line."""
    ns = cold_namespace(server_redis, namespace, tmp_path)
    parts = parts_of(range(1, 500), int(time.time()) - 3 * DAY)
    archive(ns, parts)
    (tmp_path / namespace).rmdir()  # made by the check at start, empty
    (tmp_path / namespace).write_text("not a folder")
    assert migrate_step(ns.archive, now=time.time()) == 0
    assert server_redis.zcard(ns.keys.expiry) == 5 and ns.archive.shelves.read([1])[1].blob is not None
    error = ns.snapshot().archive.cold.error
    assert error and str(tmp_path) in error
    with pytest.raises(ColdStoreUnavailable, match="cannot write"):
        ns.archive.check_cold()


def test_without_a_cold_store_an_archiver_refuses_a_namespace_that_keeps_one(
    server_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    cold_namespace(server_redis, namespace, tmp_path)
    plain = Namespace(server_redis, Config(namespace=namespace, cluster=isinstance(server_redis, redis.RedisCluster)))
    with pytest.raises(Exception, match="keeps expired detail in the cold store"):
        plain.archive.check_cold()


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_cold_file_is_answered_from_the_statistics(
    server_redis: redis.Redis, namespace: str, tmp_path: Path, damage: str, flavour: Flavour
) -> None:
    ns = cold_namespace(server_redis, namespace, tmp_path)
    parts = parts_of(range(1, 500), int(time.time()) - 3 * DAY)
    archive(ns, parts)
    run_steps(ns, time.time())
    [name] = files_in(tmp_path, namespace)
    path = tmp_path / namespace / name
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:200])
    answer = flavour.router(server_redis, ns.keys, archive=ns.archive).get(123)
    assert (answer.source, answer.degraded) == (Source.STATISTICS, True)
    assert f"cold file {name} is {damage}" in answer.detail
    assert answer.summary is not None and answer.summary["partition_count"] == 499  # range 0 holds pids 1..499

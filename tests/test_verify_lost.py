"""`stats verify` and the paced index walk tell detail that expired on purpose (the summary tier's
sweep) from detail that is missing (a batch's shelf slot or a simple record deleted behind
partarchive's back), and name the partitions whose records are gone: exit 1, with or without
``--repair``, which cannot bring them back."""

from __future__ import annotations

import time

import pytest
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from layers import Tier, migrate_step
from layers.archive.shelves import SlotWrite
from stats import StatsChecker
from stats.index_check import IndexCheck
from stats.lost import runs
from tests.helpers import complete_partitions, run_cli


def _archived(client: redis.Redis, namespace: str, n: int, **settings: object) -> ArchiverDaemon:
    config = Config(namespace=namespace, block_ms=20, stats_flush_interval_s=0.1, stats_range_width=100, **settings)  # type: ignore[arg-type]
    daemon = ArchiverDaemon(client, config, consumer="lost")
    daemon.queue.ensure_group()
    complete_partitions(client, namespace, n)
    drain(daemon)
    daemon.release_lock()
    assert daemon.archive.archived_total() == n
    return daemon


def _walk(client: redis.Redis, daemon: ArchiverDaemon) -> dict[str, str]:
    walk = IndexCheck(client, daemon.keys, daemon.config.policy)
    walk.request()
    while walk.step(2):
        pass
    raw = client.hgetall(daemon.keys.stats_meta)
    return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]


@pytest.mark.parametrize("tier", ["simple", "compressed"])
def test_detail_deleted_behind_its_back_is_named_by_verify_and_by_the_walk(
    real_redis: redis.Redis, namespace: str, engine_url: str, tier: str
) -> None:
    settings = {"compressed_from": 0} if tier == "compressed" else {}
    daemon = _archived(real_redis, namespace, 450, **settings)
    keys, archive = daemon.keys, daemon.archive
    assert archive.tier().value == tier and StatsChecker(real_redis, keys, policy=archive.policy).check().ok
    if tier == "compressed":  # batch 2's blob vanishes from its shelf slot; its index bits stay
        [stored] = archive.shelves.read([2]).values()
        assert archive.shelves.write([SlotWrite(2, stored.slot, b"")]) == {2}
        lost = list(range(200, 300))
    else:
        real_redis.hdel(keys.completed, "17", "18", "300")
        lost = [17, 18, 300]

    report = StatsChecker(real_redis, keys, policy=archive.policy).check()
    assert not report.ok and report.lost.missing == lost and report.lost.expired == 0
    assert report.to_dict()["detail_missing_partitions"] == runs(lost)
    assert report.differences == []  # the statistics still count them: nothing to repair there

    shown = run_cli(engine_url, namespace, "stats", "verify", **{k.upper(): str(v) for k, v in settings.items()})
    assert shown.returncode == 1 and f"detail missing: {len(lost)} partitions" in shown.stdout, shown.stdout
    assert ", ".join(runs(lost)) in shown.stdout and "Traceback" not in shown.stderr
    repaired = run_cli(engine_url, namespace, "stats", "verify", "--repair")
    assert repaired.returncode == 1 and "repair cannot restore them" in repaired.stdout, repaired.stdout

    meta = _walk(real_redis, daemon)
    assert meta["index_check_ok"] == "0"
    assert any(runs(lost)[0] in example for example in meta["index_check_examples"].split('"')), meta


def test_detail_the_summary_tier_expired_is_not_missing(real_redis: redis.Redis, namespace: str) -> None:
    daemon = _archived(real_redis, namespace, 450, compressed_from=0, summary_above=100, seal_idle_s=0)
    archive = daemon.archive
    assert archive.tier() is Tier.SUMMARY
    archive.set_retention(0)
    archive.sealing.seal_all()
    while migrate_step(archive, now=time.time() + 10):
        pass
    expired = int(real_redis.hget(daemon.keys.archive_meta, "expired") or 0)
    assert expired == 450  # every batch expired
    report = StatsChecker(real_redis, daemon.keys, policy=archive.policy).check()
    assert report.ok and report.lost.missing == [] and report.lost.expired == 450
    assert _walk(real_redis, daemon)["index_check_ok"] == "1"


def test_verify_reads_batches_by_the_stored_batch_size_whatever_is_configured(
    real_redis: redis.Redis, namespace: str, engine_url: str
) -> None:
    """Batches of 50 written; `stats verify` run without ``PARTARCHIVE_BATCH_SIZE`` (100) finds
    every record where the router finds it (it read the wrong batches before: count only)."""
    daemon = _archived(real_redis, namespace, 300, compressed_from=0, batch_size=50)
    assert daemon.archive.stored_batch_size() == 50
    report = StatsChecker(real_redis, daemon.keys).check()  # the default policy: batches of 100
    assert report.ok and report.partitions_with_detail == 300 and report.ranges_count_only == 0
    assert run_cli(engine_url, namespace, "stats", "verify").returncode == 0
    assert _walk(real_redis, daemon)["index_check_ok"] == "1"

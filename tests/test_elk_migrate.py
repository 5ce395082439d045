"""Taking over an elk_coordinator deployment, on the real engine, with the fixtures from FORMAT.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest
import redis

from archiver.config import Config
from archiver.elk.export import Exporter
from archiver.elk.migrate import ElkMigration
from archiver.router import QueryRouter, Source
from codec.elk import ElkRecord, decode_elk
from codec.elk_batch import decode_elk_batch, encode_elk_batch
from codec.gojson import GoTime
from layers import ActiveLayer, ArchiveLayer, KeySchema, WrongKeyType
from layers.elk import ElkSource, find_deployments
from stats import StatsChecker, StatsReader
from tests.elk_fixtures import delete_prefix, digest, dump_lines, load_dump
from tests.faults import pause_args
from tests.helpers import cli_env, run_cli, wait_for

COMPLETED = 3232  # 589 in the active hash, 643 in elk_archived, 2,000 in four batches (small.summary.json)


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    key_prefix = f"{namespace}:"
    yield key_prefix
    delete_prefix(real_redis, key_prefix)


def bound(prefix: str, **kw: object) -> Config:
    return Config(namespace="elk", elk_prefix=prefix, **kw)  # type: ignore[arg-type]


def test_dry_run_writes_nothing_and_counts_every_family(real_redis: redis.Redis, prefix: str) -> None:
    load_dump(real_redis, prefix)
    patterns = [f"elk:{prefix}*"]
    before = digest(real_redis, patterns)
    report = ElkMigration(real_redis, bound(prefix), prefix).run(dry_run=True)
    assert digest(real_redis, patterns) == before
    s = report.survey
    assert s["partitions"].entries == 1012 and s["partitions"].by_status["completed"] == 589
    assert dict(s["partitions"].by_status) == {
        "claimed": 8,
        "completed": 589,
        "failed": 86,
        "pending": 325,
        "running": 4,
    }
    assert s["archived"].entries == 643 and s["compressed"].entries == 2000 and s["workers"].entries == 7
    assert s["partitions"].bytes > 0 and s["partitions"].first_updated is not None


def test_migrate_then_router_statistics_verify_and_export(real_redis: redis.Redis, prefix: str) -> None:
    hashes = load_dump(real_redis, prefix)
    config = bound(prefix)
    report = ElkMigration(real_redis, config, prefix).run()
    assert report.ok and report.imported == COMPLETED and report.verified == COMPLETED
    assert dict(report.found) == {"active": 589, "archived": 643, "batch": 2000}
    assert not report.rejected and report.flagged == 0 and report.copies == 0

    router = QueryRouter(real_redis, config.keys)
    originals: dict[int, bytes] = {}
    in_active = {int(fld) for fld in hashes[f"elk:{prefix}elk_partitions"]}
    for key in (f"elk:{prefix}elk_partitions", f"elk:{prefix}elk_archived"):
        for fld, raw in hashes[key].items():
            originals[int(fld)] = raw
    batch_records = {
        e.partition_id: e
        for raw in hashes[f"elk:{prefix}elk_compressed_archive"].values()
        for e in decode_elk_batch(raw)
    }
    assert len(originals) + len(batch_records) == 3655
    for pid, raw in originals.items():
        answer = router.get(pid)
        original = decode_elk(raw)
        # the shared active hash still holds Go's completed records until --delete-source
        expected_source = Source.ACTIVE if pid in in_active else Source.SIMPLE
        assert answer.source is expected_source and answer.status == original.status
        assert ArchiveLayer(real_redis, config.keys).get_simple(pid) == (
            raw if original.status == "completed" else None
        )
        assert isinstance(answer.partition, ElkRecord) and answer.partition.to_json() == raw
    for pid, entry in batch_records.items():
        answer = router.get(pid)
        assert answer.source is Source.SIMPLE and isinstance(answer.partition, ElkRecord)
        got = answer.partition
        assert (got.min_id, got.max_id, got.updated_at.seconds) == (entry.min_id, entry.max_id, entry.updated_at)

    assert StatsReader(real_redis, config.keys).stats()["completed"]["total_completed"] == COMPLETED
    assert StatsChecker(real_redis, config.keys).check().ok

    lines = dict(Exporter(ArchiveLayer(real_redis, config.keys), "elk").records())
    assert len(lines) == COMPLETED
    full_detail = {pid: raw for pid, raw in originals.items() if decode_elk(raw).status == "completed"}
    assert len(full_detail) == 1232 and all(lines[pid] == raw for pid, raw in full_detail.items())

    again = ElkMigration(real_redis, config, prefix).run()
    assert again.imported == 0 and again.already == COMPLETED and again.ok
    assert StatsReader(real_redis, config.keys).stats()["completed"]["total_completed"] == COMPLETED


def test_delete_source_only_after_verification(real_redis: redis.Redis, prefix: str) -> None:
    load_dump(real_redis, prefix)
    config = Config(namespace=prefix.rstrip(":"))  # an unbound namespace: Go's keys stay Go's
    report = ElkMigration(real_redis, config, prefix).run(delete_source=True)
    assert report.ok and report.deleted == {"active": 589, "archived": 643, "batch": 4}
    source = ElkSource(real_redis, prefix)
    assert real_redis.exists(source.keys.archived, source.keys.compressed) == 0
    remaining = [decode_elk(v).status for v in real_redis.hvals(source.keys.partitions)]  # type: ignore[union-attr]
    assert len(remaining) == 1012 - 589 and "completed" not in remaining
    router = QueryRouter(real_redis, config.keys)
    assert router.get(1).source is Source.SIMPLE and router.get(1385).found


def test_compressed_target_seals_every_batch_once(real_redis: redis.Redis, prefix: str) -> None:
    hashes = load_dump(real_redis, prefix)
    config = bound(prefix, compressed_from=1000, summary_above=10**9)
    migration = ElkMigration(real_redis, config, prefix, chunk=300)
    report = migration.run()
    assert report.ok and report.imported == COMPLETED and report.tier == "compressed"
    seals = migration.archive.sealing.seals
    assert seals and max(seals.values()) == 1  # every batch sealed once
    archive = ArchiveLayer(real_redis, config.keys, config.policy)
    assert archive.open_batch_count() == 0 and archive.simple_size() == 0
    router = QueryRouter(real_redis, config.keys, policy=config.policy)
    archived = [int(f) for f in hashes[f"elk:{prefix}elk_archived"]]
    assert all(router.get(pid).source is Source.BATCH for pid in [*archived[:50], 1385, 2564])
    assert StatsChecker(real_redis, config.keys, policy=config.policy).check().ok
    assert len(dict(Exporter(archive, "elk").records())) == COMPLETED


@pytest.mark.chaos
@pytest.mark.parametrize("compressed_from", ["100000", "1000"])
def test_kill_9_mid_migration_then_resume(
    engine_url: str, real_redis: redis.Redis, prefix: str, compressed_from: str
) -> None:
    load_dump(real_redis, prefix)
    keys = KeySchema("elk", elk_prefix=prefix)
    env = cli_env(
        engine_url,
        "elk",
        PARTARCHIVE_ELK_PREFIX=prefix,
        PARTARCHIVE_COMPRESSED_FROM=compressed_from,
        PARTARCHIVE_MIGRATE_CHUNK="100",
    )
    migrate = ["migrate", "from-elk", "--prefix", prefix, "--no-progress"]
    victim = subprocess.Popen(
        [sys.executable, "-m", "tests.faults", *pause_args({"before_commit": 0.05}), *migrate],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: int(real_redis.bitcount(keys.index)) >= 700, what="part of the import")  # type: ignore[arg-type]
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    assert 700 <= int(real_redis.bitcount(keys.index)) < COMPLETED  # type: ignore[arg-type]
    result = subprocess.run(
        [sys.executable, "-m", "archiver", "migrate", "from-elk", "--prefix", prefix, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["imported"] + report["already_imported"] == COMPLETED and report["verified"] == COMPLETED
    assert int(real_redis.bitcount(keys.index)) == COMPLETED  # type: ignore[arg-type]
    stats = StatsReader(real_redis, keys).stats()
    assert stats["completed"]["total_completed"] == COMPLETED and stats["archive"]["archived_total"] == COMPLETED
    config = bound(prefix, compressed_from=int(compressed_from))
    assert StatsChecker(real_redis, keys, policy=config.policy).check().ok


def _record(pid: int, worker: str, updated: int = 1_751_700_000, **kw: object) -> ElkRecord:
    base = dict(
        partition_id=pid,
        min_id=pid * 10,
        max_id=pid * 10 + 9,
        worker_id=worker,
        status="completed",
        updated_at=GoTime(updated),
        created_at=GoTime(updated - 30),
        version=4,
    )
    base.update(kw)
    return ElkRecord(**base)  # type: ignore[arg-type]


def _worker_member(worker: str, registered: int, stopped: int | None = None) -> bytes:
    member = {"worker_id": worker, "register_time": GoTime(registered).format()}
    if stopped is not None:
        member["stop_time"] = GoTime(stopped).format()
    return orjson.dumps(member)


def test_hostile_deployment_gives_typed_errors_and_a_reject_list(real_redis: redis.Redis, prefix: str) -> None:
    src = ElkSource(real_redis, prefix).keys
    real_redis.zadd(src.workers, {_worker_member("w1", 1_751_600_000): 1, _worker_member("w2", 1_751_600_000): 2})
    good = encode_elk_batch([(_record(20, "w1"), 1), (_record(21, "w2"), 2)])
    # 2^32 ids: the count wraps to 0 (imported as the smallest range it allows); 23: no such range fits in int64
    cut, unfit = _record(22, "w1", min_id=-(2**32), max_id=-1), _record(23, "w1", min_id=2**63 - 9, max_id=2**63 - 10)
    wide = encode_elk_batch([(cut, 1), (unfit, 1)])
    corrupt = bytearray(good)
    at = corrupt.index(b'"compressed_data":"') + 40
    corrupt[at : at + 8] = b"AAAAAAAA"
    real_redis.hset(
        src.compressed, mapping={"b_good": good, "b_wide": wide, "b_corrupt": bytes(corrupt), "b_truncated": good[:-20]}
    )
    real_redis.hset(
        src.archived,
        mapping={
            "1": _record(1, "w1").to_json(),
            "2": _record(2, "w1", status="zombie").to_json(),
            "3": _record(3, "w1", error="x" * 70_000).to_json(),
            "4": b'{"partition_id":4,"created_at":1751730820}',
            "5": _record(2**32, "w1").to_json(),
            "6": _record(6, "").to_json(),
        },
    )
    real_redis.hset(src.partitions, mapping={"7": _record(7, "w1", status="weird").to_json()})
    config = bound(prefix)
    report = ElkMigration(real_redis, config, prefix).run(delete_source=True)
    reasons = {f"{r.source}:{r.field}": r.reason for r in report.rejected}
    assert set(reasons) == {
        "archived:2",
        "archived:4",
        "archived:5",
        "archived:6",
        "active:7",
        "batch:b_wide/23",
        "batch:b_corrupt",
        "batch:b_truncated",
    }, reasons
    assert (
        "zombie" in reasons["archived:2"]
        and "2^32" in reasons["archived:5"]
        and "32 bits" in reasons["batch:b_wide/23"]
    )
    assert report.imported == 5 and report.ok and report.widened == 1  # 1, 3 (a 70 KB error), 20, 21, 22
    stored = real_redis.hgetall(config.keys.migrate_rejects)
    assert len(stored) == len(reasons)
    assert real_redis.hexists(src.archived, "2") and not real_redis.hexists(src.archived, "1")
    assert real_redis.hexists(src.compressed, "b_corrupt") and not real_redis.hexists(src.compressed, "b_good")
    assert QueryRouter(real_redis, config.keys).get(3).partition.error == "x" * 70_000  # type: ignore[union-attr]


def test_a_key_of_the_wrong_type_is_refused_before_any_write(real_redis: redis.Redis, prefix: str) -> None:
    load_dump(real_redis, prefix)
    real_redis.delete(f"elk:{prefix}elk_archived")
    real_redis.set(f"elk:{prefix}elk_archived", "not a hash")
    config = bound(prefix)
    with pytest.raises(WrongKeyType, match="elk_archived is a string"):
        ElkMigration(real_redis, config, prefix).run()
    assert real_redis.exists(config.keys.index, config.keys.archive_meta, config.keys.completed) == 0


def test_precedence_copies_and_prefix_without_separator(real_redis: redis.Redis, namespace: str) -> None:
    prefix = f"{namespace}demo"  # like examples/monitoring: KeyPrefix pasted in with no separator
    try:
        src = ElkSource(real_redis, prefix).keys
        assert src.partitions == f"elk:{namespace}demoelk_partitions"
        real_redis.zadd(src.workers, {_worker_member("A", 1_751_600_000): 1, _worker_member("B", 1_751_600_000): 2})
        real_redis.hset(src.partitions, "1", _record(1, "A").to_json())
        real_redis.hset(src.archived, mapping={"1": _record(1, "B").to_json(), "3": _record(3, "B").to_json()})
        real_redis.hset(
            src.compressed,
            mapping={
                "x1": encode_elk_batch([(_record(2, "A"), 1), (_record(3, "A"), 1)]),
                "x2": encode_elk_batch([(_record(2, "A"), 1)]),
            },
        )
        assert prefix in find_deployments(real_redis)
        config = Config(namespace=namespace)
        report = ElkMigration(real_redis, config, prefix).run()
        assert report.imported == 3 and report.copies == 3 and report.ok
        router = QueryRouter(real_redis, config.keys)
        assert router.get(1).partition.worker_id == "A"  # type: ignore[union-attr]
        assert router.get(3).partition.worker_id == "B"  # type: ignore[union-attr]
        assert StatsReader(real_redis, config.keys).stats()["completed"]["total_completed"] == 3
    finally:
        delete_prefix(real_redis, prefix)


def test_a_range_go_cut_at_32_bits_is_imported_widened_and_flagged(
    engine_url: str, real_redis: redis.Redis, prefix: str
) -> None:
    """A batch record of 2^32 ids comes back from Go's reader with max_id below min_id, yet Go
    counts it completed: it is imported with the smallest range the batch allows, and flagged, so
    the imported count is Go's."""
    load_dump(real_redis, prefix)
    src = ElkSource(real_redis, prefix).keys
    number = len(real_redis.zrange(src.workers, 0, -1))  # the newest member, registered before 1_751_700_000
    wide = _record(20_001, "", min_id=5 * 2**32, max_id=6 * 2**32 - 1)
    real_redis.hset(src.compressed, "compressed_batch_wide", encode_elk_batch([(wide, number)]))
    (entry,) = decode_elk_batch(real_redis.hget(src.compressed, "compressed_batch_wide"))  # type: ignore[arg-type]
    assert entry.go_max_id == 5 * 2**32 - 1 and entry.widened and entry.max_id == wide.max_id
    survey = ElkMigration(real_redis, bound(prefix), prefix).run(dry_run=True).survey
    go_completed = sum(fam.by_status["completed"] for fam in survey.values())
    assert go_completed == COMPLETED + 1
    done = run_cli(engine_url, "elk", "migrate", "from-elk", "--prefix", prefix, "--elk-prefix", prefix)
    assert done.returncode == 0, done.stderr
    assert f"completed partitions found  {COMPLETED + 1}" in done.stdout
    assert "ranges widened (flagged)    1" in done.stdout
    config = bound(prefix)
    assert int(real_redis.bitcount(config.keys.index)) == go_completed  # type: ignore[arg-type]
    answer = QueryRouter(real_redis, config.keys).get(20_001)
    assert (answer.partition.min_id, answer.partition.max_id) == (5 * 2**32, 6 * 2**32 - 1)  # type: ignore[union-attr]
    flag = real_redis.hget(config.keys.migrate_flags, "20001").decode()  # type: ignore[union-attr]
    assert "2^32" in flag and f"{5 * 2**32}..{6 * 2**32 - 1}" in flag
    assert not real_redis.hexists(config.keys.migrate_rejects, "batch:compressed_batch_wide/20001")


def test_drifted_worker_numbers_are_flagged_not_attached(real_redis: redis.Redis, prefix: str) -> None:
    lines = [o for o in dump_lines() if not (o["type"] == "zset" and o["key"].endswith(":workers"))]
    workers = [o for o in dump_lines() if o["type"] == "zset" and o["key"].endswith(":workers")]
    load_dump(real_redis, prefix, lines + workers[1:])  # the first member pruned: every number shifts by one
    config = bound(prefix)
    report = ElkMigration(real_redis, config, prefix).run()
    assert report.imported == COMPLETED and report.flagged > 0
    flags = real_redis.hgetall(config.keys.migrate_flags)
    assert len(flags) == report.flagged
    pid = int(next(iter(flags)))
    answer = QueryRouter(real_redis, config.keys).get(pid)
    assert answer.partition.worker_id.startswith("unknown_worker_")  # type: ignore[union-attr]


def test_cli_lists_deployments_and_reports(engine_url: str, real_redis: redis.Redis, prefix: str) -> None:
    load_dump(real_redis, prefix)
    listed = run_cli(engine_url, "elk", "migrate", "from-elk")
    assert listed.returncode == 0 and repr(prefix) in listed.stdout
    dry = run_cli(engine_url, "elk", "migrate", "from-elk", "--prefix", prefix, "--dry-run")
    assert dry.returncode == 0 and "dry run: nothing was written" in dry.stdout and "completed 589" in dry.stdout
    missing = run_cli(engine_url, "elk", "migrate", "from-elk", "--prefix", "nope-nothing:")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    bad = run_cli(engine_url, "elk", "migrate", "from-elk", "--prefix", "a b")
    assert bad.returncode == 2 and bad.stderr.startswith("partarchive: error:") and "Traceback" not in bad.stderr
    done = run_cli(
        engine_url, "elk", "migrate", "from-elk", "--prefix", prefix, "--no-progress", "--elk-prefix", prefix
    )
    assert done.returncode == 0 and "result                      OK" in done.stdout
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{prefix.rstrip(':')}.jsonl")
    try:
        exported = run_cli(engine_url, "elk", "export", "--output", out, "--elk-prefix", prefix)
        assert exported.returncode == 0 and f"exported {COMPLETED} partitions" in exported.stderr
        with open(out, "rb") as fh:
            assert sum(1 for _ in fh) == COMPLETED
    finally:
        if os.path.exists(out):
            os.remove(out)
    wrong = run_cli(engine_url, "elk", "export", "--output", out, "--format", "xml")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr


def test_an_unwritable_output_file_is_one_line(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    ActiveLayer(real_redis, namespace).create_partitions(1, 1000, 1000)
    result = run_cli(engine_url, namespace, "export", "--output", "/nonexistent-dir/out.jsonl")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "No such file or directory" in result.stderr

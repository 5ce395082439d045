"""The cold tier's faces on the real engine, through the command line: ``run --cold-store`` refuses an
unwritable store and a password on the command line with one line (exit 2) and shows no secret;
``status`` shows the store; ``export --format parquet`` writes the whole archive (the cold store's
included) by completion day, and the DuckDB query docs/runbook.md gives counts it right."""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import redis

from layers import migrate_step
from tests.helpers import run_cli
from tests.test_cold import DAY, archive, parts_of

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-pw-417"


def test_run_refuses_an_unwritable_store_and_a_password_in_its_arguments(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("not a folder")
    refused = [
        run_cli(engine_url, namespace, "run", "--cold-store", str(tmp_path / "file" / "store")),
        run_cli(engine_url, namespace, "run", "--cold-store", f"sftp://archiver:{SECRET}@127.0.0.1:1/cold"),
        run_cli(engine_url, namespace, "run", PARTARCHIVE_COLD_STORE=f"sftp://archiver:{SECRET}@127.0.0.1:1/cold"),
        run_cli(engine_url, namespace, "run", "--cold-store", "nosuchprotocol://bucket/x"),
    ]
    for done in refused:
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert SECRET not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert "cold store" in refused[0].stderr and "cannot write" in refused[0].stderr
    assert "PARTARCHIVE_COLD_STORE" in refused[1].stderr  # where a URL with a password goes
    assert "sftp://***@127.0.0.1:1/cold" in refused[2].stderr


def test_status_shows_the_store_and_what_fails_without_a_secret(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    from tests.test_cold import cold_namespace

    ns = cold_namespace(real_redis, namespace, tmp_path)
    archive(ns, parts_of(range(1, 300), int(time.time()) - 3 * DAY))
    while migrate_step(ns.archive):
        pass
    shown = run_cli(engine_url, namespace, "status")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("cold store"))
    assert re.fullmatch(
        rf"cold store\s+{re.escape(str(tmp_path))}: 1 files, [0-9,]+ B, 299 partitions, last written .*", line
    )
    real_redis.hset(ns.keys.archive_meta, "cold_error", f"cold store ftp://u:{SECRET}@h/x: cannot write")
    shown = run_cli(engine_url, namespace, "status", "--json")
    assert SECRET not in shown.stdout
    assert "ftp://***@h/x: cannot write" in shown.stdout


def test_export_parquet_gives_every_partition_once_and_the_runbook_query_counts_them(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """Partitions in the cold store, in sealed batches and staged, exported by day; the DuckDB query of
    docs/runbook.md, run as written on the export, counts them per worker and hour as they are."""
    import duckdb

    from tests.test_cold import cold_namespace

    ns = cold_namespace(real_redis, namespace, tmp_path / "cold")
    old = parts_of(range(1, 1000), int(time.time()) - 3 * DAY)  # gone cold
    archive(ns, old)
    while migrate_step(ns.archive):
        pass
    fresh = parts_of(range(1000, 1250), int(time.time()) - 3600)  # sealed and staged, in Redis
    archive(ns, fresh)
    out = tmp_path / "export"
    done = run_cli(engine_url, namespace, "export", "--format", "parquet", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"exported {len(old) + len(fresh)} partitions (parquet)")
    days = {p.name for p in out.iterdir()}
    everyone = old + fresh
    assert days == {f"completed_day={datetime.fromtimestamp(p.completed_at, UTC):%Y-%m-%d}" for p in everyone}
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    query = re.search(r"```sql\n(.*?)```", runbook, re.S)
    assert query, "the runbook's DuckDB example"
    rows = duckdb.sql(query[1].replace("DIR/", f"{out}/")).fetchall()
    counted = {(worker, hour.astimezone(UTC).replace(tzinfo=None)): n for worker, hour, n, _ in rows}
    wanted = Counter(
        (p.worker_id, datetime.fromtimestamp(p.completed_at - p.completed_at % 3600, UTC).replace(tzinfo=None))
        for p in everyone
    )
    assert counted == dict(wanted)
    again = run_cli(engine_url, namespace, "export", "--format", "parquet", "--output", str(out))
    assert again.returncode == 2 and "not an empty directory" in again.stderr and again.stderr.count("\n") == 1


def test_get_reads_the_store_where_this_process_is_told_it_is(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """A store moved (its files copied elsewhere) is read where ``PARTARCHIVE_COLD_STORE`` says; without
    it, where the namespace keeps it, whose file is gone: the statistics answer, and say why."""
    import json
    import shutil

    from tests.test_cold import cold_namespace

    ns = cold_namespace(real_redis, namespace, tmp_path / "old")
    parts = parts_of(range(1, 300), int(time.time()) - 3 * DAY)
    archive(ns, parts)
    while migrate_step(ns.archive):
        pass
    shutil.move(tmp_path / "old", tmp_path / "new")
    moved = run_cli(engine_url, namespace, "get", "42", "--json", PARTARCHIVE_COLD_STORE=str(tmp_path / "new"))
    answer = json.loads(moved.stdout)
    assert (answer["source"], answer["partition"]["worker_id"]) == ("cold", parts[41].worker_id), moved.stderr
    stale = json.loads(run_cli(engine_url, namespace, "get", "42", "--json").stdout)
    assert (stale["source"], stale["degraded"]) == ("statistics", True) and "is missing" in stale["detail"]

"""The cold tier under kill -9 with real processes: archivers writing expired batches to a cold
store are killed with SIGKILL after a file is renamed into place and before it is recorded, after
it is recorded and before its batches leave Redis, and at a random moment; a survivor finishes.
Every partition is then answered from the cold store with the record its worker completed, field by
field; every row is in exactly one recorded file (nothing written twice), and the store holds no
file that no record names (the orphans were deleted)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import orjson
import pytest
import redis

from archiver import QueryRouter
from archiver.router import Source
from codec.page import read_payloads
from layers import KeySchema
from layers.archive.cold_store import ColdStore
from tests.helpers import AFTER_A_KILL, complete_partitions, kill_archiver_when, start_archiver, wait_for

pytestmark = pytest.mark.chaos

COUNT = 1500


def test_kills_while_batches_go_cold_lose_nothing_and_write_nothing_twice(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    keys = KeySchema(namespace)
    settings = {
        "PARTARCHIVE_COMPRESSED_FROM": "0",
        "PARTARCHIVE_SUMMARY_ABOVE": "0",
        "PARTARCHIVE_RETENTION_S": "0",  # everything expires as soon as it is sealed
        "PARTARCHIVE_SEAL_IDLE_S": "0",
        "PARTARCHIVE_COLD_STORE": str(tmp_path),
        "PARTARCHIVE_COLD_GATHER_S": "0",
        "PARTARCHIVE_COLD_FILE_BATCHES": "4",  # many small files: merges and retirements too
        **AFTER_A_KILL,
    }
    complete_partitions(real_redis, namespace, COUNT)
    cols, taken, refused = read_payloads([fields[b"p"] for _, fields in real_redis.xrange(keys.queue)])
    assert not refused and len(taken) == COUNT
    completed = {p.partition_id: p for p in cols.archived()}
    folder = tmp_path / namespace

    def files() -> list[str]:
        return sorted(os.listdir(folder)) if folder.exists() else []

    recorded = lambda: int(real_redis.hlen(keys.cold_files))  # noqa: E731
    kill_archiver_when(
        engine_url, namespace, "victim0", lambda: any(n.endswith(".parquet") for n in files()),
        "a cold file renamed into place, not recorded", pauses={"cold_written": 60}, **settings,
    )  # fmt: skip
    assert recorded() == 0 and len(files()) == 1  # the file is an orphan
    kill_archiver_when(
        engine_url, namespace, "victim1", lambda: recorded() >= 1,
        "a cold file recorded, its batches still in Redis", pauses={"cold_recorded": 60}, **settings,
    )  # fmt: skip
    left = int(real_redis.zcard(keys.expiry))
    assert left > 0  # the recorded file's batches have not left Redis
    for n in range(2):
        until = time.monotonic() + random.uniform(0.2, 1.5)
        kill_archiver_when(
            engine_url, namespace, f"victim{n + 2}", lambda until=until: time.monotonic() > until,
            "a random moment", pauses={"after_step": 0.05, "cold_written": 0.05}, **settings,
        )  # fmt: skip
    survivor = start_archiver(engine_url, namespace, "--consumer", "survivor", **settings)
    try:
        wait_for(
            lambda: (
                int(real_redis.bitcount(keys.index)) == COUNT
                and not real_redis.xlen(keys.queue)
                and not real_redis.zcard(keys.expiry)
                and not real_redis.zcard(keys.open_batches)
            ),
            timeout=90,
            what="every partition archived and gone cold",
        )
    finally:
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=30)
    assert survivor.returncode == 0, err.decode()[-2000:]

    store = ColdStore(str(tmp_path), namespace)
    listed = {int(k): orjson.loads(v) for k, v in real_redis.hgetall(keys.cold_files).items()}
    retired = {n.decode() for n in real_redis.zrange(keys.cold_retired, 0, -1)}
    names = {str(f["name"]) for f in listed.values()}
    assert set(files()) == names | retired and not names & retired  # no orphan, no temporary file left
    rows = [p for name in sorted(names) for p in store.rows_between(name, 1, COUNT).records()]
    assert sorted(p.partition_id for p in rows) == sorted(completed)  # every row once in the recorded files
    assert {p.partition_id: p for p in rows} == completed
    assert int(real_redis.hget(keys.archive_meta, "cold_partitions")) == COUNT  # type: ignore[arg-type]
    router = QueryRouter(real_redis, namespace)
    wrong = [
        (pid, answer.source.value)
        for pid in completed
        if (answer := router.get(pid)).source is not Source.COLD or answer.partition != completed[pid]
    ]
    assert wrong == [], f"{len(wrong)} partitions not answered from the cold store, e.g. {wrong[:3]}"

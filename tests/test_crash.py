"""Crash safety with real processes: an archiver killed with SIGKILL while holding entries."""

from __future__ import annotations

import signal

import pytest
import redis

from layers import ArchiveQueue, KeySchema
from tests.helpers import complete_partitions, kill_archiver_when, start_archiver, wait_for

pytestmark = pytest.mark.chaos


def test_replica_takes_over_entries_of_a_killed_archiver(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    pids = complete_partitions(real_redis, namespace, 300)
    queue = ArchiveQueue(real_redis, keys)
    kill_archiver_when(
        engine_url,
        namespace,
        "victim",
        lambda: queue.state().pending >= 100,  # the page in hand (and the next, read ahead)
        "entries delivered to the victim",
        "--read-count",
        "100",
        pauses={"after_read": 60},
    )
    assert real_redis.hlen(keys.completed) == 0

    survivor = start_archiver(engine_url, namespace, "--consumer", "survivor", "--claim-idle-ms", "500")
    try:
        wait_for(
            lambda: real_redis.hlen(keys.completed) == 300 and real_redis.xlen(keys.queue) == 0,
            what="every partition archived",
        )
        state = queue.state()
        assert state.pending == 0 and state.dead_letters == 0
        assert real_redis.bitcount(keys.index) == 300
        assert sorted(int(k) for k in real_redis.hkeys(keys.completed)) == pids
    finally:
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=15)
    assert survivor.returncode == 0
    assert b"took over idle entries" in err


def test_restart_under_the_same_name_rereads_its_own_pending(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 50)
    queue = ArchiveQueue(real_redis, keys)
    kill_archiver_when(
        engine_url,
        namespace,
        "same",
        lambda: queue.state().pending == 50,
        "entries delivered",
        pauses={"after_read": 60},
    )
    second = start_archiver(engine_url, namespace, "--consumer", "same")
    try:
        wait_for(
            lambda: real_redis.hlen(keys.completed) == 50 and queue.state().pending == 0,
            what="own pending re-read at start",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=15)
    assert real_redis.xlen(keys.queue) == 0


def test_a_stop_ends_an_injected_pause_at_once(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    """The crash tests' pause (`tests.faults`) waits on the daemon's stop: SIGTERM during a ten-minute
    pause drains at once, finishing the page in hand, well before the drain deadline."""
    keys = KeySchema(namespace)
    complete_partitions(real_redis, namespace, 20)
    queue = ArchiveQueue(real_redis, keys)
    proc = start_archiver(
        engine_url, namespace, "--consumer", "paused", pauses={"after_read": 600}, PARTARCHIVE_DRAIN_TIMEOUT_S="300"
    )
    try:
        wait_for(lambda: queue.state().pending == 20, what="a page read, then the pause")
        assert real_redis.hlen(keys.completed) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"archiver stopped" in err
    assert real_redis.hlen(keys.completed) == 20 and queue.state().pending == 0


@pytest.mark.parametrize(("tier", "settings"), [
    ("compressed", {"PARTARCHIVE_COMPRESSED_FROM": "0"}),
    ("summary", {"PARTARCHIVE_COMPRESSED_FROM": "0", "PARTARCHIVE_SUMMARY_ABOVE": "100"}),
])  # fmt: skip
def test_after_kills_in_a_batch_tier_the_router_gives_every_partitions_record_as_completed(
    engine_url: str, real_redis: redis.Redis, namespace: str, tier: str, settings: dict[str, str]
) -> None:
    """Archivers killed with SIGKILL twice while sealing batches; a survivor finishes. The index
    bits prove little on their own: every partition is asked of the router, and its record must
    be the one its worker completed, field by field."""
    from archiver import QueryRouter
    from codec import ArchivedPartition
    from codec.page import read_payloads
    from layers import ArchiveLayer, Tier

    keys = KeySchema(namespace)
    pids = complete_partitions(real_redis, namespace, 1000)
    cols, taken, refused = read_payloads([fields[b"p"] for _, fields in real_redis.xrange(keys.queue)])
    assert not refused and len(taken) == 1000
    completed = {p.partition_id: p for p in cols.archived()}  # as queued by the workers' complete()
    archived = lambda: int(real_redis.bitcount(keys.index))  # noqa: E731
    for n, when in enumerate((300, 600)):
        kill_archiver_when(
            engine_url,
            namespace,
            f"victim{n}",
            lambda when=when: archived() >= when,
            f"{when} archived",
            "--read-count",
            "100",
            "--claim-idle-ms",
            "500",
            pauses={"after_read": 0.1},
            **settings,
        )  # fmt: skip  (a pause after each page read: the kill lands between pages, seals and commits)
    survivor = start_archiver(engine_url, namespace, "--consumer", "survivor", "--claim-idle-ms", "500", **settings)
    try:
        wait_for(lambda: archived() == 1000 and real_redis.xlen(keys.queue) == 0, what="every partition archived")
    finally:
        survivor.send_signal(signal.SIGTERM)
        survivor.communicate(timeout=15)
    assert survivor.returncode == 0
    assert ArchiveLayer(real_redis, keys).tier() is Tier(tier)
    router = QueryRouter(real_redis, namespace)
    wrong = []
    for pid in pids:
        answer = router.get(pid)
        got = answer.partition
        if not isinstance(got, ArchivedPartition) or answer.degraded or got != completed[pid]:  # every field
            wrong.append((pid, answer.source.value, got))
    assert wrong == [], f"{len(wrong)} partitions without their record, e.g. {wrong[:3]}"

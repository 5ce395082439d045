"""The archive queue's contract on every engine (`any_redis`: fakeredis, the real engine, a local
cluster): delivery, an archiver's own pending entries, take-over only past the idle time, its
state, and the dead letters (listed, found by id, requeued once, purged by age)."""

from __future__ import annotations

import redis

from codec.page import read_payloads
from layers import ArchiveLayer, ArchiveQueue, KeySchema
from layers.archive.commit import Uncommitted
from layers.archive.queue import QueueEntry
from layers.plumbing.replies import as_text
from stats.rollup import committer as archive_committer
from tests.helpers import complete_partitions


def _queue_of(client: redis.Redis, namespace: str, completions: int) -> ArchiveQueue:
    complete_partitions(client, namespace, completions)
    queue = ArchiveQueue(client, KeySchema.of(namespace, client=client))
    queue.ensure_group()
    return queue


def test_entries_are_delivered_once_each_in_order(any_redis: redis.Redis, namespace: str) -> None:
    queue = _queue_of(any_redis, namespace, 7)
    first, second = queue.read_new("a", 4, 0), queue.read_new("b", 4, 0)
    assert [len(first), len(second)] == [4, 3]
    ids = [e.entry_id for e in first + second]
    assert len(set(ids)) == 7 and ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    assert queue.read_new("a", 4, 0) == []  # nothing new: no second delivery
    assert all(e.payload and e.deliveries == 1 for e in first + second)


def test_an_archiver_restarted_under_its_name_reads_its_own_pending_again(
    any_redis: redis.Redis, namespace: str
) -> None:
    queue = _queue_of(any_redis, namespace, 5)
    held = queue.read_new("same", 3, 0)
    again = queue.read_own_unacknowledged("same", 10)
    assert [e.entry_id for e in again] == [e.entry_id for e in held]
    assert queue.read_own_unacknowledged("other", 10) == []
    assert queue.state().pending == 3 and queue.state().lag == 2


def test_take_over_waits_for_the_idle_time(any_redis: redis.Redis, namespace: str) -> None:
    queue = _queue_of(any_redis, namespace, 3)
    held = queue.read_new("dead", 3, 0)
    assert queue.take_over("live", 3_600_000, 10) == []  # not idle for an hour yet
    taken = queue.take_over("live", 0, 10)
    assert sorted(e.entry_id for e in taken) == sorted(e.entry_id for e in held)
    assert all(e.deliveries == 2 for e in taken)
    assert queue.read_own_unacknowledged("dead", 10) == []  # they are the live archiver's now
    assert len(queue.read_own_unacknowledged("live", 10)) == 3


def test_the_state_counts_length_pending_lag_and_dead_letters(any_redis: redis.Redis, namespace: str) -> None:
    queue = _queue_of(any_redis, namespace, 6)
    state = queue.state()
    assert (state.length, state.pending, state.lag, state.dead_letters) == (6, 0, 6, 0)
    entries = queue.read_new("a", 2, 0)
    state = queue.state()
    assert (state.length, state.pending, state.lag) == (6, 2, 4)
    assert state.oldest_pending_age_s >= 0
    queue.dead_letter(entries[0], "bad payload")
    state = queue.state()
    assert (state.length, state.pending, state.dead_letters) == (5, 1, 1)


def test_dead_letters_are_listed_found_requeued_once_and_purged(any_redis: redis.Redis, namespace: str) -> None:
    queue = _queue_of(any_redis, namespace, 3)
    entries = queue.read_new("a", 3, 0)
    for entry, why in zip(entries, ("one", "two", "three"), strict=True):
        queue.dead_letter(entry, why)
    letters = queue.dead_letters()
    assert [d["reason"] for d in letters] == ["one", "two", "three"]
    assert queue.dead_letter_by_id(letters[1]["id"])["reason"] == "two"  # type: ignore[index]
    assert queue.dead_letter_by_id("1-1") is None
    assert queue.requeue([letters[0]["id"], "1-1"]) == (1, 1)  # an unknown id is skipped
    assert queue.requeue([letters[0]["id"]]) == (0, 1)  # requeued once: it is gone
    requeued = queue.read_new("b", 10, 0)
    assert len(requeued) == 1 and requeued[0].payload == entries[0].payload
    assert queue.purge_dead_letters(older_than_ms=3_600_000) == 0  # none is an hour old
    assert queue.purge_dead_letters() == 2 and queue.dead_letters() == []


def test_a_dead_letter_without_a_payload_is_kept_but_never_requeued(any_redis: redis.Redis, namespace: str) -> None:
    queue = ArchiveQueue(any_redis, KeySchema.of(namespace, client=any_redis))
    queue.ensure_group()
    queue.dead_letter(QueueEntry("0-1", b""), "nothing to archive")
    [letter] = queue.dead_letters()
    assert letter["reason"] == "nothing to archive" and not letter["requeueable"]
    assert queue.requeue([letter["id"]]) == (0, 1)
    assert queue.state().dead_letters == 1 and queue.state().length == 0


def test_a_commit_takes_its_entries_out_of_the_queue_whichever_way_and_nothing_else(
    any_redis: redis.Redis, namespace: str
) -> None:
    """A commit whose entries all lie before the oldest pending one trims the queue's head; one
    with entries after it (an older page pending elsewhere), or with nothing left pending, deletes
    its own: either way exactly its entries leave, and pending and unread ones stay."""
    queue = _queue_of(any_redis, namespace, 12)
    committer = archive_committer(ArchiveLayer(any_redis, queue.keys))
    a, b = queue.read_new("a", 4, 0), queue.read_new("b", 4, 0)

    def commit(entries: list[QueueEntry]) -> None:
        committer.commit(Uncommitted.of([(e.entry_id, read_payloads([e.payload])[0].archived()[0]) for e in entries]))

    def left() -> list[str]:
        return [as_text(entry_id) for entry_id, _ in any_redis.xrange(queue.keys.queue)]  # type: ignore[union-attr]

    unread = left()[8:]
    commit(a)  # before b, the oldest pending: trimmed
    assert left() == [e.entry_id for e in b] + unread and queue.state().pending == 4
    c = queue.read_new("c", 4, 0)
    commit(c)  # after b, still pending: deleted one by one
    assert left() == [e.entry_id for e in b] and queue.state().pending == 4
    again = queue.read_own_unacknowledged("b", 10)  # b's entries are whole and still b's
    assert [(e.entry_id, e.payload) for e in again] == [(e.entry_id, e.payload) for e in b]
    commit(b)  # nothing pending after: deleted
    assert left() == [] and queue.state().pending == 0

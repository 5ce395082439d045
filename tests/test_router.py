"""The query router v0: each layer that can answer, corrupt detail, not found, bad input; blocking
and on asyncio (`flavour`)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from archiver import ArchiverDaemon, Config, QueryRouter, Source
from archiver.daemon.loop import drain
from codec import ValidationError
from layers import ActiveLayer, KeySchema
from layers.plumbing import scripts
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import library
from tests.flavours import Flavour
from tests.helpers import commands_sent


@pytest.fixture
def world(any_redis: redis.Redis, namespace: str, flavour: Flavour) -> tuple[ActiveLayer, QueryRouter, ArchiverDaemon]:
    active = flavour.active(any_redis, namespace)
    daemon = ArchiverDaemon(any_redis, Config(namespace=namespace, block_ms=10), consumer="t")
    return active, flavour.router(any_redis, namespace), daemon


def test_answers_from_each_layer(world: tuple[ActiveLayer, QueryRouter, ArchiverDaemon]) -> None:
    active, router, daemon = world
    active.create_partitions(1, 3000, 1000)
    active.claim("w")
    active.complete(1, "w")
    queued = router.get(1)
    assert (queued.source, queued.status, queued.degraded) == (Source.QUEUE, "completed", True)
    drain(daemon)
    archived = router.get(1)
    assert archived.source is Source.SIMPLE and not archived.degraded
    assert archived.partition is not None and archived.partition.to_dict()["worker_id"] == "w"
    pending = router.get(2)
    assert (pending.source, pending.status) == (Source.ACTIVE, "pending")
    missing = router.get(4)
    assert not missing.found and missing.source is Source.NONE
    assert missing.to_dict()["found"] is False


def test_corrupt_archived_record_degrades_not_raises(
    world: tuple[ActiveLayer, QueryRouter, ArchiverDaemon], any_redis: redis.Redis, namespace: str
) -> None:
    _, router, _ = world
    keys = KeySchema.of(namespace, client=any_redis)
    any_redis.hset(keys.completed, "9", b"\x00garbage")
    any_redis.setbit(keys.index, 9, 1)
    answer = router.get(9)
    assert answer.found and answer.degraded and answer.partition is None
    assert router.decode_failures == 1


def test_index_without_detail_is_degraded(
    world: tuple[ActiveLayer, QueryRouter, ArchiverDaemon], any_redis: redis.Redis, namespace: str
) -> None:
    _, router, _ = world
    any_redis.setbit(KeySchema.of(namespace, client=any_redis).index, 12, 1)
    answer = router.get(12)
    assert answer.source is Source.EXPIRED and answer.degraded and "expired" in answer.detail


@pytest.mark.parametrize("pid", [0, -3, 2**32, "7", 1.0, None])
def test_bad_ids_raise_validation_error(world: tuple[ActiveLayer, QueryRouter, ArchiverDaemon], pid: object) -> None:
    _, router, _ = world
    with pytest.raises(ValidationError):
        router.get(pid)  # type: ignore[arg-type]


def test_a_lookup_is_one_round_trip_before_any_batch_size_is_stored(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> None:
    """A namespace no archiver has run on yet stores no batch size: the router uses its policy's
    without asking for the stored one separately on every lookup."""
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(1, 3000, 1000)
    router = flavour.router(real_redis, namespace)
    assert router.get(2).source is Source.ACTIVE
    assert not real_redis.hexists(KeySchema(namespace).archive_meta, "batch_size")
    sent = commands_sent(monkeypatch)
    for pid in (1, 2, 3):
        assert router.get(pid).source is Source.ACTIVE
    assert sent == ["FCALL"] * 3  # the lookup, a function of the library (`layers.plumbing.scripts`)


def test_a_server_that_refuses_the_library_answers_lookups_from_the_script(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> None:
    """A replica, a server past its maxmemory or an ACL may refuse FUNCTION LOAD: the lookup, which
    writes nothing, then runs as its script there (once found, without asking again); the library
    registers it ``no-writes``, so where the library is loaded it runs wherever the script would."""
    monkeypatch.setattr(scripts, "LANE_CONNECTIONS", 0)  # the client's own way, whose replies are refused here
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(1, 3000, 1000)
    router = flavour.router(real_redis, namespace)
    assert router.get(2).source is Source.ACTIVE  # the library loaded
    flags = {
        as_text(f[b"name"]): {as_text(x) for x in f[b"flags"]}
        for lib in real_redis.function_list(library().name)
        for f in map(_fields, _fields(lib)[b"functions"])
    }
    assert flags[library().function("lookup")] == {"no-writes"} and flags[library().function("claim")] == set()
    sent: list[str] = []
    client = flavour.async_client(real_redis) if flavour.is_async else real_redis
    send = client.execute_command

    def refusing(*args: object, **options: object) -> object:
        sent.append(str(args[0]))
        if args[0] == "FCALL":
            error: Exception = ResponseError("Function not found")
        elif args[0] == "FUNCTION LOAD":
            error = ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
        else:
            return send(*args, **options)
        if not flavour.is_async:
            raise error

        async def refused() -> object:
            raise error

        return refused()

    monkeypatch.setattr(client, "execute_command", refusing)
    for pid in (1, 2, 3):
        assert router.get(pid).source is Source.ACTIVE
    assert sent[:2] == ["FCALL", "FUNCTION LOAD"] and sent[-3:] == ["EVALSHA"] * 3
    assert set(sent[2:]) <= {"EVALSHA", "SCRIPT LOAD"}  # loaded where the server had not seen the script
    if not flavour.is_async:
        with pytest.raises(ResponseError, match="OOM"):  # a worker's step writes: refused, as its script would be
            active.claim("w1")


def _fields(entry: Any) -> dict[bytes, Any]:
    """A FUNCTION LIST entry as a mapping (RESP3 gives one, RESP2 a flat list of names and values)."""
    return entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))

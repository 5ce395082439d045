"""Redis Sentinel for real: the settings, the CLI and the archiver through the sentinels of a local
setup (a primary, a replica, three sentinels, all with passwords), and a failover (kill -9 of the
primary mid-run) with nothing acknowledged-and-replicated lost and nothing counted twice.

Every process here gets a Redis URL that points nowhere (``UNUSED_URL``): with ``--sentinel`` the
URL is not used. No output of any of them may show a password.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio

from archiver import AsyncQueryRouter
from archiver.cli.main import main
from archiver.config import Config, parse_addresses
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.engine import async_twin
from archiver.engine.local_sentinel import LocalSentinel, free_ports
from codec.errors import PartArchiveError, ValidationError
from layers import ActiveLayer, ArchiveLayer, KeySchema
from layers.active.sdk_async import AsyncActiveLayer
from layers.control.liveness import Liveness
from stats import StatsChecker, StatsReader
from tests.conftest import DATA_PASSWORD, SENTINEL_PASSWORD, delete_namespace, sentinel_server
from tests.helpers import (
    RouterWatch,
    complete_partitions,
    free_port,
    run_cli,
    start_archiver,
    start_server,
    stop_process,
    wait_for,
)

UNUSED_URL = "redis://:url-pw-never-used@127.0.0.1:9/0"
PASSWORDS = {"PARTARCHIVE_REDIS_PASSWORD": DATA_PASSWORD, "PARTARCHIVE_SENTINEL_PASSWORD": SENTINEL_PASSWORD}
SECRETS = (DATA_PASSWORD, SENTINEL_PASSWORD, "url-pw-never-used")


def _flags(setup: LocalSentinel, master: str | None = None) -> list[str]:
    return ["--sentinel", setup.addresses, "--sentinel-master", master or setup.master_name]


def _no_secret(*outputs: str) -> None:
    for out in outputs:
        for secret in SECRETS:
            assert secret not in out, f"a password in the output: {out[:500]}"


def _one_line(done: subprocess.CompletedProcess[str] | pytest.CaptureResult[str]) -> str:
    """The one line of an error: of a process that exited 2, or printed by `main` (its 2 checked by the caller)."""
    if isinstance(done, subprocess.CompletedProcess):
        assert done.returncode == 2, done
        out, err = done.stdout, done.stderr
    else:
        out, err = done.out, done.err
    assert err.count("\n") == 1 and err.startswith("partarchive: ") and "Traceback" not in err, err
    _no_secret(out, err)
    return err


def test_the_settings_are_checked_and_keep_their_passwords_to_themselves() -> None:
    assert parse_addresses("a:1, 10.0.0.5:26379,[::1]:26380") == [("a", 1), ("10.0.0.5", 26379), ("::1", 26380)]
    for bad in ("a", "a:0", "a:70000", "a:1,", ":1", "redis://a:1"):
        with pytest.raises(ValidationError, match="host:port"):
            Config(sentinel=bad, sentinel_master="m")
    with pytest.raises(ValidationError, match="exclude each other"):
        Config(sentinel="a:1", sentinel_master="m", cluster=True)
    with pytest.raises(ValidationError, match="--sentinel-master"):
        Config(sentinel="a:1")
    with pytest.raises(ValidationError, match="needs --sentinel"):
        Config(sentinel_master="m")
    env = {"PARTARCHIVE_SENTINEL": "a:1,b:2", "PARTARCHIVE_SENTINEL_MASTER": "m", **PASSWORDS}
    config = Config.from_env(env, sentinel_master="flag-wins")
    assert config.sentinels == [("a", 1), ("b", 2)] and config.sentinel_master == "flag-wins"
    assert config.redis_password == DATA_PASSWORD and config.sentinel_password == SENTINEL_PASSWORD
    _no_secret(repr(config), str(config))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["status", "--sentinel", "127.0.0.1"], "host:port"),
        (["status", "--sentinel", "127.0.0.1:1,nohost:99999", "--sentinel-master", "m"], "host:port"),
        (["status", "--sentinel", "127.0.0.1:1", "--sentinel-master", "m", "--cluster"], "exclude each other"),
        (["run", "--sentinel", "127.0.0.1:1"], "--sentinel-master"),
        (["get", "1", "--sentinel-master", "m"], "needs --sentinel"),
        (["status", "--sentinel", "redis://:url-pw-never-used@h:1", "--sentinel-master", "m"], "host:port"),
    ],
)
def test_bad_sentinel_settings_are_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PASSWORDS.items():
        monkeypatch.setenv(name, value)
    assert main(args) == 2
    assert says in _one_line(capsys.readouterr())


def test_unreachable_sentinels_are_one_line(
    namespace: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PASSWORDS.items():
        monkeypatch.setenv(name, value)
    closed = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    for command in (["status"], ["archivers"], ["retention"], ["dead-letters", "list"], ["archival", "status"]):
        assert main([*command, "--namespace", namespace, "--sentinel", closed, "--sentinel-master", "m"]) == 2
        assert f"cannot reach Sentinel at {closed.replace(',', ', ')}" in _one_line(capsys.readouterr())


@pytest.mark.sentinel
def test_status_through_the_sentinels(
    local_sentinel: LocalSentinel,
    sentinel_redis: redis.Redis,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    complete_partitions(sentinel_redis, namespace, 5)
    primary = local_sentinel.primary()
    assert primary is not None
    text = run_cli(UNUSED_URL, namespace, "status", *_flags(local_sentinel), **PASSWORDS)
    assert text.returncode == 0, text.stderr
    assert f"{primary.address} (Sentinel primary of 'partarchive', role master); 1 replica" in text.stdout
    _no_secret(text.stdout, text.stderr)
    for name, value in PASSWORDS.items():
        monkeypatch.setenv(name, value)

    def in_step() -> bool:
        assert main(["status", "--json", "--namespace", namespace, *_flags(local_sentinel)]) == 0
        out, err = capsys.readouterr()
        _no_secret(out, err)
        node = json.loads(out)["redis"]
        assert (node["mode"], node["node"], node["role"]) == ("sentinel", primary.address, "master")
        assert node["replicas"] == 1 and node["replica_nodes"][0]["address"] == local_sentinel.nodes[1].address
        return bool(node["replicas_in_step"] == 1)

    wait_for(in_step, 30, "the replica in step")
    try:
        demo = run_cli(UNUSED_URL, f"{namespace}d", "demo", "--partitions", "50", "--workers", "2", "--json",
                       *_flags(local_sentinel), **PASSWORDS)  # fmt: skip
    finally:
        delete_namespace(sentinel_redis, f"{namespace}d")
    assert demo.returncode == 0 and json.loads(demo.stdout)["ok"], demo.stdout + demo.stderr
    _no_secret(demo.stdout, demo.stderr)


@pytest.mark.sentinel
def test_every_reading_command_and_serve_through_the_sentinels(
    local_sentinel: LocalSentinel,
    sentinel_redis: redis.Redis,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    complete_partitions(sentinel_redis, namespace, 5)
    drain(ArchiverDaemon(sentinel_redis, Config(namespace=namespace, block_ms=10), consumer="drain"))
    capsys.readouterr()
    for name, value in {"REDIS_URL": UNUSED_URL, "PARTARCHIVE_NAMESPACE": namespace, **PASSWORDS}.items():
        monkeypatch.setenv(name, value)
    flags = _flags(local_sentinel)
    for command, shows in (
        (["get", "3", "--json"], '"source": "archive:simple"'),
        (["stats", "--json"], '"total_completed": 5'),
        (["stats", "verify"], "5 partitions indexed"),
        (["export", "--format", "native", "--output", "-"], '"partition_id":5'),
        (["archivers", "--all", "--json"], "drain"),
        (["retention"], "86400"),
        (["dead-letters", "list"], ""),
        (["archival", "status", "--json"], '"paused": false'),
        (["migrate", "from-elk", "--json"], '"deployments": []'),  # none there: exit 1
    ):
        code = main([*command, *flags])
        out, err = capsys.readouterr()
        assert code == (1 if command[0] == "migrate" else 0) and shows in out, (command, code, out, err)
        _no_secret(out, err)
    port = free_port()
    server = start_server(UNUSED_URL, namespace, port, *flags)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            assert http.get("/partitions/3").json()["source"] == "archive:simple"
            assert http.get("/stats").json()["completed"]["total_completed"] == 5
            _no_secret(http.get("/metrics").text, http.get("/dashboard/overview").text)
    finally:
        err = stop_process(server)
    assert "Traceback" not in err
    _no_secret(err)


@pytest.mark.sentinel
def test_lookups_beyond_the_pools_connections_wait_through_the_sentinels(
    sentinel_redis: redis.Redis, namespace: str
) -> None:
    """As `tests.test_read_lane`'s: the API's client of a Sentinel master waits for a connection of
    its pool (4 here, for 40 lookups at once) instead of failing."""
    created = list(ActiveLayer(sentinel_redis, namespace).create_partitions(1, 40_000, 1000))

    async def main() -> list[int]:
        client = async_twin(sentinel_redis, 4)
        assert isinstance(client, redis.asyncio.Redis) and client.connection_pool.max_connections == 4
        router = AsyncQueryRouter(client, namespace)
        try:
            answers = await asyncio.gather(*(router.get(pid) for pid in created))
            return [answer.partition.partition_id for answer in answers if answer.partition]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == created


@pytest.mark.sentinel
def test_wrong_names_and_passwords_are_one_line(
    local_sentinel: LocalSentinel, namespace: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_master = run_cli(UNUSED_URL, namespace, "status", *_flags(local_sentinel, "nosuchmaster"), **PASSWORDS)
    assert "monitors a master named 'nosuchmaster'" in _one_line(wrong_master)
    for sentinel_pw, data_pw, says in (
        ("wrong-sentinel-pw", DATA_PASSWORD, "refused the password (PARTARCHIVE_SENTINEL_PASSWORD)"),
        (SENTINEL_PASSWORD, "wrong-data-pw", "refused the password (PARTARCHIVE_REDIS_PASSWORD)"),
    ):
        monkeypatch.setenv("PARTARCHIVE_SENTINEL_PASSWORD", sentinel_pw)
        monkeypatch.setenv("PARTARCHIVE_REDIS_PASSWORD", data_pw)
        assert main(["get", "1", "--namespace", namespace, *_flags(local_sentinel)]) == 2
        line = _one_line(capsys.readouterr())
        assert says in line and "wrong-sentinel-pw" not in line and "wrong-data-pw" not in line


@pytest.mark.sentinel
def test_run_processes_passes_the_sentinels_to_its_children(
    local_sentinel: LocalSentinel, sentinel_redis: redis.Redis, namespace: str
) -> None:
    complete_partitions(sentinel_redis, namespace, 300)
    keys = KeySchema(namespace)
    supervisor = start_archiver(
        UNUSED_URL, namespace, "--processes", "2", "--log-level", "debug", *_flags(local_sentinel), **PASSWORDS
    )
    try:
        wait_for(lambda: len(Liveness(sentinel_redis, keys).archivers()) == 2, 60, "two archivers through Sentinel")
        wait_for(lambda: ArchiveLayer(sentinel_redis, keys).archived_total() == 300, 60, "everything archived")
    finally:
        err = stop_process(supervisor)
    assert supervisor.returncode == 0 and "Traceback" not in err, err[-2000:]
    _no_secret(err)


class _Awaitable:
    """The blocking SDK behind coroutine methods: one worker loop drives either flavour."""

    def __init__(self, sdk: ActiveLayer) -> None:
        self.sdk = sdk

    async def claim(self, worker_id: str) -> Any:
        return self.sdk.claim(worker_id)

    async def complete(self, pid: int, worker_id: str) -> Any:
        return self.sdk.complete(pid, worker_id)

    async def size(self) -> int:
        return self.sdk.size()


def _worker_sdk(setup: LocalSentinel, namespace: str, flavour: str) -> Any:
    """The worker SDK of ``flavour`` through the sentinels: `ActiveLayer` (behind `_Awaitable`) or
    `AsyncActiveLayer` on the asyncio twin of the Sentinel client (its failover window included)."""
    if flavour == "blocking":
        return _Awaitable(ActiveLayer(setup.client(), namespace, lease_timeout=2.0))
    return AsyncActiveLayer(async_twin(setup.client()), namespace, lease_timeout=2.0)


@pytest.mark.chaos
@pytest.mark.sentinel
@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_a_call_in_flight_across_a_promotion_waits_for_it(namespace: str, flavour: str) -> None:
    """Sent once the primary is dead and before a replica is promoted, a worker's call returns once
    the promotion is done, on either flavour (the failover window of `archiver.engine.sentinel`)."""
    setup = LocalSentinel(binary=sentinel_server(), password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD)
    with setup:
        ActiveLayer(setup.client(), namespace).create_partitions(1, 100, 10)

        async def across() -> tuple[int, int]:
            sdk = _worker_sdk(setup, namespace, flavour)
            assert await sdk.size() == 10  # connected to the first primary
            victim = setup.primary()
            assert victim is not None
            wait_for(lambda: setup.replicated(victim), 60, "the replica in step")
            setup.kill(victim)
            assert not setup.promoted(victim)
            return await sdk.size(), len(await asyncio.gather(sdk.claim("w"), sdk.claim("w")))

        assert asyncio.run(across()) == (10, 2)
        heir = setup.primary()
        assert heir is not None and heir.alive()


@pytest.mark.chaos
@pytest.mark.sentinel
@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_a_primary_failover_loses_nothing_and_counts_once(namespace: str, flavour: str) -> None:
    total = 1200
    setup = LocalSentinel(binary=sentinel_server(), password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD)
    with setup:
        client = setup.client()
        sdk = ActiveLayer(client, namespace, lease_timeout=2.0)
        sdk.create_partitions(1, total * 10, 10)
        metrics_port = free_port()
        archiver = start_archiver(
            UNUSED_URL, namespace, *_flags(setup), "--metrics-port", str(metrics_port),
            PARTARCHIVE_CLAIM_IDLE_MS="2000", **PASSWORDS,
        )  # fmt: skip
        completed = 0
        errors: list[str] = []
        stop, killed = threading.Event(), threading.Event()

        async def work_awaited() -> None:
            nonlocal completed
            worker = _worker_sdk(setup, namespace, flavour)
            while not stop.is_set():
                if completed >= 2 * total // 3 and not killed.is_set():
                    killed.wait(120)  # held here until the kill, so that it lands mid-run however slow the machine
                elif completed >= total // 3 and not killed.is_set():
                    await asyncio.sleep(0.01)  # slowed down until the kill, so that completions are in flight
                try:
                    part = await worker.claim("w")
                    if part is None:
                        if await worker.size() == 0:
                            return
                        await asyncio.sleep(0.2)  # a lease lost with the old primary expires
                        continue
                    await worker.complete(part.partition_id, "w")
                    completed += 1
                except (redis.RedisError, PartArchiveError) as exc:  # beyond the client's retries; try again
                    errors.append(type(exc).__name__)
                    await asyncio.sleep(0.1)

        def work() -> None:
            asyncio.run(work_awaited())

        thread = threading.Thread(target=work)
        archive = ArchiveLayer(client, sdk.keys)
        watch = RouterWatch(setup.client(), namespace, range(1, total + 1), awaited=flavour == "asyncio")
        try:
            with watch:
                thread.start()
                wait_for(lambda: completed >= total // 3 and archive.archived_total() > 0, 60, "a third of the work")
                victim = setup.primary()
                assert victim is not None
                # The replica is in step up to the last few milliseconds, as in a healthy deployment, so what
                # the kill loses is the writes of that window, as with any asynchronous replication
                # (docs/sentinel.md); they are done again.
                wait_for(lambda: setup.replicated(victim), 60, "the replica in step")
                setup.kill(victim)
                killed_at = time.monotonic()
                killed.set()
                assert completed < total  # mid-run
                wait_for(lambda: setup.promoted(victim), 30, "the promotion")
                promoted_s = time.monotonic() - killed_at
                passes = watch.passes
                thread.join(120)
                assert not thread.is_alive(), "the worker did not finish"
                try:
                    wait_for(lambda: archive.archived_total() == total, 60, "every partition archived")
                    wait_for(lambda: client.xlen(sdk.keys.queue) == 0, 30, "the queue drained")
                except AssertionError as exc:
                    state = f"archived {archive.archived_total()}, queue {client.xlen(sdk.keys.queue)}"
                    raise AssertionError(f"{exc}: {state}; archiver log: {stop_process(archiver)[-3000:]}") from None
                wait_for(lambda: watch.passes >= passes + 2, 60, "the router asked about every partition again")
            assert watch.lost == []  # the router answered for every partition throughout
            assert watch.lane_kept == (1 if flavour == "asyncio" else 0)  # the asyncio one on its lane
            scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
            assert f'namespace="{namespace}"' in scraped
            _no_secret(scraped)
        finally:
            stop.set()
            err = stop_process(archiver) if archiver.poll() is None else ""
        assert "Traceback" not in err
        _no_secret(err)
        assert archive.indexed(list(range(1, total + 1))) == [True] * total  # nothing lost
        assert StatsReader(client, sdk.keys).stats()["completed"]["total_completed"] == total  # nothing counted twice
        assert StatsChecker(client, sdk.keys).check().ok
        assert client.xlen(sdk.keys.dead_letter) == 0
        verify = run_cli(UNUSED_URL, namespace, "stats", "verify", *_flags(setup), **PASSWORDS)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        status = run_cli(UNUSED_URL, namespace, "status", "--json", *_flags(setup), **PASSWORDS)
        assert status.returncode == 0, status.stderr
        heir = setup.primary()
        assert heir is not None and json.loads(status.stdout)["redis"]["node"] == heir.address
        _no_secret(verify.stdout, verify.stderr, status.stdout, status.stderr)
        raised = f"{len(errors)} worker calls raised ({errors[:5]})"
        print(f"failover ({flavour}): promoted {promoted_s:.1f} s after the kill; {raised}")
        client.close()

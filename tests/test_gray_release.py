"""The gray release (issue 37): a share of the partitions has its completions archived, the rest
held in the active hash as a pause holds them; raising the share releases the held ones now in
it through the exactly-once path, a pause wins while set."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import pytest
import redis

from archiver.cli.main import main
from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.engine import async_twin
from archiver.engine.local_sentinel import LocalSentinel
from archiver.router import QueryRouter
from codec import ValidationError
from layers import ActiveLayer, ArchiveLayer, AsyncActiveLayer, KeySchema
from layers.control.switch import ArchivalSwitch, share_bucket
from stats import StatsChecker, StatsReader
from tests.helpers import AFTER_A_KILL, RouterWatch, cli_env, run_cli, scraped, start_archiver, stop_process, wait_for
from tests.test_archival import _Workers
from tests.test_sentinel import PASSWORDS, UNUSED_URL, _flags


def _complete(layer: ActiveLayer, count: int) -> tuple[list[int], list[int]]:
    """Claim and complete ``count`` partitions; returns the pids archived and those held."""
    archived, held = [], []
    for _ in range(count):
        part = layer.claim("w")
        assert part is not None
        done = layer.complete(part.partition_id, "w")
        assert not done.already_completed
        (held if done.held else archived).append(part.partition_id)
    return archived, held


def _within_binomial(hits: int, n: int, share: int) -> None:
    p = share / 100
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(hits - n * p) <= 4 * sigma + 1, (hits, n, share)


def test_a_share_archives_its_share_then_more_then_all(real_redis: redis.Redis, namespace: str) -> None:
    n = 900
    layer = ActiveLayer(real_redis, namespace)
    keys = layer.keys
    pids = layer.create_partitions(1, 3 * n * 10, 10)
    switch = ArchivalSwitch(real_redis, keys)
    router = QueryRouter(real_redis, keys)
    assert switch.rollout(10) == 0
    archived, held = _complete(layer, n)
    _within_binomial(len(archived), n, 10)
    assert all(share_bucket(p) < 10 for p in archived) and all(share_bucket(p) >= 10 for p in held)  # Lua = Python
    assert all(router.get(p).found for p in pids[:n])
    state = switch.state()
    assert (state.share, state.held, state.released, state.paused) == (10, len(held), 0, False)

    now_in = [p for p in held if share_bucket(p) < 50]
    assert switch.rollout(50) == len(now_in)  # the held ones now in the share, released
    assert switch.state().held == len(held) - len(now_in) and switch.state().released == len(now_in)
    assert not any(real_redis.hexists(keys.active, p) for p in now_in)
    archived50, held50 = _complete(layer, n)
    _within_binomial(len(archived50), n, 50)
    assert all(router.get(p).found for p in pids[: 2 * n])

    assert switch.rollout(100) == len(held) - len(now_in) + len(held50)
    _archived100, held100 = _complete(layer, n)
    assert not held100 and switch.state().held == 0
    assert real_redis.getdel(keys.archival_paused) is None  # a share of 100 is no switch at all
    queued = [int(json.loads(f[b"p"])["partition_id"]) for _, f in real_redis.xrange(keys.queue)]
    assert sorted(queued) == list(pids)  # each once, none lost
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    assert ArchiveLayer(real_redis, keys).archived_total() == len(pids) and real_redis.hlen(keys.active) == 0
    assert StatsReader(real_redis, keys).stats()["completed"]["total_completed"] == len(pids)
    assert all(router.get(p).found for p in pids)


def test_lowering_the_share_changes_only_later_completions(any_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(any_redis, namespace)
    layer.create_partitions(1, 4000, 10)
    switch = ArchivalSwitch(any_redis, layer.keys)
    switch.rollout(60)
    _archived, held = _complete(layer, 100)
    queue = any_redis.xlen(layer.keys.queue)
    assert switch.rollout(20) == 0
    assert any_redis.xlen(layer.keys.queue) == queue and switch.state().held == len(held)
    later, later_held = _complete(layer, 200)
    assert all(share_bucket(p) < 20 for p in later) and all(share_bucket(p) >= 20 for p in later_held)
    gauges = scraped(any_redis, layer.keys)
    assert gauges["partarchive_archival_share"] == 20
    assert gauges["partarchive_archival_held"] == len(held) + len(later_held)


def test_a_pause_wins_over_the_share_and_resume_goes_back_to_it(any_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(any_redis, namespace)
    layer.create_partitions(1, 4000, 10)
    switch = ArchivalSwitch(any_redis, layer.keys)
    switch.rollout(30)
    switch.pause("tester")
    archived, held = _complete(layer, 150)
    assert not archived and any_redis.xlen(layer.keys.queue) == 0
    assert switch.rollout(70) == 0  # stored, nothing released while paused
    state = switch.state()
    assert (state.paused, state.share, state.by, state.effective_share) == (True, 70, "tester", 0)
    switch.pause("someone else")
    assert switch.state().by == "tester" and switch.state().share == 70
    in_share = [p for p in held if share_bucket(p) < 70]
    assert switch.resume() == len(in_share)
    state = switch.state()
    assert (state.paused, state.share, state.held) == (False, 70, len(held) - len(in_share))
    later, later_held = _complete(layer, 100)
    assert all(share_bucket(p) < 70 for p in later) and all(share_bucket(p) >= 70 for p in later_held)


@pytest.mark.parametrize("bad", [-1, 101, "50", 12.5, True, None])
def test_a_share_out_of_range_or_not_a_number_is_refused(fake_redis: redis.Redis, namespace: str, bad: object) -> None:
    switch = ArchivalSwitch(fake_redis, KeySchema(namespace))
    with pytest.raises(ValidationError, match="percent"):
        switch.rollout(bad)  # type: ignore[arg-type]
    assert fake_redis.get(switch.keys.archival_paused) is None


def test_the_command_line(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 2000, 10)
    for bad in ("abc", "101", "-5", "7.5"):
        out = run_cli(engine_url, namespace, "archival", "rollout", bad)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "PERCENT must be" in out.stderr, out.stderr
    assert real_redis.get(layer.keys.archival_paused) is None
    set_ = run_cli(engine_url, namespace, "archival", "rollout", "25")
    assert set_.returncode == 0 and "archival share set to 25%" in set_.stdout, set_.stderr
    archived, held = _complete(layer, 120)
    status = json.loads(run_cli(engine_url, namespace, "archival", "status", "--json").stdout)
    assert (status["share"], status["held"], status["released"]) == (25, len(held), 0)
    assert "share 25% of the partitions" in run_cli(engine_url, namespace, "archival", "status").stdout
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    report = json.loads(run_cli(engine_url, namespace, "archival", "report", "--json").stdout)
    assert report["share"] == 25 and report["held"] == len(held)
    assert report["cohorts"]["archived"]["completions"] == len(archived)
    assert report["cohorts"]["held"]["completions"] == len(held)
    assert (
        report["cohorts"]["held"]["bytes_per_partition"] > 0
        and report["cohorts"]["archived"]["bytes_per_partition"] > 0
    )
    assert report["cohorts"]["held"]["lookups_sampled"] > 0 and report["cohorts"]["archived"]["lookups_sampled"] > 0
    text = run_cli(engine_url, namespace, "archival", "report")
    assert text.returncode == 0 and "complete() p99" in text.stdout and "all_active" in text.stdout


def test_kill_9_of_the_cli_and_of_the_archiver_in_the_middle_of_a_share_change(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    n = 4000
    keys = KeySchema(namespace)
    layer = ActiveLayer(real_redis, namespace)
    pids = layer.create_partitions(1, n * 10, 10)
    archive = ArchiveLayer(real_redis, keys)
    switch = ArchivalSwitch(real_redis, keys)
    switch.rollout(0)
    _complete(layer, n // 2)  # held, every one
    archiver = start_archiver(engine_url, namespace, "--consumer", "first", **AFTER_A_KILL)
    try:
        with RouterWatch(real_redis, namespace, pids) as watch, _Workers(real_redis, namespace, 2, 0.002) as workers:
            cli = subprocess.Popen([sys.executable, "-m", "archiver", "archival", "rollout", "80"],
                                   env=cli_env(engine_url, namespace), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)  # fmt: skip
            wait_for(lambda: switch.state().released > 0, 60, "the rollout releasing")
            cli.kill()  # kill -9 of the CLI while it releases
            cli.wait(10)
            wait_for(lambda: archive.archived_total() > 0, 60, "the archiver archiving released ones")
            archiver.kill()  # kill -9 of the archiver with released entries in flight
            archiver.wait(10)
            archiver = start_archiver(engine_url, namespace, "--consumer", "second", **AFTER_A_KILL)
            wait_for(lambda: not layer.counts()["pending"], 120, "the workers done")
        assert not workers.errors, workers.errors[:3]
        in_share = sum(share_bucket(p) < 80 for p in pids)
        # the lock holder releases what the killed rollout left
        wait_for(lambda: archive.archived_total() == in_share, 120, "the share archived")
        assert switch.state().held == n - in_share
        released_before = switch.state().released
        # the archiver, lock holder, may release some of them too: each is released once, by one of the two
        assert 0 <= switch.rollout(100) <= n - in_share
        wait_for(lambda: archive.archived_total() == n, 120, "everything archived")
        assert switch.state().released - released_before == n - in_share and switch.state().held == 0
    finally:
        err = stop_process(archiver)
    assert "Traceback" not in err
    assert not watch.lost, watch.lost[:5]
    assert real_redis.bitcount(keys.index) == n and real_redis.hlen(keys.active) == 0
    assert StatsReader(real_redis, keys).stats()["completed"]["total_completed"] == n  # counted once
    assert StatsChecker(real_redis, keys).check().ok
    assert switch.state().released >= n // 2 and real_redis.xlen(keys.queue) == 0


def test_the_asyncio_sdk_holds_and_archives_by_the_share(server_redis: redis.Redis, namespace: str) -> None:
    twin = async_twin(server_redis)

    async def main() -> tuple[list[int], list[int]]:
        sdk = AsyncActiveLayer(twin, namespace)
        await sdk.create_partitions(1, 400 * 10, 10)
        archived, held = [], []
        while (part := await sdk.claim("w")) is not None:
            done = await sdk.complete(part.partition_id, "w")
            (held if done.held else archived).append(part.partition_id)
        await twin.aclose()
        return archived, held

    switch = ArchivalSwitch(server_redis, KeySchema.of(namespace, client=server_redis))
    switch.rollout(40)
    archived, held = asyncio.run(main())
    _within_binomial(len(archived), 400, 40)
    assert all(share_bucket(p) < 40 for p in archived) and all(share_bucket(p) >= 40 for p in held)
    assert switch.rollout(100) == len(held) and switch.state().held == 0


@pytest.mark.sentinel
def test_a_rollout_through_the_sentinels(
    local_sentinel: LocalSentinel,
    sentinel_redis: redis.Redis,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = ActiveLayer(sentinel_redis, namespace)
    layer.create_partitions(1, 3000, 10)
    for name, value in {"REDIS_URL": UNUSED_URL, **PASSWORDS}.items():
        monkeypatch.setenv(name, value)
    flags = ["--namespace", namespace, *_flags(local_sentinel)]
    assert main(["archival", "rollout", "30", *flags]) == 0
    archived, held = _complete(layer, 300)
    _within_binomial(len(archived), 300, 30)
    capsys.readouterr()
    assert main(["archival", "status", "--json", *flags]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["share"], status["held"]) == (30, len(held))
    assert main(["archival", "rollout", "100", *flags]) == 0
    assert ArchivalSwitch(sentinel_redis, layer.keys).state().held == 0

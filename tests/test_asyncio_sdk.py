"""What only the asyncio SDK and router can show: many tasks of one event loop sharing one
`AsyncActiveLayer`, the server's clock and a coroutine clock, scripts loaded again after the server
forgot them, and lookups that read nothing through a blocking client. (Every other case of the SDK
and the router runs on both flavours in the contract suite: the `flavour` fixture.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import fakeredis
import fakeredis.aioredis
import pytest
import redis
import redis.cluster

from archiver import AsyncQueryRouter, Source
from archiver.engine import async_twin
from codec import ArchivedPartition
from layers import ArchiveLayer, ArchiveQueue, AsyncActiveLayer, KeySchema, PartitionNotFound, Tier, TierPolicy
from layers.active.clock import AsyncServerClock
from stats.rollup import commit_buffer
from tests.conftest import delete_namespace

T = TypeVar("T")
NOW = 1_763_900_000


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def twin(server_redis: redis.Redis) -> Iterator[Any]:
    """An asyncio client of the test's server (the real engine or the local cluster)."""
    yield async_twin(server_redis)


def test_tasks_of_one_loop_claim_each_partition_once(twin: Any, namespace: str) -> None:
    async def main() -> list[int]:
        sdk = AsyncActiveLayer(twin, namespace)
        await sdk.create_partitions(1, 300 * 10, 10)
        claimed: list[int] = []

        async def worker(name: str) -> None:
            while (part := await sdk.claim(name)) is not None:
                claimed.append(part.partition_id)
                await sdk.start(part.partition_id, name)
                await sdk.complete(part.partition_id, name)

        await asyncio.gather(*(worker(f"w{i}") for i in range(32)))
        assert await sdk.size() == 0
        await twin.aclose()
        return claimed

    assert sorted(run(main())) == list(range(1, 301))


def test_concurrent_completes_of_one_partition_append_one_entry(
    twin: Any, server_redis: redis.Redis, namespace: str
) -> None:
    async def main() -> list[bool]:
        sdk = AsyncActiveLayer(twin, namespace)
        await sdk.create_partitions(1, 1000, 1000)
        await sdk.claim("w")
        done = await asyncio.gather(*(sdk.complete(1, "w") for _ in range(16)))
        with pytest.raises(PartitionNotFound):
            await sdk.heartbeat(1, "w")
        await twin.aclose()
        return [d.already_completed for d in done]

    assert sorted(run(main())) == [False] + [True] * 15
    assert server_redis.xlen(KeySchema.of(namespace, client=server_redis).queue) == 1


def test_leases_use_the_servers_clock_whatever_the_hosts_say(real_redis: redis.Redis, namespace: str) -> None:
    twin = async_twin(real_redis)

    async def main() -> None:
        behind = AsyncActiveLayer(twin, namespace, clock=AsyncServerClock(twin, local=lambda: time.time() - 3600))
        ahead = AsyncActiveLayer(twin, namespace, clock=AsyncServerClock(twin, local=lambda: time.time() + 3600))
        await behind.create_partitions(1, 2000, 1000)
        part = await behind.claim("slow-clock")
        assert part is not None
        server_now = (await twin.time())[0]
        assert abs(part.claimed_at - server_now) <= 2  # the server's time, not an hour ago
        taken = await ahead.claim("fast-clock")  # an hour ahead: by its own clock the lease above is long stale
        assert taken is not None and taken.partition_id == 2
        held = await behind.get(1)
        assert held is not None and held.worker_id == "slow-clock"
        await twin.aclose()

    run(main())


def test_a_coroutine_clock_is_awaited(fake_redis: redis.Redis, namespace: str) -> None:
    async def main() -> None:
        client = fakeredis.aioredis.FakeRedis(server=fake_redis.connection_pool.connection_kwargs["server"])
        readings = []

        async def clock() -> float:
            readings.append(NOW)
            return float(NOW)

        sdk = AsyncActiveLayer(client, namespace, clock=clock)
        await sdk.create_partitions(1, 1000, 1000)
        part = await sdk.claim("w")
        assert part is not None and part.claimed_at == NOW and len(readings) == 2
        await client.aclose()

    run(main())


def test_scripts_load_again_after_the_server_forgot_them(fake_redis: redis.Redis, namespace: str) -> None:
    """After SCRIPT FLUSH (on fakeredis: never on a shared server) the next call loads its script."""

    async def main() -> None:
        client = fakeredis.aioredis.FakeRedis(server=fake_redis.connection_pool.connection_kwargs["server"])
        sdk = AsyncActiveLayer(client, namespace)
        await sdk.create_partitions(1, 2000, 1000)
        await client.script_flush()
        part = await sdk.claim("w")
        assert part is not None and (await sdk.complete(part.partition_id, "w")).archived is not None
        await client.aclose()

    run(main())


def _parts(pids: range) -> list[ArchivedPartition]:
    return [ArchivedPartition(p, p * 10, p * 10 + 9, f"w{p % 3}", NOW + p, 7) for p in pids]


def test_lookups_read_nothing_through_a_blocking_client(server_redis: redis.Redis, namespace: str) -> None:
    """Every kind of answer, the worker registry read again and the statistics fallback: all on the
    asyncio client, while any command sent by a blocking client would fail the test."""
    keys = KeySchema.of(namespace, client=server_redis)
    ArchiveQueue(server_redis, keys).ensure_group()
    summary = TierPolicy(compressed_from=0, summary_above=0, seal_idle_s=0, retention_s=10**9)
    archive = ArchiveLayer(server_redis, keys, summary)
    parts = _parts(range(100, 300))
    archive.write_detail(parts, tier=Tier.SUMMARY)  # two whole batches: sealed at once, noted in the expiry index
    commits = commit_buffer(archive, flush_count=1000)
    commits.add([("-", p) for p in parts])
    commits.flush()
    archive.stage(_parts(range(300, 301)))
    twin = async_twin(server_redis)

    async def main() -> dict[int, Any]:
        kept = AsyncQueryRouter(twin, keys, policy=summary)
        expired = AsyncQueryRouter(twin, keys, policy=TierPolicy(compressed_from=0, summary_above=0, retention_s=0))
        asked = {pid: await kept.get(pid) for pid in (150, 300, 999)}
        asked[250] = await expired.get(250)  # past its retention: the range's statistics answer
        await twin.aclose()
        return asked

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a blocking client was used: {args[1:2]}")

    with pytest.MonkeyPatch.context() as patch:
        for cls in (redis.Redis, redis.RedisCluster):
            patch.setattr(cls, "execute_command", refuse)
        for cls in (redis.client.Pipeline, redis.cluster.ClusterPipeline):
            patch.setattr(cls, "execute", refuse)
        answers = run(main())
    assert answers[150].source is Source.BATCH and answers[150].partition == parts[50]
    assert answers[300].source is Source.STAGING and answers[999].source is Source.NONE
    assert answers[250].source is Source.STATISTICS and answers[250].summary is not None
    assert answers[250].summary["partition_count"] == 200  # range 0 (pids 0..999) holds all 200


def test_a_coroutine_summary_lookup_is_awaited(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    real_redis.setbit(keys.index, 12, 1)  # archived, detail gone
    twin = async_twin(real_redis)

    async def main() -> Any:
        async def summary(pid: int) -> dict[str, Any]:
            await asyncio.sleep(0)
            return {"range": pid // 1000}

        answer = await AsyncQueryRouter(twin, namespace, summary_lookup=summary).get(12)
        await twin.aclose()
        return answer

    answer = run(main())
    assert answer.source is Source.STATISTICS and answer.summary == {"range": 0}


def test_a_cancelled_complete_hands_its_latencies_to_the_next(fake_redis: redis.Redis, namespace: str) -> None:
    """complete() carries the latencies observed since it last handed any to Redis; a call
    cancelled while it waits for Redis completed nothing, so the next one carries them instead."""

    async def main() -> dict[bytes, bytes]:
        client: Any = fakeredis.aioredis.FakeRedis(server=fake_redis.connection_pool.connection_kwargs["server"])
        sdk = AsyncActiveLayer(client, namespace, clock=lambda: float(NOW))
        await sdk.create_partitions(1, 3000, 1000)
        for _ in range(3):
            await sdk.claim("w")
        await sdk.complete(1, "w")  # its latency waits for the next completion
        sent, fcall = asyncio.Event(), client.fcall

        async def no_reply(*args: Any, **kwargs: Any) -> Any:
            sent.set()
            await asyncio.Event().wait()

        client.fcall = no_reply
        cancelled = asyncio.create_task(sdk.complete(2, "w"))
        await sent.wait()
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        client.fcall = fcall
        await sdk.complete(3, "w")
        latencies: dict[bytes, bytes] = await client.hgetall(sdk.keys.complete_latency)
        await client.aclose()
        return latencies

    latencies = run(main())
    assert sum(int(v) for k, v in latencies.items() if k.startswith(b"b")) == 1  # the first completion's


def _readme_asyncio_example(url: str, namespace: str, partitions: int) -> str:
    """The README's asyncio worker, on this engine and namespace, over fewer partitions."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("```python", readme.index("The same worker on asyncio"))
    code = readme[start + len("```python") : readme.index("```", start + 3)]
    code = code.replace('"redis://localhost:6379/0"', repr(url)).replace('namespace="elk"', f"namespace={namespace!r}")
    assert "1, 3_000_000, 1000" in code
    return code.replace("1, 3_000_000, 1000", f"1, {partitions * 1000}, 1000")


def test_the_readmes_asyncio_example_runs_its_200_tasks(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    """redis-py's default pool refuses a client's 101st connection, so 200 tasks on a client made
    with `Redis.from_url` fail at once; the README's example sets a pool that makes them wait."""

    async def process(min_id: int, max_id: int) -> None:
        await asyncio.sleep(0.001)

    code = _readme_asyncio_example(engine_url, namespace, 400)
    plain = code.replace("redis.asyncio.Redis(connection_pool=pool)", f"redis.asyncio.Redis.from_url({engine_url!r})")
    with pytest.raises(redis.exceptions.MaxConnectionsError):  # what the README warns of
        exec(compile(plain, "README.md", "exec"), {"process": process, "__name__": "readme"})
    delete_namespace(real_redis, namespace)
    exec(compile(code, "README.md", "exec"), {"process": process, "__name__": "readme"})
    keys = KeySchema(namespace)
    assert real_redis.hlen(keys.active) == 0
    assert ArchiveQueue(real_redis, keys).state().length == 400  # every partition completed once, by the 200 tasks

"""The worker runtime's kept connections (`layers.plumbing.scripts.KeptConnection`, `AsyncKeptConnection`,
driven by `SyncLane` and `AsyncLane`): calls of many tasks pipelined into few writes, an error reply
failing its call alone, a connection cut short failing what waits without sending it again, and the
connection working again afterwards; on the real engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from archiver.engine import async_twin
from layers import ActiveLayer, AsyncActiveLayer
from layers.plumbing.scripts import AsyncKeptConnection, KeptConnection
from layers.plumbing.steps import Send


def test_tasks_calls_go_together_on_one_connection(real_redis: redis.Redis, namespace: str) -> None:
    ActiveLayer(real_redis, namespace).create_partitions(1, 400, 10)

    async def main() -> tuple[list[int], int]:
        twin = async_twin(real_redis)
        sdk = AsyncActiveLayer(twin, namespace)
        await sdk.get(1)  # the clock synced
        lane = await sdk._io.lane()
        writes: list[int] = []
        conn = lane.kept.conn  # type: ignore[attr-defined]
        original = conn.send_packed_command

        async def counted(command: Any, check_health: bool = True) -> None:
            writes.append(1)
            await original(command, check_health)

        conn.send_packed_command = counted
        try:
            got = await asyncio.gather(*(lane.run(sdk._claim_and_start(f"w{i}")) for i in range(40)))
        finally:
            await lane.close()
            await twin.aclose()
        return sorted(p.partition_id for p in got if p is not None), len(writes)

    claimed, writes = asyncio.run(main())
    assert claimed == list(range(1, 41))  # each claimed once
    # 40 calls (and a library load) in a few writes, as many as the server's replies came back in
    # while calls were waiting (5 on a quiet machine, 6 seen under load): far from one a call
    assert writes <= 10, writes


def test_an_error_reply_fails_its_call_alone(real_redis: redis.Redis) -> None:
    async def main() -> list[Any]:
        twin = async_twin(real_redis)
        kept = await AsyncKeptConnection.take(twin.connection_pool)
        try:
            return await asyncio.gather(
                kept.send(Send("ping", ())), kept.send(Send("fcall", ("no_such_function", 0))),
                kept.send(Send("echo", ("after",))), return_exceptions=True,
            )  # fmt: skip
        finally:
            await kept.close()
            await twin.aclose()

    pong, refused, echoed = asyncio.run(main())
    assert pong is True or pong == b"PONG"
    assert isinstance(refused, redis.ResponseError) and "Function not found" in str(refused)
    assert echoed == b"after"


def test_a_cut_connection_fails_what_waits_and_is_used_again(real_redis: redis.Redis, namespace: str) -> None:
    key = f"{namespace}_list"

    async def main() -> tuple[list[Any], Any, int]:
        twin = async_twin(real_redis)
        kept = await AsyncKeptConnection.take(twin.connection_pool)
        try:
            me = await kept.send(Send("client", ("ID",)))
            waiting = [asyncio.ensure_future(kept.send(Send("blpop", (key, 5)))),
                       asyncio.ensure_future(kept.send(Send("rpush", (key, "x"))))]  # fmt: skip
            await asyncio.sleep(0.2)
            real_redis.client_kill_filter(_id=me)
            failed = await asyncio.gather(*waiting, return_exceptions=True)
            again = await kept.send(Send("echo", ("again",)))
            return failed, again, int(real_redis.llen(key))
        finally:
            await kept.close()
            await twin.aclose()

    failed, again, pushed = asyncio.run(main())
    assert all(isinstance(f, redis.ConnectionError) for f in failed), failed
    assert again == b"again" and pushed == 0  # the push behind the blocked pop was not sent again


def test_a_blocking_kept_connection_is_used_again_after_a_cut(real_redis: redis.Redis) -> None:
    kept = KeptConnection(real_redis.connection_pool)
    try:
        me = kept.send(Send("client", ("ID",)))
        real_redis.client_kill_filter(_id=me)
        with pytest.raises(redis.ConnectionError):
            kept.send(Send("echo", ("lost",)))
        assert kept.send(Send("echo", ("again",))) == b"again"
    finally:
        kept.close()

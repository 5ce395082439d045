"""A namespace bound to an elk_coordinator KeyPrefix is found from its name alone; a contradicting
prefix is refused in one line; a reading command pointed at a namespace of which the server holds
nothing says so."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import orjson
import pytest
import redis

from archiver import Config
from archiver.namespace import Namespace
from codec import ValidationError
from layers import KeySchema
from tests.elk_fixtures import delete_prefix
from tests.go_worker import GoWorker
from tests.helpers import run_cli, start_archiver, wait_for


@pytest.fixture
def prefix(real_redis: redis.Redis, namespace: str) -> Iterator[str]:
    yield f"go-{namespace}:"
    delete_prefix(real_redis, f"go-{namespace}:", namespace)


def test_an_adopted_deployment_is_found_from_the_namespace_alone(
    engine_url: str, real_redis: redis.Redis, namespace: str, prefix: str
) -> None:
    go = GoWorker(real_redis, prefix, "go-host-1")
    go.create(2)
    part = go.claim()
    assert part is not None and part.partition_id == 1
    go.start(1)
    go.complete(1)
    bound = KeySchema(namespace, elk_prefix=prefix)
    daemon = start_archiver(
        engine_url, namespace, "--adopt-elk", "--elk-prefix", prefix, PARTARCHIVE_ADOPT_INTERVAL_S="0.2"
    )
    try:
        wait_for(lambda: real_redis.getbit(bound.index, 1) == 1, what="the Go completion adopted")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    assert daemon.returncode == 0
    assert real_redis.get(KeySchema(namespace).elk_binding) == prefix.encode()

    found = run_cli(engine_url, namespace, "get", "1")
    assert found.returncode == 0, found.stderr
    assert "completed" in found.stdout and "go-host-1" in found.stdout
    assert run_cli(engine_url, namespace, "get", "1", "--elk-prefix", prefix).returncode == 0
    assert run_cli(engine_url, namespace, "get", "2").stdout.startswith("partition 2: pending")  # Go's active hash
    status = run_cli(engine_url, namespace, "status", "--json")
    assert status.returncode == 0 and orjson.loads(status.stdout)["archive"]["archived_total"] == 1

    other = run_cli(engine_url, namespace, "get", "1", "--elk-prefix", "other:")
    assert other.returncode == 2 and other.stderr.count("\n") == 1
    assert f"is bound to elk_coordinator KeyPrefix {prefix!r}, not 'other:'" in other.stderr
    assert run_cli(engine_url, namespace, "run", "--elk-prefix", "other:").returncode == 2  # refused at start


def test_binding_is_kept_once_and_a_different_one_refused(real_redis: redis.Redis, namespace: str) -> None:
    first = Namespace.bound(real_redis, Config(namespace=namespace, elk_prefix="a:"))
    first.remember_binding()
    first.remember_binding()  # the same again: nothing changes
    assert Namespace.bound(real_redis, Config(namespace=namespace)).config.elk_prefix == "a:"
    with pytest.raises(ValidationError, match="bound to elk_coordinator KeyPrefix 'a:', not 'b:'"):
        Namespace.bound(real_redis, Config(namespace=namespace, elk_prefix="b:"))
    with pytest.raises(ValidationError, match="bound to elk_coordinator KeyPrefix 'a:', not 'b:'"):
        Namespace(real_redis, Config(namespace=namespace, elk_prefix="b:")).remember_binding()
    assert Namespace.bound(real_redis, Config(namespace=f"{namespace}x")).config.elk_prefix is None


@pytest.mark.parametrize(
    "args",
    [["get", "1"], ["status"], ["stats"], ["stats", "verify"], ["export", "--output", "-"], ["archivers"],
     ["dead-letters", "list"], ["retention"]],
)  # fmt: skip
def test_a_namespace_with_no_keys_is_no_such_namespace(engine_url: str, namespace: str, args: list[str]) -> None:
    result = run_cli(engine_url, namespace, *args)
    assert result.returncode == 1
    assert result.stderr == f"partarchive: no such namespace {namespace!r} on this server\n"
    assert result.stdout == ""

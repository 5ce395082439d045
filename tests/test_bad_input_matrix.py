"""Every kind of tampered state, through every face (SDK, CLI, HTTP), on the real engine:
a typed error or an answer, never a traceback, never an HTTP 500; the asyncio SDK and router
answer each call as the blocking ones do (the same typed error, or none)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from archiver import Config
from archiver.cli import main
from archiver.daemon.loop import ArchiverDaemon, drain
from archiver.web import create_app
from codec import PartArchiveError
from layers import ActiveLayer, KeySchema
from layers.plumbing.key_types import KEY_TYPES
from stats import StatsReader
from tests.conftest import delete_namespace
from tests.flavours import Flavour
from tests.helpers import complete_partitions

Tamper = Callable[[redis.Redis, KeySchema], object]


def _set(key: str, field: str, value: str) -> Tamper:
    return lambda client, keys: client.hset(getattr(keys, key), field, value)


def _retype(name: str, kind: str) -> Tamper:
    def tamper(client: redis.Redis, keys: KeySchema) -> None:
        key = getattr(keys, name)
        client.delete(key)
        if kind == "hash":
            client.rpush(key, "x")
        else:
            client.hset(key, "x", "y")

    return tamper


TAMPERS: dict[str, Tamper] = {
    "meta total abc": _set("archive_meta", "total", "abc"),
    "meta tier bogus": _set("archive_meta", "tier", "bogus"),
    "meta batch_size abc": _set("archive_meta", "batch_size", "abc"),
    "meta batch_size 0": _set("archive_meta", "batch_size", "0"),
    "meta retention soon": _set("archive_meta", "retention_s", "soon"),
    "meta max_pid -": _set("archive_meta", "max_pid", "-"),
    "range_width 0": _set("stats_meta", "range_width", "0"),
    "range_width abc": _set("stats_meta", "range_width", "abc"),
    "stats completed x": _set("stats_global", "completed", "x"),
    "active field abc": _set("active", "abc", "{}"),
    **{f"{name} is not a {kind}": _retype(name, kind) for name, kind in KEY_TYPES},
}


def _sdk_calls(client: redis.Redis, keys: KeySchema, flavour: Flavour) -> dict[str, Callable[[], Any]]:
    active = flavour.active(client, keys)
    router = flavour.router(client, keys)
    calls: dict[str, Callable[[], Any]] = {
        "create": lambda: active.create_partitions(10**6, 10**6 + 9, 10),
        "claim": lambda: active.claim("w2"),
        "heartbeat": lambda: active.heartbeat(2, "w"),
        "fail": lambda: active.fail(2, "w", "boom"),
        "retry_failed": active.retry_failed,
        "complete": lambda: active.complete(3, "w"),
        "get": lambda: active.get(2),
        "counts": active.counts,
        "size": active.size,
        "page": lambda: active.page(limit=5),
        "all_active": active.all_active,
        "iter_active": lambda: list(active.iter_active()),
        "is_completed": lambda: active.is_completed(1),
        "router": lambda: router.get(1),
        "router, active": lambda: router.get(2001),
    }
    if not flavour.is_async:
        calls["stats"] = lambda: StatsReader(client, keys).stats()
        calls["archive"] = lambda: drain(ArchiverDaemon(client, Config(namespace=keys.namespace, block_ms=10), "m"))
    return calls


def _outcomes(calls: dict[str, Callable[[], Any]]) -> dict[str, str]:
    """Each call's outcome: ok, the typed error's class, or a defect (any other exception)."""
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "ok"
        except PartArchiveError as exc:
            out[name] = type(exc).__name__  # typed: what the SDK promises
        except Exception as exc:
            out[name] = f"defect {type(exc).__name__}: {exc}"
    return out


CLI = (
    ["status"],
    ["status", "--json"],
    ["get", "1"],
    ["stats"],
    ["stats", "verify"],
    ["archivers"],
    ["dead-letters", "list"],
    ["retention"],
    ["export", "--format", "native", "--output", "{out}"],
)
HTTP = ("/partitions/1", "/partitions/2", "/partitions/1/completed", "/partitions?limit=5", "/stats", "/readyz",
        "/metrics")


def _seed(client: redis.Redis, namespace: str) -> None:
    """A namespace with archived, queued, claimed and pending partitions."""
    complete_partitions(client, namespace, 1)
    drain(ArchiverDaemon(client, Config(namespace=namespace, block_ms=10), "seed"))
    active = ActiveLayer(client, namespace)
    active.create_partitions(2001, 4000, 1000)
    active.claim("w")
    active.claim("w")


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_no_traceback_and_no_http_500_whatever_was_tampered(
    real_redis: redis.Redis, namespace: str, engine_url: str, case: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys, twin = KeySchema(namespace), KeySchema(f"{namespace}a")  # the asyncio SDK's, tampered alike
    failures = []
    try:
        for each in (keys, twin):
            _seed(real_redis, each.namespace)
            TAMPERS[case](real_redis, each)
        blocking = _outcomes(_sdk_calls(real_redis, keys, Flavour("sync")))
        on_asyncio = Flavour("async")
        try:
            awaited = _outcomes(_sdk_calls(real_redis, twin, on_asyncio))
        finally:
            on_asyncio.close()
    finally:
        delete_namespace(real_redis, twin.namespace)
    failures += [f"SDK {name}: {outcome}" for name, outcome in blocking.items() if outcome.startswith("defect")]
    failures += [
        f"asyncio SDK {name}: {outcome}, blocking SDK: {blocking[name]}"
        for name, outcome in awaited.items()
        if outcome != blocking[name]
    ]
    monkeypatch.setenv("REDIS_URL", engine_url)
    monkeypatch.setenv("PARTARCHIVE_NAMESPACE", namespace)
    for argv in CLI:
        args = [a.format(out=tmp_path / "out.jsonl") for a in argv]
        try:
            code = main(args)
        except BaseException as exc:
            failures.append(f"CLI {' '.join(argv)}: traceback {type(exc).__name__}: {exc}")
            continue
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if line.startswith("partarchive:")]
        if "Traceback" in err or len(said) > 1 or (code not in (0, 1) and len(said) != 1):
            failures.append(f"CLI {' '.join(argv)}: exit {code}, stderr {err[-300:]!r}")
    with TestClient(create_app(real_redis, Config(namespace=namespace)), raise_server_exceptions=False) as http:
        for path in HTTP:
            answer = http.get(path)
            if answer.status_code >= 500 and answer.status_code != 503:
                failures.append(f"HTTP {path}: {answer.status_code} {answer.text[:200]}")
            elif answer.status_code == 503 and "live archiver" not in answer.text:
                failures.append(f"HTTP {path}: 503 while redis is up: {answer.text[:200]}")
    assert not failures, "\n".join(failures)

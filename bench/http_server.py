"""``python -m bench.http_server URL NAMESPACE PORT PATH``: the HTTP API with the lookup's short path
as the http section compares it (served as ``partarchive serve`` serves, through uvicorn).

PATH ``blocking``: the short path as it was before the asyncio router, the blocking `QueryRouter`
called on the event loop; ``threadpool``: the blocking router run in the thread pool (how FastAPI
runs a plain route); ``asyncio``: the app as shipped (`AsyncQueryRouter` awaited on the loop).
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from archiver import Config, QueryRouter
from archiver.engine import async_client_for, connect
from archiver.web import create_app
from archiver.web.lookup import PartitionLookupPath, answer_body
from layers import MAX_PARTITION_ID, KeySchema

_PREFIX = "/partitions/"


class BlockingLookupPath:
    """A well-formed lookup answered by the blocking router, on the loop or in the thread pool."""

    def __init__(self, app: ASGIApp, router: QueryRouter, threadpool: bool) -> None:
        self.app = app
        self.router = router
        self.threadpool = threadpool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        tail = path[len(_PREFIX) :] if path.startswith(_PREFIX) else ""
        if scope["type"] == "http" and tail.isdigit() and len(tail) <= 10 and 1 <= int(tail) <= MAX_PARTITION_ID:
            get = self.router.get
            answer = await run_in_threadpool(get, int(tail)) if self.threadpool else get(int(tail))
            status, body = answer_body(answer)
            headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def main(argv: list[str]) -> None:
    url, namespace, port, path = argv[0], argv[1], int(argv[2]), argv[3]
    client = connect(url)
    config = Config(redis_url=url, namespace=namespace)
    app = create_app(client, config, async_client=lambda: async_client_for(config))
    if path != "asyncio":
        router = QueryRouter(client, KeySchema(namespace))
        app.user_middleware = [
            Middleware(BlockingLookupPath, router=router, threadpool=path == "threadpool")
            if m.cls is PartitionLookupPath
            else m
            for m in app.user_middleware
        ]
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main(sys.argv[1:])

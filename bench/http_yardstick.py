"""``python -m bench.http_yardstick URL HASH PORT``: the lookup endpoint a user writes by hand, the http
section's yardstick.

A FastAPI app with one route, ``GET /partitions/{pid}``, answering ``HGET HASH pid`` from the original
scheme's hash of JSON records (elk_coordinator's ``elk_archived``) on a `redis.asyncio` client, the stored
bytes as the body, 404 when absent; under uvicorn as a competent user runs it: one process, uvloop,
httptools, access log off.
"""

from __future__ import annotations

import sys

import redis.asyncio
import uvicorn
from fastapi import FastAPI, Response


def app_for(url: str, key: str) -> FastAPI:
    app = FastAPI()
    client = redis.asyncio.Redis.from_url(url)

    @app.get("/partitions/{pid}")
    async def get_partition(pid: int) -> Response:
        raw = await client.hget(key, str(pid))
        if raw is None:
            return Response(b'{"detail":"not found"}', 404, media_type="application/json")
        return Response(raw, media_type="application/json")

    return app


def main(argv: list[str]) -> None:
    url, key, port = argv[0], argv[1], int(argv[2])
    uvicorn.run(
        app_for(url, key), host="127.0.0.1", port=port, loop="uvloop", http="httptools", access_log=False,
        log_level="warning",
    )  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])

"""``GET /partitions/{id}``: the router's answer as an HTTP response, and a short way to it.

The lookup is the API's hot request, and most of its time over HTTP went to the framework rather
than to the router: a thread pool hop, eight middleware layers, routing, dependency solving and
response-model validation. `PartitionLookupPath` answers a well-formed lookup as soon as the
request arrives, with the same status and bytes as the FastAPI route, which stays the documented
contract and answers everything else: ids out of range, malformed paths, and any lookup that
raises (the route runs it again and its exception handlers give the JSON error).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from archiver.output import json_bytes
from archiver.router import Answer, QueryRouter
from layers import MAX_PARTITION_ID

_LOOKUP = re.compile(r"/partitions/([0-9]{1,10})")
_JSON = (b"content-type", b"application/json")


def answer_body(answer: Answer) -> tuple[int, bytes]:
    """Status and JSON body of a lookup's answer (404 when not found)."""
    return (200 if answer.found else 404), json_bytes(answer.to_dict())


class PartitionLookupPath:
    """ASGI middleware: well-formed ``GET /partitions/{id}`` answered from the router directly."""

    def __init__(self, app: ASGIApp, router: QueryRouter) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            match = _LOOKUP.fullmatch(scope["path"])
            if match and 1 <= int(match[1]) <= MAX_PARTITION_ID:
                try:
                    status, body = answer_body(self.router.get(int(match[1])))
                except Exception:  # the route answers it again, with its error handlers
                    pass
                else:
                    await _respond(send, status, body)
                    return
        await self.app(scope, receive, send)


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers: list[Any] = [_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""``GET /partitions/{id}``: the router's answer as an HTTP response, and a short way to it.

The lookup is the API's hot request, and most of its time over HTTP went to the framework rather
than to the router: a thread pool hop, FastAPI's own middleware (error handling, telemetry, body
limit), routing, dependency solving and response-model validation. `PartitionLookupPath` answers a
well-formed lookup as soon as the request arrives, before all of it (`LookupPathApp`), with the
same status and bytes as the FastAPI route (both `lookup_body`), which stays the documented contract
and answers everything else (ids past the API's range, malformed paths).

Both await the asyncio router (`AsyncQueryRouter`): while one lookup waits for Redis the event
loop serves other requests. Each request is looked up once: when the lookup raises, the short
path answers with the app's own error mapping (`archiver.web.errors`, a defect as 500 JSON) instead
of handing the request on to the route, which would look it up again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from archiver.output import json_bytes
from archiver.router import Answer, AsyncQueryRouter
from archiver.web.errors import ErrorResponses
from codec import ValidationError

_LOOKUP = re.compile(r"/partitions/([0-9]{1,10})")
_JSON = (b"content-type", b"application/json")


async def lookup_body(routers: LoopRouters, pid: int) -> tuple[int, bytes]:
    """Status and JSON body of the lookup of ``pid`` (404 when not found). An id no partition can
    have (0, past `layers.MAX_PARTITION_ID`) is not found: the router refuses it, the one place that checks."""
    try:
        answer = await routers().get(pid)
    except ValidationError:
        answer = Answer.not_found(pid)
    return (200 if answer.found else 404), json_bytes(answer.to_dict())


class LoopRouters:
    """The app's `AsyncQueryRouter` for the running event loop, built on first use in it: an asyncio
    client's connections belong to the loop that opened them (a server runs one loop; a test
    client starts one per session)."""

    def __init__(self, make: Callable[[], AsyncQueryRouter]) -> None:
        self._make = make
        self._loop: asyncio.AbstractEventLoop | None = None
        self._router: AsyncQueryRouter | None = None

    def __call__(self) -> AsyncQueryRouter:
        loop = asyncio.get_running_loop()
        if self._router is None or loop is not self._loop:
            self._router, self._loop = self._make(), loop
        return self._router

    async def aclose(self) -> None:
        """Close the client of the running loop's router (at the app's shutdown)."""
        if self._router is not None and self._loop is asyncio.get_running_loop():
            await self._router.redis.aclose()
            self._router = self._loop = None


class LookupPathApp(FastAPI):
    """The app: a FastAPI app whose `PartitionLookupPath` answers a well-formed lookup before
    anything of FastAPI's or Starlette's runs (their ``__call__`` alone, a telemetry check that
    reads the environment and the scope's set-up, was 5% of a lookup's instructions). fastapi-offline
    builds a plain `FastAPI`; `answering_lookups_first` makes it one of these, which adds nothing
    but ``__call__`` and the `lookup_path` it asks."""

    lookup_path: PartitionLookupPath

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.lookup_path.answered(scope, receive, send):
            await super().__call__(scope, receive, send)


def answering_lookups_first(app: FastAPI, lookup_path: PartitionLookupPath) -> LookupPathApp:
    """``app`` as a `LookupPathApp` (the same object: its routes, state and settings unchanged)."""
    app.__class__ = LookupPathApp
    assert isinstance(app, LookupPathApp)
    app.lookup_path = lookup_path
    return app


class PartitionLookupPath:
    """Well-formed ``GET /partitions/{id}`` answered from the router directly, while `enabled`
    (``False``: the route answers every lookup, as it documents)."""

    def __init__(self, routers: LoopRouters, errors: ErrorResponses) -> None:
        self.routers = routers
        self.errors = errors
        self.enabled = True

    async def answered(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer the request if it is a well-formed lookup; whether it did."""
        if not self.enabled or scope["type"] != "http" or scope["method"] != "GET":
            return False
        match = _LOOKUP.fullmatch(scope["path"])
        if not match:
            return False
        try:
            status, body = await lookup_body(self.routers, int(match[1]))
        except Exception as exc:  # outside the app's error middleware: answered here, as it would
            await (await self.errors.response(exc))(scope, receive, send)
            return True
        await _respond(send, status, body)
        return True


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers: list[Any] = [_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

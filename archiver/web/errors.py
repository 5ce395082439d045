"""Errors as JSON responses ``{"error": ..., "detail": ...}``: one mapping, used by the app's
exception handlers and by the lookup's short path (`archiver.web.lookup`), so an error is answered
alike whichever of the two met it. No stack trace ever leaves the process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisClusterException
from starlette.exceptions import HTTPException as StarletteHTTPException

from codec import PartArchiveError, ValidationError
from layers import WrongKeyType
from layers.errors import ColdStoreUnavailable
from layers.plumbing.key_types import is_wrong_type

log = structlog.get_logger("partarchive.api")

#: The exceptions `ErrorResponses` answers (a request raising anything else is a defect: 500).
ANSWERED = (StarletteHTTPException, RequestValidationError, PartArchiveError, redis.RedisError, RedisClusterException)


def error_response(
    status: int, error: str, detail: Any = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": error, "detail": detail}, headers=dict(headers or {}))


class ErrorResponses:
    """The response for an exception. ``name_wrong_type`` finds the key behind a WRONGTYPE reply
    (which names none), without blocking the event loop."""

    def __init__(self, name_wrong_type: Callable[[], Awaitable[WrongKeyType]]) -> None:
        self._name_wrong_type = name_wrong_type

    def install(self, app: FastAPI) -> None:
        for kind in (*ANSWERED, Exception):
            app.add_exception_handler(kind, self.handler)

    async def handler(self, _request: Request, exc: Exception) -> JSONResponse:
        return await self.response(exc)

    async def response(self, exc: Exception) -> JSONResponse:
        if isinstance(exc, StarletteHTTPException):
            return error_response(exc.status_code, str(exc.detail).lower(), None, exc.headers)
        if isinstance(exc, RequestValidationError):
            detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
            return error_response(422, "invalid request", detail)
        if isinstance(exc, ValidationError):
            return error_response(422, "invalid request", str(exc))
        if isinstance(exc, ColdStoreUnavailable):
            log.warning("cold store unavailable", error=str(exc))
            return error_response(503, "cold store unavailable", str(exc))
        if isinstance(exc, PartArchiveError):
            log.warning("namespace data is damaged", error=str(exc))
            return error_response(409, "stored data is not what partarchive wrote", str(exc))
        if isinstance(exc, redis.RedisError):
            if is_wrong_type(exc):
                return await self.response(await self._name_wrong_type())
            log.warning("redis error", error=str(exc))
            return error_response(503, "redis unavailable", type(exc).__name__)
        if isinstance(exc, RedisClusterException):
            log.warning("redis cluster error", error=str(exc))
            return error_response(503, "redis cluster unavailable", type(exc).__name__)
        log.error("unhandled error", error=repr(exc))
        return error_response(500, "internal error")

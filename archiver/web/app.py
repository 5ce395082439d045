"""The read-only query-router HTTP API (FastAPI), with ``/metrics``, offline ``/docs`` and
``/redoc``, and the dashboard (``/``, its assets under ``/static``, its data at
``/dashboard/overview``).

Partition lookups await the asyncio router on the event loop (`archiver.web.lookup`); the other
routes are plain functions, which FastAPI runs in its thread pool. Every error is a JSON body
``{"error": ..., "detail": ...}`` with a 4xx/5xx status (`archiver.web.errors`); no stack trace
ever leaves the process.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path as FilePath
from typing import Annotated, Any

import redis
from fastapi import FastAPI, Path, Query
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pydantic import BaseModel

from archiver.config import Config
from archiver.engine import async_twin
from archiver.metrics import register_state_collector
from archiver.namespace import Namespace
from archiver.output import json_bytes
from archiver.router import AsyncQueryRouter
from archiver.version import installed_version
from archiver.web.docs import add_offline_redoc
from archiver.web.errors import ErrorResponses, error_response
from archiver.web.lookup import LookupPathApp, LoopRouters, PartitionLookupPath, answering_lookups_first, lookup_body
from archiver.web.overview import NamespaceList, collect_overview
from layers import MAX_PARTITION_ID, WrongKeyType
from layers.plumbing.key_types import wrong_type_error_steps
from layers.plumbing.runners import AsyncClient, AsyncIO
from stats.search import ACTIVE_STATUSES, Filters, Search

MAX_API_ID = 2**53
#: About how long one page of ``GET /partitions`` searches before it answers with a cursor.
SEARCH_BUDGET_S = 2.0
_JSON = "application/json"
_IDS = r"^[0-9]{1,10}(-[0-9]{1,10})?$"
_CURSOR = r"^[0-9]{1,10}\.[0-9a-f]{12}$"
_TIME = (
    r"^([0-9]{1,13}|[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?(Z|[+-][0-9]{2}:[0-9]{2})?)$"
)
STATIC = FilePath(__file__).parent / "static"


class ErrorBody(BaseModel):
    error: str
    detail: Any = None


class AnswerBody(BaseModel):
    partition_id: int
    found: bool
    status: str
    source: str
    degraded: bool
    detail: str
    partition: dict[str, Any] | None
    summary: dict[str, Any] | None


class CompletedBody(BaseModel):
    partition_id: int
    completed: bool
    archived: bool


class PageBody(BaseModel):
    items: list[dict[str, Any]]
    next_after: int | None = None
    next_cursor: str | None = None
    count: int | None = None
    searched: list[str] | None = None
    statistics: list[dict[str, Any]] | None = None
    not_searched: dict[str, int] | None = None
    scanned: list[int] | None = None
    filters: dict[str, Any] | None = None


class StatusBody(BaseModel):
    status: str


ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "stored data is not what partarchive wrote (names the key)"},
    422: {"model": ErrorBody, "description": "invalid request"},
    503: {"model": ErrorBody, "description": "Redis unavailable"},
}
API_DESCRIPTION = """Read-only answers for any partition, from whichever layer holds it.

**Large numbers.** `min_id` and `max_id` are signed 64-bit integers and are returned as exact JSON
integers, also beyond 2^53 (e.g. `9223372036854775807`). JavaScript's `JSON.parse` rounds those: parse
responses with a BigInt-aware parser (`json-bigint`, `lossless-json`) or read them in a language with
64-bit integers.

**Record formats.** A partition that came from elk_coordinator (or lives in a namespace writing Go's
format) is returned with Go's members: RFC 3339 times with their zone and nanoseconds, `version`,
`options`, `error`. Partarchive's own records have Unix-second times.
"""
PartitionId = Annotated[int, Path(ge=0, le=MAX_API_ID, description="partition id, 0 .. 2^53")]


def create_app(
    client: redis.Redis, config: Config, *, async_client: Callable[[], AsyncClient] | None = None
) -> LookupPathApp:
    """The app on ``client``; partition lookups go through an asyncio client of the same server,
    made by ``async_client`` (by default the twin of ``client``, `archiver.engine.async_twin`)
    once per event loop."""
    ns = Namespace(client, config)
    keys = ns.keys
    active = ns.active
    search = Search(client, ns.archive, ns.cold_reads, budget_s=SEARCH_BUDGET_S)
    make_client = async_client or (lambda: async_twin(client, config.redis_pool_connections))
    routers = LoopRouters(lambda: AsyncQueryRouter(make_client(), keys, policy=ns.archive.policy, cold=ns.cold_reads))

    async def name_wrong_type() -> WrongKeyType:
        return await AsyncIO(routers().redis).run(wrong_type_error_steps(keys))

    errors = ErrorResponses(name_wrong_type)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        collector = register_state_collector(ns.archive)
        try:
            routers()  # this loop's router, built now: its series are exported before the first lookup
            gc.collect()
            gc.freeze()  # the start-up's objects (FastAPI, pydantic, routes) stay out of every later collection
            yield
        finally:
            REGISTRY.unregister(collector)
            await routers.aclose()

    app: FastAPI = FastAPIOffline(
        title="partarchive query router",
        version=installed_version(),
        lifespan=lifespan,
        description=API_DESCRIPTION,
        static_url="/static/docs",
        redoc_url=None,
    )
    add_offline_redoc(app, favicon_url="/static/docs/favicon.png")
    app.mount("/static/dashboard", StaticFiles(directory=STATIC), name="dashboard")
    errors.install(app)
    namespaces = NamespaceList(ns)

    @app.get(
        "/partitions/{partition_id}",
        response_model=AnswerBody,
        responses={404: {"model": AnswerBody, "description": "no such partition"}, **ERRORS},
    )
    async def get_partition(partition_id: PartitionId) -> Any:
        """Where the partition is: its record and the layer that answered."""
        status, body = await lookup_body(routers, partition_id)
        return Response(body, status, media_type="application/json")

    @app.get("/partitions/{partition_id}/completed", response_model=CompletedBody, responses=ERRORS)
    def is_completed(partition_id: PartitionId) -> Any:
        """Has the partition completed? Answered from the bitmaps, O(1)."""
        if not 1 <= partition_id <= MAX_PARTITION_ID:
            return {"partition_id": partition_id, "completed": False, "archived": False}
        pipe = client.pipeline(transaction=False)
        pipe.getbit(keys.done, partition_id)
        pipe.getbit(keys.index, partition_id)
        done, archived = pipe.execute()
        return {"partition_id": partition_id, "completed": bool(done or archived), "archived": bool(archived)}

    @app.get("/partitions", response_model=PageBody, responses=ERRORS)
    def list_partitions(
        status: Annotated[
            str | None,
            Query(description="pending, claimed, running, failed, completed, a comma list of them, or any"),
        ] = None,
        after: Annotated[int, Query(ge=0, le=MAX_API_ID, description="without search filters: the last pid seen")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        worker: Annotated[str | None, Query(max_length=256, description="completed (or worked on) by this worker")] = (
            None
        ),
        completed_after: Annotated[
            str | None,
            Query(pattern=_TIME, description="completed at this time or later: ISO 8601 or unix seconds"),
        ] = None,
        completed_before: Annotated[
            str | None, Query(pattern=_TIME, description="completed before this time: ISO 8601 or unix seconds")
        ] = None,
        min_duration: Annotated[int | None, Query(ge=0, description="took at least this many seconds")] = None,
        max_duration: Annotated[int | None, Query(ge=0, description="took at most this many seconds")] = None,
        ids: Annotated[str | None, Query(pattern=_IDS, description="partition ids A-B (or one id)")] = None,
        cursor: Annotated[str | None, Query(pattern=_CURSOR, description="a page's next_cursor: the next page")] = None,
    ) -> Any:
        """Without search filters: the active partitions in pid order, ``limit`` at a time (``status``
        one of pending, claimed, running, failed); pass ``next_after`` to get the next page.

        With any of ``worker``, ``completed_after``, ``completed_before``, ``min_duration``,
        ``max_duration``, ``ids``, ``cursor``, or a ``status`` of completed (or several, or any): a
        search of every layer in pid order, as ``partarchive find``. Its page says which layers it
        searched (``searched``), gives the ranges whose detail has expired as counts from the
        statistics instead of rows (``statistics``), counts the completions it cannot search yet
        (``not_searched``: in the archive queue, or held by a pause), and ends after ``limit``
        partitions or about two seconds of work: pass ``next_cursor`` (with the same filters) for the
        next page; none means the search is done."""
        searching = any(v is not None for v in (worker, completed_after, completed_before, min_duration, max_duration,
                                                ids, cursor))  # fmt: skip
        if not searching and (status is None or status in ACTIVE_STATUSES):
            items, next_after = active.page(status=status, after=after, limit=limit)
            body = {"items": [p.to_dict() for p in items], "next_after": next_after}
            return Response(json_bytes(body), media_type=_JSON)
        filters = Filters.parse(
            worker=worker,
            completed_after=completed_after,
            completed_before=completed_before,
            min_duration=min_duration,
            max_duration=max_duration,
            ids=ids,
            status=status,
        )
        return Response(json_bytes(search.page(filters, cursor=cursor, limit=limit).to_dict()), media_type=_JSON)

    @app.get("/stats", responses=ERRORS)
    def get_stats() -> dict[str, Any]:
        """Active counts merged with the completed rollups, the archive (stored and target tier) and
        the job's progress (done, failed, completion rates over the last minutes and hours, ETA): the
        namespace snapshot, read once, as ``status`` and ``/metrics`` show it."""
        return ns.snapshot(rollups=True).stats_dict()

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/dashboard/overview", responses=ERRORS)
    def overview() -> dict[str, Any]:
        """Everything the dashboard shows for this namespace, read without scanning the archive."""
        return collect_overview(ns, namespaces)

    @app.get("/healthz", response_model=StatusBody)
    def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/readyz", response_model=StatusBody, responses={503: {"model": ErrorBody}})
    def readyz() -> Any:
        """Ready unless Redis is unreachable, or no archiver is alive while entries wait in the queue."""
        client.ping()
        if not ns.liveness.archivers():
            backlog = int(client.xlen(keys.queue))  # type: ignore[arg-type]
            if backlog:
                return error_response(503, "no live archiver while the queue grows", {"queue_length": backlog})
        return {"status": "ready"}

    @app.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return answering_lookups_first(app, PartitionLookupPath(routers, errors))

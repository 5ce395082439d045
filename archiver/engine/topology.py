"""Which Redis node answers for a namespace, and how many of its replicas are in step: for
``partarchive status`` and the dashboard.

- Sentinel: the primary the client follows now (the address its pool last had from the sentinels);
- Redis Cluster: the master of the hash slot of the namespace's (hash-tagged) active key, which holds
  all of the namespace's control keys;
- one server: the server the client was given.

A replica is *in step* when its link is up (``state=online``) and it acknowledged the primary's
stream within the last second (``lag <= 1``): the rule Redis itself applies to
``min-replicas-to-write`` with ``min-replicas-max-lag 1``. Replicas acknowledge once a second, so
on a busy primary their acknowledged offset is almost never equal to ``master_repl_offset``; how
far behind each one was at its last acknowledgement is reported beside it (``behind_bytes``).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import SentinelConnectionPool

IN_STEP_LAG_S = 1
IN_STEP_RULE = f"online and acknowledged within {IN_STEP_LAG_S} s (lag <= {IN_STEP_LAG_S})"


def serving_node(client: redis.Redis, key: str) -> dict[str, Any]:
    """The node answering for ``key`` (mode, ``host:port``, role) and its replicas."""
    if isinstance(client, redis.RedisCluster):
        node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
        info = client.get_redis_connection(node).info("replication")
        return _describe("cluster", _address(node.host, node.port), info)
    pool = client.connection_pool
    info = client.info("replication")
    if isinstance(pool, SentinelConnectionPool):
        host, port = pool.master_address or pool.get_master_address()  # type: ignore[no-untyped-call]
        return _describe("sentinel", _address(host, port), info) | {"master_name": pool.service_name}
    kwargs = pool.connection_kwargs
    where = kwargs.get("path") or _address(str(kwargs.get("host", "?")), kwargs.get("port", "?"))
    return _describe("single", str(where), info)


def _describe(mode: str, address: str, info: dict[str, Any]) -> dict[str, Any]:
    offset = int(info.get("master_repl_offset", 0))
    replicas = []
    for name, value in sorted(info.items()):
        if not (name.startswith("slave") and name[5:].isdigit() and isinstance(value, dict)):
            continue
        lag = int(value.get("lag", -1))
        replicas.append(
            {
                "address": _address(str(value.get("ip", "?")), value.get("port", "?")),
                "state": str(value.get("state", "?")),
                "lag_s": lag,
                "behind_bytes": max(0, offset - int(value.get("offset", 0))),
                "in_step": value.get("state") == "online" and 0 <= lag <= IN_STEP_LAG_S,
            }
        )
    return {
        "mode": mode,
        "node": address,
        "role": str(info.get("role", "?")),
        "replicas": int(info.get("connected_slaves", len(replicas))),
        "replicas_in_step": sum(r["in_step"] for r in replicas),
        "in_step_rule": IN_STEP_RULE,
        "replica_nodes": replicas,
    }


def _address(host: str, port: object) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def describe_node(node: dict[str, Any]) -> str:
    """One line: ``127.0.0.1:6380 (Sentinel primary of 'x'); 1 replica, 1 in step (rule)``."""
    what = {"sentinel": f"Sentinel primary of {node.get('master_name')!r}", "cluster": "cluster master of the "
            "namespace's hash slot", "single": "single server"}.get(node["mode"], node["mode"])  # fmt: skip
    count = node["replicas"]
    replicas = f"{count} replica{'' if count == 1 else 's'}"
    if count:
        replicas += f", {node['replicas_in_step']} in step ({node['in_step_rule']})"
    return f"{node['node']} ({what}, role {node['role']}); {replicas}"

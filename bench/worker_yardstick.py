"""The yardstick of the worker and runtime sections: a partition's life as the original scheme
(elk_coordinator's workers) writes it, four HSETs of the whole record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson


def go_record(pid: int) -> dict[str, Any]:
    """A pending PartitionInfo as elk_coordinator's leader writes it."""
    now = "2026-11-26T10:00:00.123456789+08:00"
    return {"partition_id": pid, "min_id": pid * 1000 - 999, "max_id": pid * 1000, "worker_id": "",
            "last_heartbeat": now, "status": "pending", "updated_at": now, "version": 1, "created_at": now}  # fmt: skip


def original_steps(client: Any, key: str, pid: int, worker: str) -> list[tuple[str, Callable[[], Any]]]:
    """The original scheme's writes for one partition, each the whole record."""
    rec = go_record(pid)

    def write(status: str) -> Callable[[], Any]:
        def step() -> Any:
            rec["status"], rec["worker_id"], rec["version"] = status, worker, rec["version"] + 1
            rec["updated_at"] = rec["last_heartbeat"] = "2026-11-26T10:00:01.5Z"
            return client.hset(key, str(pid), orjson.dumps(rec))

        return step

    return [("claim", write("claimed")), ("start", write("running")), ("heartbeat", write("running")),
            ("complete", write("completed"))]  # fmt: skip

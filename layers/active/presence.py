"""Which worker runtime processes are alive: each keeps an expiring presence entry in its namespace.

A runtime process (`archiver.runtime`) beats every few seconds (``beat.lua``, the call that also
renews its leases): its entry in one hash (`KeySchema.presence`: id, host, pid, window, partitions
in hand, processed, last beat, when it expires) and the entry's expiry in a sorted set
(`KeySchema.presence_expiry`), from which every beat deletes the entries of processes that stopped
beating. One key each, so it works on Redis Cluster and needs no SCAN. Times are the server's. A
process that stops cleanly takes its entry out (``release.lua``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson

from layers.plumbing.replies import as_text


@dataclass(frozen=True, slots=True)
class WorkerPresence:
    worker_id: str
    host: str
    pid: int
    window: int  # partitions it works on at once
    in_hand: int  # partitions it holds now
    processed: int  # partitions it completed since it started
    failed: int  # partitions its `process` failed since it started
    started: float  # unix s
    last_beat: float  # unix s, the server's clock
    expires_at: float  # unix s: without a beat by then, it counts as gone
    alive: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def entry(self) -> str:
        """The entry as a beat stores it (JSON; `alive` is the reader's to say)."""
        body = self.to_dict()
        del body["alive"], body["worker_id"]
        return orjson.dumps(body).decode()


def presence_from(raw: Any, now: float) -> list[WorkerPresence]:
    """The live entries of `KeySchema.presence` as read (``HGETALL``), by worker id, at server time
    ``now`` (unix s); an entry past its expiry, or one that does not decode, is left out."""
    found = []
    for name, value in sorted(raw.items()):
        entry = _decode(as_text(name), value)
        if entry is not None and entry.expires_at > now:
            found.append(entry)
    return found


def _decode(name: str, value: Any) -> WorkerPresence | None:
    try:
        data = orjson.loads(value)
        return WorkerPresence(
            worker_id=name,
            host=str(data["host"]),
            pid=int(data["pid"]),
            window=int(data["window"]),
            in_hand=int(data["in_hand"]),
            processed=int(data["processed"]),
            failed=int(data["failed"]),
            started=float(data["started"]),
            last_beat=float(data["last_beat"]),
            expires_at=float(data["expires_at"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None

"""A namespace's state as one report (layer sizes, job progress, tier, queue backlog, the backlog
modes, Redis memory, the node that answers and its replicas): for ``partarchive status`` and the
dashboard."""

from __future__ import annotations

from typing import Any

import redis

from archiver.config import Config
from archiver.engine.topology import serving_node
from archiver.namespace import Namespace
from layers.archive.transitions import transition_state
from layers.control.liveness import ArchiverHealth


def collect_status(
    client: redis.Redis, config: Config, *, archivers: list[ArchiverHealth] | None = None
) -> dict[str, Any]:
    """The namespace's layer sizes and queue state; ``archivers`` if the caller has read them already."""
    ns = Namespace(client, config)
    if archivers is None:
        archivers = ns.liveness.archivers()
    active, archive, queue = ns.active, ns.archive, ns.queue.state()
    memory = client.info("memory")
    by_status, tier = active.counts(), archive.tier()
    return {
        "namespace": config.namespace,
        "active": {"size": active.size(), "by_status": by_status},
        "progress": ns.progress.read(by_status).to_dict(),
        "archive": {
            "tier": tier.value,
            "archived_total": archive.archived_total(),
            "simple_tier": archive.simple_size(),
            "open_batches": archive.open_batch_count(),
            "compression_ratio": archive.compression_ratio(),
        },
        "transition": transition_state(archive).to_dict(),
        "queue": {
            "backlog": queue.length,
            "pending": queue.pending,
            "oldest_pending_age_s": round(queue.oldest_pending_age_s, 3),
            "lag": queue.lag,
            "consumers": queue.consumers,
            "dead_letters": queue.dead_letters,
        },
        "pressure": ns.pressure.state(tier).to_dict(),
        "archival": ns.archival.state().to_dict(),
        "archivers_alive": len(archivers),
        "redis": {
            "used_memory": int(memory["used_memory"]),  # type: ignore[index]
            "used_memory_human": memory["used_memory_human"],  # type: ignore[index]
            "maxmemory": int(memory.get("maxmemory", 0)),  # type: ignore[union-attr]
        }
        | serving_node(client, ns.keys.active),
    }

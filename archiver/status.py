"""``partarchive status``: layer sizes and queue backlog, as data and as a table."""

from __future__ import annotations

import time
from typing import Any

import redis

from archiver.config import Config
from archiver.namespace import Namespace
from layers.liveness import ArchiverHealth
from layers.transitions import transition_state


def collect_status(
    client: redis.Redis, config: Config, *, archivers: list[ArchiverHealth] | None = None
) -> dict[str, Any]:
    """The namespace's layer sizes and queue state; ``archivers`` if the caller has read them already."""
    ns = Namespace(client, config)
    if archivers is None:
        archivers = ns.liveness.archivers()
    active, archive, queue = ns.active, ns.archive, ns.queue.state()
    memory = client.info("memory")
    return {
        "namespace": config.namespace,
        "active": {"size": active.size(), "by_status": active.counts()},
        "archive": {
            "tier": archive.tier().value,
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
        "archivers_alive": len(archivers),
        "redis": {
            "used_memory": int(memory["used_memory"]),  # type: ignore[index]
            "used_memory_human": memory["used_memory_human"],  # type: ignore[index]
            "maxmemory": int(memory.get("maxmemory", 0)),  # type: ignore[union-attr]
        },
    }


def _backlog(t: dict[str, Any]) -> str:
    if not t["simple_left"]:
        return f"none ({t['moved']:,} moved)" if t["moved"] else "none"
    eta = "unknown" if t["move_eta_s"] is None else f"{t['move_eta_s']:,.0f} s"
    return f"{t['simple_left']:,} records in the simple hash, {t['move_rate']:,.0f}/s, ETA {eta}"


def _retention(t: dict[str, Any]) -> str:
    text = f"{t['retention_s']:,} s; {t['expired']:,} expired ({t['expired_share']:.2%})"
    if t["expiry_lag_s"]:
        text += f", sweep behind by {t['expiry_lag_s']:,.0f} s"
    return text


def format_status(report: dict[str, Any]) -> str:
    a, ar, q = report["active"], report["archive"], report["queue"]
    by_status = ", ".join(f"{k} {v}" for k, v in a["by_status"].items())
    rows = [
        ("namespace", report["namespace"]),
        ("active partitions", f"{a['size']} ({by_status})"),
        ("archive tier", ar["tier"]),
        ("archived total", ar["archived_total"]),
        ("in the simple hash", ar["simple_tier"]),
        ("open batches", ar["open_batches"]),
        ("compression ratio", f"{ar['compression_ratio']}x" if ar["compression_ratio"] else "-"),
        ("tier move backlog", _backlog(report["transition"])),
        ("retention (summary)", _retention(report["transition"])),
        ("queue backlog", f"{q['backlog']} ({q['pending']} pending, oldest {q['oldest_pending_age_s']} s)"),
        ("queue lag", "-" if q["lag"] is None else q["lag"]),
        ("archivers alive", report["archivers_alive"]),
        ("dead letters", q["dead_letters"]),
        ("redis used_memory", f"{report['redis']['used_memory_human']} ({report['redis']['used_memory']:,} B)"),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def format_archivers(found: list[ArchiverHealth], namespace: str) -> str:
    if not found:
        return f"no live archiver in namespace {namespace}"
    lines = [f"{'consumer':<40} {'host':<20} {'pid':>7} {'up':>9} {'beat':>6} {'rate/s':>9} {'pending':>8}  state"]
    for h in found:
        up = max(0.0, h.last_beat - h.started)
        lines.append(
            f"{h.consumer[:40]:<40} {h.host[:20]:<20} {h.pid:>7} {_human_s(up):>9} "
            f"{time.strftime('%H:%M:%S', time.gmtime(h.last_beat)):>6} {h.rate:>9,.1f} {h.pending:>8,}  "
            + ("alive" if h.alive else "dead")
        )
    return "\n".join(lines)


def _human_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

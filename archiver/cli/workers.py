"""``partarchive workers [--json]``: the live worker runtime processes (their presence entries)."""

from __future__ import annotations

import argparse
import time

from archiver.cli.archivers import _human_s
from archiver.cli.status import describe_leader
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json
from layers.active.planning import LeaderView, PlanningLayer
from layers.active.presence import WorkerPresence


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)
    found = ns.active.presence()
    view = PlanningLayer(ns.active).view()
    if args.json:
        print_json([w.to_dict() | {"leads": w.worker_id == view.leader} for w in found])
    else:
        print(format_workers(found, config.namespace, view))
    return 0


def format_workers(found: list[WorkerPresence], namespace: str, view: LeaderView | None = None) -> str:
    leader = "" if view is None else f"\nleader: {describe_leader(view.to_dict())}"
    if not found:
        return f"no live worker in namespace {namespace}{leader}"
    lines = [f"{'worker':<44} {'host':<20} {'pid':>7} {'up':>9} {'beat':>8} {'window':>6} {'in hand':>7} "
             f"{'processed':>10} {'failed':>7}"]  # fmt: skip
    for w in found:
        up = max(0.0, w.last_beat - w.started)
        lines.append(
            f"{w.worker_id[:44]:<44} {w.host[:20]:<20} {w.pid:>7} {_human_s(up):>9} "
            f"{time.strftime('%H:%M:%S', time.gmtime(w.last_beat)):>8} {w.window:>6} {w.in_hand:>7} "
            f"{w.processed:>10,} {w.failed:>7,}" + (" *" if view is not None and w.worker_id == view.leader else "")
        )
    return "\n".join(lines) + leader

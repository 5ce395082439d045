"""``partarchive archivers [--all] [--json]``: the archivers' health entries."""

from __future__ import annotations

import argparse
import time

from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json
from layers.control.liveness import ArchiverHealth


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)
    found = ns.liveness.archivers(include_dead=args.all)
    if args.json:
        print_json([h.to_dict() for h in found])
    else:
        print(format_archivers(found, config.namespace))
    return 0


def format_archivers(found: list[ArchiverHealth], namespace: str) -> str:
    if not found:
        return f"no live archiver in namespace {namespace}"
    lines = [f"{'consumer':<40} {'host':<20} {'pid':>7} {'up':>9} {'beat':>6} {'rate/s':>9} {'uncommitted':>11}  state"]
    for h in found:
        up = max(0.0, h.last_beat - h.started)
        lines.append(
            f"{h.consumer[:40]:<40} {h.host[:20]:<20} {h.pid:>7} {_human_s(up):>9} "
            f"{time.strftime('%H:%M:%S', time.gmtime(h.last_beat)):>6} {h.rate:>9,.1f} {h.uncommitted:>11,}  "
            + ("alive" if h.alive else "dead")
        )
    return "\n".join(lines)


def _human_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

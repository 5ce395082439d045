"""``partarchive get PID``: where a partition is, and its record."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from archiver.cli.args import EXIT_NOT_FOUND, CliError
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json
from archiver.router import QueryRouter
from codec.validate import check_partition_id


def _human(key: str, value: Any) -> Any:
    """Unix times shown as UTC dates too (``--json`` keeps the plain numbers)."""
    if (key.endswith("_at") or key == "last_heartbeat") and isinstance(value, int) and 0 < value < 2**34:
        return f"{value} ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(value))})"
    return value


def command(args: argparse.Namespace, config: Config) -> int:
    try:
        pid = int(args.pid)
    except ValueError:
        raise CliError(f"partition id must be an integer, got {args.pid!r}") from None
    check_partition_id(pid)  # bad input is said before anything is looked up
    ns = open_namespace(config)
    router = QueryRouter(
        ns.redis, ns.keys, archive=ns.archive, summary_lookup=ns.stats_reader.range_summary, cold=ns.cold_reads
    )
    answer = router.get(pid)
    if args.json:
        print_json(answer.to_dict())
    elif answer.found:
        print(f"partition {pid}: {answer.status} (source: {answer.source}{', degraded' if answer.degraded else ''})")
        if answer.partition is not None:
            for key, value in answer.partition.to_dict().items():
                print(f"  {key:15} {_human(key, value)}")
        if answer.detail:
            print(f"  {answer.detail}")
    else:
        print(f"partition {pid}: not found", file=sys.stderr)
    return 0 if answer.found else EXIT_NOT_FOUND

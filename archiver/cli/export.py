"""``partarchive export``: every archived partition, in Go's format or ours, to a file or a hash (the rollback)."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import Any

from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.elk.export import Exporter


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)
    fmt, output, into_hash = args.fmt, args.output, args.into_hash
    exporter = Exporter(ns.archive, fmt)
    if into_hash is not None:
        count = exporter.into_hash(ns.redis, into_hash)
        where = f"hash {into_hash}"
    else:
        assert output is not None
        sink: Any = nullcontext(sys.stdout.buffer) if output == "-" else open(output, "wb")  # noqa: SIM115
        with sink as fh:
            count = exporter.to_file(fh)
        where = output
    for problem in exporter.skipped:
        print(f"partarchive: skipped {problem}", file=sys.stderr)
    print(f"exported {count} partitions ({fmt} format) to {where}", file=sys.stderr)
    return 0

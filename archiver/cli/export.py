"""``partarchive export``: every archived partition, in Go's format or ours, to a file or a hash (the rollback)."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import Any

from archiver.cli.args import CliError
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.elk.export import Exporter


def command(args: argparse.Namespace, config: Config) -> int:
    fmt, output, into_hash = args.fmt, args.output, args.into_hash
    if fmt == "parquet":
        return _parquet(args, config)
    ns = open_namespace(config)
    exporter = Exporter(ns.archive, fmt, ns.cold_reads)
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


def _parquet(args: argparse.Namespace, config: Config) -> int:
    """``--format parquet --output DIR``: the archive's records as Parquet by completion day."""
    from layers.archive.cold_store import needs_extra

    missing = needs_extra("export --format parquet")
    if missing is not None:
        raise CliError(str(missing))
    if args.output is None or args.output == "-":
        raise CliError("export --format parquet writes a directory: give --output DIR")
    from archiver.parquet_export import ParquetExport
    from codec.stored import as_archived

    out = ParquetExport(args.output)  # refused before anything is read when DIR holds files
    ns = open_namespace(config)
    exporter = Exporter(ns.archive, "native", ns.cold_reads)
    for _, _, rec in exporter.parts():
        out.add(*as_archived(rec))
    out.close()
    for problem in exporter.skipped:
        print(f"partarchive: skipped {problem}", file=sys.stderr)
    print(f"exported {out.rows} partitions (parquet) in {out.files} files to {args.output}", file=sys.stderr)
    return 0

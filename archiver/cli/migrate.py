"""``partarchive migrate from-elk``: survey or import an elk_coordinator deployment."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

from archiver.cli.args import EXIT_NOT_FOUND
from archiver.cli.progress import progress_bar
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.elk.migrate import CHUNK, ElkMigration, MigrationReport, rejected_lines
from archiver.engine import client_for
from archiver.output import print_json
from layers.elk import ElkSource, find_deployments


def _when(ts: int | None) -> str:
    return "-" if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _survey_lines(report: MigrationReport) -> list[str]:
    lines = [f"elk_coordinator deployment with KeyPrefix {report.prefix!r}"]
    for name, fam in report.survey.items():
        if fam.type == "none":
            lines.append(f"  {name:11} {fam.key}: absent")
            continue
        statuses = ", ".join(f"{s} {n}" for s, n in sorted(fam.by_status.items()))
        lines.append(f"  {name:11} {fam.key} ({fam.type}): {fam.entries} entries, {fam.bytes:,} bytes")
        if statuses:
            lines.append(f"  {'':11} {statuses}")
        if fam.first_updated is not None:
            lines.append(f"  {'':11} updated {_when(fam.first_updated)} .. {_when(fam.last_updated)}")
    return lines


def _result_lines(report: MigrationReport) -> list[str]:
    found = ", ".join(f"{s} {n}" for s, n in report.found.items())
    lines = [
        f"completed partitions found  {report.completed_found} ({found})",
        f"imported now                {report.imported}",
        f"imported before             {report.already}",
        f"copies in later sources     {report.copies} (Go's precedence kept the first)",
        f"rejected                    {len(report.rejected)}",
        f"workers uncertain (flagged) {report.flagged}",
        f"ranges widened (flagged)    {report.widened} (cut at 2^32 ids by Go's batches)",
        f"verified in the index       {report.verified}",
        f"archive tier                {report.tier}",
    ]
    if report.deleted:
        lines.append("deleted from the source     " + ", ".join(f"{s} {n}" for s, n in report.deleted.items()))
    for r in report.rejected[:20]:
        lines.append(f"  rejected {r.source}:{r.field}: {r.reason}")
    if len(report.rejected) > 20:
        lines.append(f"  ... {len(report.rejected) - 20} more (see --rejects FILE)")
    lines.append(f"elapsed                     {report.elapsed_s} s")
    lines.append("result                      " + ("OK" if report.ok else "MISMATCH: source records not in the index"))
    return lines


def command(args: argparse.Namespace, config: Config) -> int:
    client = client_for(config)
    if args.prefix is None:
        prefixes = find_deployments(client)
        if args.json:
            print_json({"deployments": prefixes})
        elif not prefixes:
            print("no elk_coordinator deployment found (no key matches elk:*elk_partitions)")
        else:
            print("elk_coordinator deployments (pass one as --prefix):")
            for prefix in prefixes:
                print(f"  {prefix!r:30} active hash elk:{prefix}elk_partitions")
        return 0 if prefixes else EXIT_NOT_FOUND
    chunk = int(os.environ.get("PARTARCHIVE_MIGRATE_CHUNK", CHUNK))
    migration = ElkMigration(client, open_namespace(config, existing=False).config, args.prefix, chunk=chunk)
    if not ElkSource(client, args.prefix).exists():
        print(f"partarchive: no elk_coordinator keys under elk:{args.prefix}", file=sys.stderr)
        return EXIT_NOT_FOUND
    show = not (args.json or args.no_progress or args.dry_run)
    with progress_bar(desc="migrating", unit="part", disable=not show) as bar:
        report = migration.run(dry_run=args.dry_run, delete_source=args.delete_source, progress=bar.update)
    if args.rejects:
        with open(args.rejects, "wb") as fh:
            for line in rejected_lines(report):
                fh.write(line + b"\n")
    if args.json:
        print_json(report.to_dict())
    else:
        print("\n".join(_survey_lines(report)))
        if args.dry_run:
            print("dry run: nothing was written")
        else:
            print("\n".join(_result_lines(report)))
    return 0 if report.ok else 2

"""``partarchive find``: archived and active partitions by worker, completion time, duration, ids
and status, in partition order, as a table or JSON Lines (`stats.search`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import json_bytes
from stats.search import LAYER_ORDER, MAX_LIMIT, Filters, Page, Search

#: Partitions read per page while the command gathers ``--limit`` of them.
PAGE = 50_000


def filters_of(args: argparse.Namespace) -> Filters:
    return Filters.parse(
        worker=args.worker,
        completed_after=args.completed_after,
        completed_before=args.completed_before,
        min_duration=args.min_duration,
        max_duration=args.max_duration,
        ids=args.ids,
        status=args.status,
    )


def command(args: argparse.Namespace, config: Config) -> int:
    filters = filters_of(args)  # bad input is said before anything is read
    if not 1 <= args.limit <= MAX_LIMIT:
        from archiver.cli.args import CliError

        raise CliError(f"--limit must be 1..{MAX_LIMIT:,}")
    ns = open_namespace(config)
    search = Search(ns.redis, ns.archive, ns.cold_reads)
    out = sys.stdout
    left, cursor = args.limit, args.cursor
    shown = 0
    pages: list[Page] = []
    while True:
        page = search.page(filters, cursor=cursor, limit=min(left, PAGE))
        pages.append(page)
        for item in page.items():
            out.write(json_bytes(item).decode() + "\n" if args.json else _row(item, shown == 0) + "\n")
            shown += 1
        left -= len(page)
        cursor = page.next_cursor
        if cursor is None or left <= 0:
            break
    summary = pages[-1].summary() | {
        "count": shown,
        "statistics": [entry for p in pages for entry in p.statistics],
        "searched": sorted({layer for p in pages for layer in p.searched}, key=LAYER_ORDER.index),
        "scanned": [pages[0].scanned[0], pages[-1].scanned[1]],
    }
    if args.json:
        out.write(json_bytes({"search": summary}).decode() + "\n")
    else:
        out.write(_summary(summary, shown))
    return 0


_HEADER = (
    f"{'partition':>10}  {'min_id':>20}  {'max_id':>20}  {'worker':<16}  "
    f"{'completed (UTC)':<19}  {'duration':>9}  source"
)


def _row(item: dict[str, Any], first: bool) -> str:
    at = item.get("completed_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) if isinstance(at, int) else item["status"]
    duration = f"{item['duration']:,} s" if "duration" in item else "-"
    line = (
        f"{item['partition_id']:>10}  {item['min_id']:>20}  {item['max_id']:>20}  {item['worker_id'] or '-':<16}  "
        f"{when:<19}  {duration:>9}  {item['source']}"
    )
    return f"{_HEADER}\n{line}" if first else line


def _summary(summary: dict[str, Any], shown: int) -> str:
    lines = [f"{shown:,} partitions" if shown else "no partitions match", f"searched: {', '.join(summary['searched'])}"]
    for entry in summary["statistics"]:
        lo, hi = entry["partitions"]
        matching = "" if entry["matching"] is None else f", {entry['matching']:,} of them match"
        count = "no statistics" if entry["count"] is None else f"{entry['count']:,} completed{matching}"
        lines.append(
            f"from the statistics: {entry['level']} {entry[entry['level']]} (partitions {lo}-{hi}): {count} "
            f"({entry['batches_without_detail']} batches without detail: {entry['why']})"
        )
    waiting = summary["not_searched"]
    if waiting.get("queue"):
        lines.append(f"not searched: {waiting['queue']:,} completions waiting in the archive queue")
    if waiting.get("held"):
        lines.append(f"not searched: {waiting['held']:,} completions held in the active hash (archival paused)")
    if summary["next_cursor"]:
        lines.append(f"more: --cursor {summary['next_cursor']}")
    return "\n".join(lines) + "\n"

"""``partarchive stats``: the merged view as a table or JSON; ``stats verify [--repair]``."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket

import redis

from archiver.cli.args import CliError
from archiver.cli.progress import progress_bar
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json
from codec import PartArchiveError, ValidationError
from layers.control.maintenance import MaintenanceLock
from stats import StatsChecker, StatsReader
from stats.lost import runs


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)
    client, config = ns.redis, ns.config
    if args.action == "verify":
        return verify_stats(client, config, repair=args.repair, as_json=args.json)
    if args.repair:
        raise CliError("--repair goes with 'stats verify'")
    return show_stats(client, config, range_no=args.range_no, day=args.day, as_json=args.json)


def show_stats(client: redis.Redis, config: Config, *, range_no: int | None, day: str | None, as_json: bool) -> int:
    reader = StatsReader(client, config.keys)
    if day is not None:
        try:
            if len(day) != 10 or day[4] != "-" or day[7] != "-":
                raise ValueError(day)
            dt.date.fromisoformat(day)
        except ValueError:
            raise ValidationError(f"--day must be YYYY-MM-DD, got {day!r}") from None
        series = reader.time_series(day)
        if as_json:
            print_json(series)
        else:
            print(f"{day}: {series['total']} completions")
            if series["hourly_completion"] is None:
                print("  by hour: rolled into the day's total (older than the statistics' hourly retention)")
            else:
                print("  by hour: " + " ".join(str(n) for n in series["hourly_completion"]))
            for worker, n in series["worker_completions"].items():
                print(f"  {worker:24} {n}")
        return 0
    if range_no is not None:
        if range_no < 0:
            raise ValidationError("--range must be >= 0")
        summary = reader.range_stats(range_no)
        if as_json:
            print_json(summary)
        elif summary is None:
            print(f"range {range_no}: no statistics")
        else:
            lo, hi = summary["partitions"]
            level = "" if summary["level"] == "range" else f", from coarse range {summary['coarse_range']}"
            print(
                f"range {range_no} (partitions {lo}..{hi}{level}): {summary['partition_count']} completed, "
                f"IDs {summary['data_range']['min']}..{summary['data_range']['max']}, "
                f"avg duration {summary['avg_duration']} s"
            )
            for worker, w in summary["worker_distribution"].items():
                print(
                    f"  {worker:24} {w['count']:>8} partitions  avg {w['avg_duration']:>8} s  "
                    f"{w['data_processed']:>12} IDs"
                )
        return 0 if summary is not None else 1
    view = reader.stats()
    if as_json:
        print_json(view)
        return 0
    active = view["active"]
    print("active   " + ", ".join(f"{k} {v}" for k, v in active.items()) + f"  (total {view['active_total']})")
    if view["degraded"]:
        print(f"completed  unavailable: {view['error']}")
        return 0
    c = view["completed"]
    print(
        f"completed  {c['total_completed']:,} partitions, {c['total_processed_data']:,} IDs, "
        f"avg duration {c['avg_duration']} s"
    )
    print(f"archive    stored tier {view['archive']['stored_tier']}, {view['archive']['archived_total']:,} archived")
    if view["workers"]:
        print(f"\n{'worker':24} {'completed':>10} {'avg s':>9} {'IDs':>14}")
        for worker, w in view["workers"].items():
            print(f"{worker:24} {w['count']:>10,} {w['avg_duration']:>9} {w['data_processed']:>14,}")
    return 0


def verify_stats(client: redis.Redis, config: Config, *, repair: bool, as_json: bool) -> int:
    checker = StatsChecker(client, config.keys, policy=config.policy)
    lock = MaintenanceLock(client, config.keys, f"stats-repair-{socket.gethostname()}-{os.getpid()}")
    if repair and not lock.acquire():
        raise PartArchiveError(
            f"the maintenance lock is taken by {lock.holder_now()!r}; repair runs alone: try again when it is free"
        )
    try:
        with progress_bar(desc="checking batches", unit="batch", disable=as_json, leave=False) as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)
                if repair:
                    lock.renew()

            report = checker.check(repair=repair, progress=progress)
    finally:
        if repair:
            lock.release()
    if as_json:
        print_json(report.to_dict())
    else:
        print(
            f"checked {report.ranges_checked} ranges field by field, {report.ranges_count_only} by count; "
            f"{report.indexed:,} partitions indexed, {report.partitions_with_detail:,} with detail"
        )
        for diff in report.differences:
            print(f"  difference: {diff}")
        if report.undecodable_batches:
            print(f"  undecodable batches: {report.undecodable_batches}")
        lost = report.lost
        if lost.expired:
            print(f"  detail expired (summary tier retention): {lost.expired:,} partitions")
        if lost.missing:
            print(
                f"  detail missing: {len(lost.missing):,} partitions (indexed and counted, their records are gone): "
                + ", ".join(runs(lost.missing))
            )
        if repair:
            print(f"repaired {report.repaired_keys} keys" if report.repaired_keys else "nothing to repair")
            if lost.missing:
                print(f"lost: the records of {len(lost.missing):,} partitions (above); repair cannot restore them")
        undecodable = f", {len(report.undecodable_batches)} batches unreadable" if report.undecodable_batches else ""
        missing = f", detail of {len(lost.missing):,} partitions missing" if lost.missing else ""
        print("OK" if report.ok else f"{len(report.differences)} differences{undecodable}{missing}")
    if report.ok or (repair and report.repaired_keys and not report.lost.missing):
        return 0
    return 1

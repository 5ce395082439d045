"""``partarchive archival pause|resume|status|rollout PERCENT|report [--json]``: stop archiving
new completions and start again (the progressive rollback), archive a share of them (the gray
release) and compare the two cohorts (`layers.control.switch`, `archiver.gray_report`)."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import socket

from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.gray_report import CohortReport, build_report
from archiver.output import print_json
from layers.control.switch import ArchivalState


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)  # a namespace bound to a Go deployment switches under Go's prefix
    action = args.archival_command
    queued = None
    if action == "pause":
        state = ns.archival.pause(_operator())
    elif action == "resume":
        queued = ns.archival.resume()
        state = ns.archival.state()
    elif action == "rollout":
        queued = ns.archival.rollout(args.percent)
        state = ns.archival.state()
    else:
        state = ns.archival.state()
    if action == "report":
        report = build_report(ns, state)
        if args.json:
            print_json(report.to_dict())
        else:
            print(format_report(report))
        return 0
    backlog = ns.queue.state().length
    if args.json:
        print_json(state.to_dict() | {"queue_backlog": backlog} | ({} if queued is None else {"queued": queued}))
        return 0
    if action == "resume":
        print(f"archival resumed: {queued:,} held partitions sent to the archive queue")
    elif action == "rollout":
        print(f"archival share set to {args.percent}%: {queued:,} held partitions now in it sent to the archive queue")
    print(format_archival(state, backlog))
    return 0


def format_archival(state: ArchivalState, backlog: int) -> str:
    counts = f"  held {state.held:,} (in the active hash, status completed); released {state.released:,} so far"
    if not state.paused:
        share = "every completion" if state.share == 100 else f"share {state.share}% of the partitions"
        return f"archival: running, {share} (archive queue backlog {backlog:,})\n{counts}"
    since = (
        "an unknown time"
        if state.since is None
        else dt.datetime.fromtimestamp(state.since, dt.UTC).isoformat(timespec="seconds")
    )
    return (
        f"archival: paused since {since}{f' by {state.by}' if state.by else ''} (share {state.share}% on resume)\n"
        f"{counts}\n"
        f"  {backlog:,} entries queued before the pause are still being archived\n"
        "  resume with: partarchive archival resume"
    )


def format_report(report: CohortReport) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else (">1000 ms" if value == float("inf") else f"{value:g} ms")

    def size(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f} B"

    a, h = report.archived, report.held_cohort
    rows = [
        ("completions", f"{a.completions:,}", f"{h.completions:,}"),
        ("complete() p50", ms(a.complete_p50_ms), ms(h.complete_p50_ms)),
        ("complete() p99", ms(a.complete_p99_ms), ms(h.complete_p99_ms)),
        ("bytes per partition", size(a.bytes_per_partition) + " archive", size(h.bytes_per_partition) + " active"),
        ("lookup p50", ms(a.lookup_p50_ms), ms(h.lookup_p50_ms)),
        ("lookup p99", ms(a.lookup_p99_ms), ms(h.lookup_p99_ms)),
    ]
    state = "paused" if report.paused else f"share {report.share}%"
    lines = [f"gray release: {state}, held {report.held:,}, released {report.released:,}",
             f"  {'':<22}{'archived':>18}{'held':>18}"]  # fmt: skip
    lines += [f"  {name:<22}{left:>18}{right:>18}" for name, left, right in rows]
    with_held, without = report.all_active_s * 1000, report.all_active_without_held_s * 1000
    lines.append(f"  all_active ({report.active_records:,} records): {with_held:.1f} ms with the held ones,"
                 f" ~{without:.1f} ms without (estimated)")  # fmt: skip
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"

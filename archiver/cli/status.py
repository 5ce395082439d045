"""``partarchive status [--json] [--watch [S]]``: the namespace's state as a table or JSON."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import Any

from archiver.cli.args import CliError
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.engine.topology import describe_node
from archiver.output import print_json
from archiver.status import collect_status
from stats.progress import WINDOWS


def command(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config)
    client, config = ns.redis, ns.config
    if args.watch is None:
        _print_status(collect_status(client, config), args.json, clear=False)
        return 0
    if not 0.1 <= args.watch <= 3600:
        raise CliError("--watch takes 0.1 .. 3600 seconds")
    try:  # Ctrl-C is how a watch ends, whether it lands in the sleep or in a read
        while True:
            _print_status(collect_status(client, config), args.json, clear=sys.stdout.isatty())
            sys.stdout.flush()
            time.sleep(args.watch)
            if not args.json:
                print()
    except KeyboardInterrupt:
        return 0


def _print_status(report: dict[str, Any], as_json: bool, *, clear: bool) -> None:
    if as_json:
        print_json(report)
        return
    if clear:
        print("\033[H\033[2J", end="")
    print(format_status(report))


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


def _cold(c: dict[str, Any]) -> str:
    if c["store"] is None:
        return "none"
    size = f"{c['bytes'] / 2**20:,.1f} MiB" if c["bytes"] >= 2**20 else f"{c['bytes']:,} B"
    text = f"{c['store']}: {c['files']:,} files, {size}, {c['partitions']:,} partitions"
    if c["written_at"]:
        text += f", last written {_when(c['written_at'])}"
    return text + (f"; FAILING: {c['error']}" if c["error"] else "")


def _when(at: float | None) -> str:
    return "?" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _progress(p: dict[str, Any]) -> str:
    share = "" if p["percent_done"] is None else f" ({p['percent_done']}%)"
    return f"{p['done']:,} of {p['total']:,} done{share}, {p['failed']:,} failed, {p['pending']:,} pending"


def _rates(p: dict[str, Any]) -> str:
    """Each window's rate; one over less time than its window (just after the start) says how long."""
    covers = p.get("rate_covers_s", {})

    def one(window: str, rate: float | None) -> str:
        if rate is None:
            return f"{window} -"
        short = covers.get(window) is not None and covers[window] < WINDOWS[window]
        return f"{window} {rate:,.1f}/s" + (f" (over the last {covers[window]:,.0f} s)" if short else "")

    return ", ".join(one(w, r) for w, r in p["rates"].items())


def _compression(p: dict[str, Any]) -> str:
    waiting = f"{p['unsealed_records']:,} records in {p['unsealed_batches']:,} batches wait to be sealed"
    if p["skipping"]:
        return f"SKIPPED since {_when(p['since'])} ({p['reason']}); {waiting}"
    return f"normal; {waiting}" if p["unsealed_records"] or p["unsealed_batches"] else "normal"


def _archival(a: dict[str, Any]) -> str:
    if a["paused"]:
        by = f" by {a['by']}" if a["by"] else ""
        return f"PAUSED since {_when(a['since'])}{by}; {a['held']:,} completed partitions held in the active hash"
    share = a.get("share", 100)
    running = "running" if share == 100 else f"running for a share of {share}% (gray release)"
    return f"{running}; {a['held']:,} completed partitions held in the active hash" if a["held"] else running


def _workers(w: dict[str, Any]) -> str:
    text = f"{w['alive']} ({w['in_hand']:,} partitions in hand)"
    return text + (f"; {w['retries_waiting']:,} failures wait for a retry" if w["retries_waiting"] else "")


def describe_leader(d: dict[str, Any]) -> str:
    """Who leads (`LeaderView.to_dict`), as ``status``, ``workers`` and ``plan`` say it."""
    if d["leader"] is None:
        return "nobody"
    if not d["token"]:
        return f"{d['leader']} (Go's lock)"
    left = d["lease_left_ms"] / 1000
    return f"{d['leader']} (token {d['token']}, since {_when(d['since_ms'] / 1000)}, lease {left:.1f} s left)"


def describe_plan(d: dict[str, Any]) -> str:
    p = d["plan"]
    if p["next_id"] is None:
        return "nothing planned"
    return f"ids {p['first_id']}..{p['next_id'] - 1} in {p['partitions']:,} partitions, next start {p['next_id']}"


def describe_check(d: dict[str, Any]) -> str:
    """What the leader's check of the plan found, in one line."""
    p = d["plan"]
    if not p["checked_at"]:
        return "not checked yet"
    found = f"{d['holes']:,} HOLES, {d['overlaps']:,} OVERLAPS" if d["holes"] or d["overlaps"] else "no hole or overlap"
    failed = f"; {p['failed_final']:,} failed for good" if p["failed_final"] else ""
    return f"{found} (partitions up to {p['seen_pid']:,} checked, last at {_when(p['checked_at'])}){failed}"


def format_status(report: dict[str, Any]) -> str:
    a, ar, q = report["active"], report["archive"], report["queue"]
    by_status = ", ".join(f"{k} {v}" for k, v in a["by_status"].items())
    rows = [
        ("namespace", report["namespace"]),
        ("active partitions", f"{a['size']} ({by_status})"),
        *([("unreadable records", f"{a['unreadable']:,} set aside (partarchive dead-letters list)")]
          if a.get("unreadable") else []),
        ("job progress", _progress(report["progress"])),
        ("completion rate", _rates(report["progress"])),
        ("ETA", report["progress"]["eta"]),
        ("stored tier", ar["stored_tier"]),
        ("target tier", ar["target_tier"] + ("" if ar["target_tier"] == ar["stored_tier"] else " (a move is due)")),
        ("archived total", ar["archived_total"]),
        ("in the simple hash", ar["simple_tier"]),
        ("open batches", ar["open_batches"]),
        ("compression ratio", f"{ar['compression_ratio']}x" if ar["compression_ratio"] else "-"),
        ("tier move backlog", _backlog(report["transition"])),
        ("retention (summary)", _retention(report["transition"])),
        ("cold store", _cold(ar["cold"])),
        ("queue backlog", f"{q['backlog']} ({q['pending']} unacknowledged, oldest {q['oldest_pending_age_s']} s)"),
        ("queue lag", "-" if q["lag"] is None else q["lag"]),
        ("compression", _compression(report["pressure"])),
        ("archival", _archival(report["archival"])),
        ("archivers alive", report["archivers_alive"]),
        ("workers alive", _workers(report["workers"])),
        ("leader", describe_leader(report["leader"])),
        ("plan", describe_plan(report["leader"])),
        *([("plan check", describe_check(report["leader"]))] if report["leader"]["plan"]["next_id"] is not None
          else []),
        ("dead letters", q["dead_letters"]),
        ("redis used_memory", f"{report['redis']['used_memory_human']} ({report['redis']['used_memory']:,} B)"),
        ("redis node", describe_node(report["redis"])),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)

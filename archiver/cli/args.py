"""The ``partarchive`` command line's arguments (every subcommand and its options), its exit
codes and the error it prints as one line."""

from __future__ import annotations

import argparse
from typing import Any

from archiver.version import installed_version

EXIT_NOT_FOUND = 1
EXIT_ERROR = 2
LOG_LEVELS = ["debug", "info", "warning", "error"]


class CliError(Exception):
    """Raised by argument parsing; printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise CliError(message)


def _percent(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"PERCENT must be a whole number from 0 to 100, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--redis-url", help="Redis URL (default: $REDIS_URL)")
    common.add_argument(
        "--namespace", help="key namespace (default: elk, or $PARTARCHIVE_NAMESPACE); run takes several: a,b,c"
    )
    common.add_argument(
        "--cluster",
        action="store_true",
        default=None,
        help="Redis Cluster: a cluster client and hash-tagged keys (demo without --redis-url starts a local cluster)",
    )
    common.add_argument(
        "--sentinel",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="Redis Sentinel: the sentinels to ask for the primary ($PARTARCHIVE_SENTINEL; passwords only from "
        "$PARTARCHIVE_SENTINEL_PASSWORD and $PARTARCHIVE_REDIS_PASSWORD)",
    )
    common.add_argument(
        "--sentinel-master",
        metavar="NAME",
        help="with --sentinel: the master name they monitor ($PARTARCHIVE_SENTINEL_MASTER)",
    )
    common.add_argument(
        "--elk-prefix",
        help="bind the namespace to the elk_coordinator deployment with this KeyPrefix ($PARTARCHIVE_ELK_PREFIX)",
    )
    common.add_argument(
        "--elk-namespace",
        metavar="NS",
        help="with --elk-prefix: the Go deployment's namespace (NewMgr's first argument), whose leader lock "
        "a leader stands aside for and takes ($PARTARCHIVE_ELK_NAMESPACE)",
    )

    parser = _Parser(prog="partarchive", description="Redis partition archival system")
    parser.add_argument("--version", action="version", version=f"partarchive {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", parents=[common], help="run the archiver daemon")
    run.add_argument("--consumer", help="consumer name (default: host-pid-random)")
    run.add_argument(
        "--processes", default="1", help="N archiver processes under a supervisor, or auto: as the backlog needs"
    )
    run.add_argument("--max-processes", type=int, help="with --processes auto: at most N (default: the CPU cores)")
    run.add_argument("--claim-idle-ms", type=int, help="take over entries idle this long (default 60000)")
    run.add_argument("--read-count", type=int, help="entries per read (default 500)")
    run.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    run.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on PORT")
    run.add_argument("--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)")
    run.add_argument(
        "--cold-store",
        metavar="PATH|URL",
        help="write the summary tier's expired batches there as Parquet before they leave Redis: a directory "
        "or an fsspec URL such as s3://bucket/prefix ($PARTARCHIVE_COLD_STORE; a URL with a password only there)",
    )
    run.add_argument(
        "--adopt-elk",
        action="store_true",
        default=None,
        help="also import and remove what elk_coordinator's Go workers complete (needs --elk-prefix)",
    )

    worker = sub.add_parser(
        "worker", parents=[common], help="run a worker runtime: MODULE:FUNCTION(partition, lease) on the partitions"
    )
    worker.add_argument("function", metavar="MODULE:FUNCTION", help="the function that processes one partition")
    worker.add_argument("--window", type=int, metavar="N", help="partitions worked on at once per process (default 3)")
    worker.add_argument("--processes", type=int, default=1, metavar="N", help="N worker processes under a supervisor")
    worker.add_argument("--worker-id", metavar="PREFIX", help="each process's id starts with PREFIX (default: none)")
    worker.add_argument("--heartbeat", type=float, metavar="S", help="beat every S seconds (default 10)")
    worker.add_argument("--lease", type=float, metavar="S", help="a lease not renewed for S s is taken over (300)")
    worker.add_argument(
        "--drain-timeout", type=float, metavar="S", help="after SIGTERM: S seconds to finish, then hand back (10)"
    )
    worker.add_argument("--until-empty", action="store_true", help="stop once nothing is pending or running")
    worker.add_argument("--max-attempts", type=int, metavar="N", help="attempts a partition gets (default 3)")
    worker.add_argument("--retry-backoff", type=float, metavar="S", help="first back-off before a retry (default 1)")
    worker.add_argument(
        "--planner",
        metavar="MODULE:OBJECT",
        help="lead: create the partitions as the data grows, asking this planner (a class, made with no "
        "arguments, or an object) its partition_size() and next_max_id(start_id, size)",
    )
    worker.add_argument("--leader-lease", type=float, metavar="S", help="the leader's lease, renewed every third (30)")
    worker.add_argument(
        "--allocation-interval", type=float, metavar="S", help="how often the leader plans and checks (30)"
    )
    worker.add_argument(
        "--partition-multiple", type=int, metavar="N", help="pending partitions kept ahead per window slot (5)"
    )
    worker.add_argument("--max-pending", type=int, metavar="N", help="and never more than N pending (1000)")
    worker.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on PORT")
    worker.add_argument("--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)")

    workers = sub.add_parser("workers", parents=[common], help="live worker runtime processes: host, pid, in hand")
    workers.add_argument("--json", action="store_true")

    plan = sub.add_parser(
        "plan", parents=[common], help="a fixed plan: partitions for IDs A..B of S IDs each, once; or show the plan"
    )
    plan.add_argument("--first", type=int, metavar="A", help="the first ID")
    plan.add_argument("--last", type=int, metavar="B", help="the last ID (included)")
    plan.add_argument("--size", type=int, metavar="S", help="IDs a partition holds")
    plan.add_argument("--json", action="store_true")

    serve = sub.add_parser("serve", parents=[common], help="the query-router HTTP API and /metrics")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--log-level", default="warning", choices=LOG_LEVELS)

    get = sub.add_parser("get", parents=[common], help="where is partition PID")
    get.add_argument("pid", help="partition id")
    get.add_argument("--json", action="store_true")

    find = sub.add_parser("find", parents=[common], help="partitions by worker, completion time, duration, ids, status")
    find.add_argument("--worker", metavar="W", help="completed (or worked on) by worker W")
    find.add_argument("--completed-after", metavar="T", help="completed at T or later (ISO 8601 or unix seconds)")
    find.add_argument("--completed-before", metavar="T", help="completed before T (ISO 8601 or unix seconds)")
    find.add_argument("--min-duration", metavar="S", help="took at least S seconds")
    find.add_argument("--max-duration", metavar="S", help="took at most S seconds")
    find.add_argument("--ids", metavar="A-B", help="partition ids A to B (or one id)")
    find.add_argument(
        "--status", metavar="S", help="completed, pending, claimed, running, failed, a comma list, or any (default)"
    )
    find.add_argument("--limit", type=int, default=100, help="at most N partitions (default 100)")
    find.add_argument("--cursor", metavar="C", help="resume where a search with the same filters ended")
    find.add_argument("--json", action="store_true", help="JSON Lines: a partition a line, then {\"search\": ...}")

    status = sub.add_parser("status", parents=[common], help="layer sizes and queue backlog")
    status.add_argument("--json", action="store_true")
    status.add_argument(
        "--watch", nargs="?", type=float, const=2.0, metavar="SECONDS", help="print again every SECONDS (default 2)"
    )

    stats = sub.add_parser("stats", parents=[common], help="merged statistics; verify or repair them")
    stats.add_argument("action", nargs="?", choices=["show", "verify"], default="show")
    stats.add_argument("--repair", action="store_true", help="with verify: rebuild what the stored data proves")
    stats.add_argument("--range", type=int, dest="range_no", help="show one ID range's statistics")
    stats.add_argument("--day", help="show one UTC day's time series (YYYY-MM-DD)")
    stats.add_argument("--json", action="store_true")

    migrate = sub.add_parser("migrate", help="take over an elk_coordinator deployment")
    migrate_sub = migrate.add_subparsers(dest="migrate_command", required=True, parser_class=_Parser)
    from_elk = migrate_sub.add_parser("from-elk", parents=[common], help="import an elk_coordinator deployment")
    from_elk.add_argument("--prefix", help="Go's KeyPrefix option (e.g. 'my-app:'); without it, list deployments")
    from_elk.add_argument("--dry-run", action="store_true", help="survey only: write nothing")
    from_elk.add_argument("--delete-source", action="store_true", help="delete imported source records once verified")
    from_elk.add_argument("--rejects", metavar="FILE", help="also write the reject list to FILE (JSON Lines)")
    from_elk.add_argument("--json", action="store_true")
    from_elk.add_argument("--no-progress", action="store_true")

    export = sub.add_parser("export", parents=[common], help="every archived partition, as JSON Lines or into a hash")
    export.add_argument("--format", choices=["elk", "native", "parquet"], default="elk", dest="fmt")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--output", metavar="FILE|DIR", help="write JSON Lines to FILE ('-' = stdout); parquet: files under DIR"
    )
    target.add_argument("--into-hash", metavar="KEY", help="HSET every record into this hash (e.g. Go's elk_archived)")

    functions = sub.add_parser(
        "functions", parents=[common], help="the worker's Lua function libraries on the server, by release"
    )
    functions.add_argument(
        "--unload-old", action="store_true", help="unload the libraries of other releases (safe while they run)"
    )
    functions.add_argument("--json", action="store_true")

    dead = sub.add_parser("dead-letters", help="entries that could not be archived: list, show, requeue, purge")
    dead_sub = dead.add_subparsers(dest="dead_command", required=True, parser_class=_Parser)
    dead_list = dead_sub.add_parser("list", parents=[common], help="the oldest dead letters")
    dead_list.add_argument("--limit", type=int, default=20)
    dead_list.add_argument("--json", action="store_true")
    dead_show = dead_sub.add_parser("show", parents=[common], help="one dead letter, whole")
    dead_show.add_argument("id")
    dead_requeue = dead_sub.add_parser("requeue", parents=[common], help="put dead letters back on the queue")
    dead_requeue.add_argument("ids", nargs="*", metavar="ID")
    dead_requeue.add_argument("--all", action="store_true")
    dead_purge = dead_sub.add_parser("purge", parents=[common], help="delete dead letters")
    dead_purge.add_argument("--all", action="store_true")
    dead_purge.add_argument("--older-than", type=float, metavar="SECONDS")

    archivers = sub.add_parser("archivers", parents=[common], help="live archivers: host, pid, rate, uncommitted")
    archivers.add_argument("--all", action="store_true", help="archivers that stopped beating too")
    archivers.add_argument("--json", action="store_true")

    retention = sub.add_parser("retention", parents=[common], help="show or set the summary tier's retention")
    retention.add_argument("seconds", nargs="?", type=int, help="new retention in seconds (stored; applies at once)")

    archival = sub.add_parser("archival", help="pause, resume or roll out archiving completions (gray release)")
    archival_sub = archival.add_subparsers(dest="archival_command", required=True, parser_class=_Parser)
    for name, text in (
        ("pause", "completions stay in the active hash (status completed); nothing new is queued"),
        ("resume", "queue what completed while paused (in the share), then archive as before"),
        ("status", "whether archival is paused, its share, and what waits"),
        ("rollout", "archive the completions of PERCENT of the partitions (0-100, by a stable hash)"),
        ("report", "the archived and the held cohorts side by side"),
    ):
        step = archival_sub.add_parser(name, parents=[common], help=text)
        if name == "rollout":
            step.add_argument("percent", type=_percent, metavar="PERCENT")
        step.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", parents=[common], help="the whole system on an embedded engine")
    demo.add_argument("--partitions", type=int, default=20_000)
    demo.add_argument("--workers", type=int, default=8)
    demo.add_argument("--json", action="store_true")
    demo.add_argument("--no-progress", action="store_true")
    return parser


def check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise CliError(f"port must be in 1..65535, got {port}")

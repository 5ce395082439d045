"""The ``partarchive`` command line: each subcommand (its arguments: `archiver.cli_args`).

Every failure is one line on stderr and a non-zero exit: 1 for "not found", 2 for errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from archiver.cli_args import EXIT_ERROR, EXIT_NOT_FOUND, CliError, build_parser
from archiver.config import DEFAULT_REDIS_URL, Config
from archiver.engine import connect, open_engine, redact_text, redact_url
from archiver.output import print_json
from codec.errors import PartArchiveError
from layers.keys import check_namespace
from layers.meta import is_wrong_type, wrong_type_error


def _namespaces(args: argparse.Namespace) -> list[str]:
    """The namespaces ``run`` serves: ``--namespace`` (or $PARTARCHIVE_NAMESPACE) split on commas."""
    raw = args.namespace if args.namespace is not None else os.environ.get("PARTARCHIVE_NAMESPACE")
    if raw is None or "," not in raw:
        return [raw] if raw else []
    if args.command != "run":
        raise CliError(f"{args.command} takes one namespace; only run serves several (a,b,c)")
    names = [check_namespace(n.strip()) for n in raw.split(",")]
    if len(set(names)) != len(names):
        raise CliError(f"a namespace is named twice in {raw!r}")
    return names


def _config(args: argparse.Namespace) -> Config:
    args.namespaces = _namespaces(args)
    return Config.from_env(
        redis_url=args.redis_url,
        namespace=args.namespaces[0] if args.namespaces else None,
        cluster=args.cluster,
        claim_idle_ms=getattr(args, "claim_idle_ms", None),
        read_count=getattr(args, "read_count", None),
        elk_prefix=args.elk_prefix,
        adopt_elk=getattr(args, "adopt_elk", None),
    )


def _client(config: Config) -> redis.Redis:
    return connect(config.redis_url or DEFAULT_REDIS_URL, cluster=config.cluster)


def cmd_run(args: argparse.Namespace, config: Config) -> int:
    from archiver.daemon import ArchiverDaemon
    from archiver.logs import configure_logging

    configure_logging(args.log_level)
    if not 1 <= args.processes <= 64:
        raise CliError("--processes must be in 1..64")
    if args.processes > 1:
        from archiver.supervisor import Supervisor, child_commands

        if args.consumer:
            raise CliError("--consumer names one process: with --processes each child names itself")
        if args.metrics_port is not None:
            _check_port(args.metrics_port + args.processes - 1)
        commands = child_commands(args.argv, args.processes, args.metrics_port)
        return Supervisor(commands, config.drain_timeout_s).run()
    client = _client(config)
    if len(args.namespaces) > 1:
        from archiver.multi import MultiArchiver

        if args.metrics_port is not None:
            raise CliError("--metrics-port reports one namespace: serve it per namespace (partarchive serve)")
        configs = [replace(config, namespace=name) for name in args.namespaces]
        MultiArchiver(client, configs, consumer=args.consumer).run()
        return 0
    daemon = ArchiverDaemon(client, config, consumer=args.consumer)
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        from archiver.metrics import register_state_collector

        _check_port(args.metrics_port)
        register_state_collector(client, daemon.keys)
        try:
            start_http_server(args.metrics_port, addr=args.metrics_host)
        except OSError as exc:
            where = f"{args.metrics_host}:{args.metrics_port}"
            raise CliError(f"cannot serve metrics on {where}: {exc.strerror or exc}") from None
    daemon.run()
    return 0


def _human(key: str, value: Any) -> Any:
    """Unix times shown as UTC dates too (``--json`` keeps the plain numbers)."""
    if (key.endswith("_at") or key == "last_heartbeat") and isinstance(value, int) and 0 < value < 2**34:
        return f"{value} ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(value))})"
    return value


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise CliError(f"port must be in 1..65535, got {port}")


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    try:
        import uvicorn

        from archiver.web import create_app
    except ImportError as exc:
        raise CliError(
            f"serve needs the server extra ({exc.name} is not installed): pip install 'partarchive[server]'"
        ) from None
    from archiver.logs import configure_logging, stdlib_log_config

    _check_port(args.port)
    configure_logging(args.log_level)
    client = _client(config)
    app = create_app(client, config)
    uvicorn.run(app, host=args.host, port=args.port, log_config=stdlib_log_config(args.log_level), access_log=False)
    return 0


def cmd_get(args: argparse.Namespace, config: Config) -> int:
    from archiver.namespace import Namespace
    from archiver.router import QueryRouter

    try:
        pid = int(args.pid)
    except ValueError:
        raise CliError(f"partition id must be an integer, got {args.pid!r}") from None
    client = _client(config)
    ns = Namespace(client, config)
    answer = QueryRouter(client, ns.keys, archive=ns.archive, summary_lookup=ns.stats.range_summary).get(pid)
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


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    from archiver.namespace import Namespace
    from archiver.status import collect_status

    client = _client(config)
    if not Namespace(client, config).exists():
        print(f"partarchive: no such namespace {config.namespace!r} on this server", file=sys.stderr)
        return EXIT_NOT_FOUND
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
    from archiver.status import format_status

    if as_json:
        print_json(report)
        return
    if clear:
        print("\033[H\033[2J", end="")
    print(format_status(report))


def cmd_archivers(args: argparse.Namespace, config: Config) -> int:
    from archiver.namespace import Namespace
    from archiver.status import format_archivers

    ns = Namespace(_client(config), config)
    found = ns.liveness.archivers(include_dead=args.all)
    if args.json:
        print_json([h.to_dict() for h in found])
    else:
        print(format_archivers(found, config.namespace))
    return 0


def cmd_demo(args: argparse.Namespace, config: Config) -> int:
    from archiver.demo import run_demo
    from archiver.logs import configure_logging

    configure_logging("warning")  # the report is the output; warnings go to stderr

    if not 0 <= args.partitions <= 1_000_000:
        raise CliError("--partitions must be in 0..1000000")
    if not 1 <= args.workers <= 256:
        raise CliError("--workers must be in 1..256")
    with open_engine(config.redis_url, cluster=config.cluster) as engine:
        where = redact_url(engine.url)
        if engine.embedded:
            where = "a local cluster of 3 valkey-servers" if config.cluster else "embedded valkey-server"
        if not args.json:
            print(f"engine: {where}; {args.partitions} partitions, {args.workers} workers")
        report = run_demo(
            engine.client,
            config,
            partitions=args.partitions,
            workers=args.workers,
            engine=where,
            progress=not (args.no_progress or args.json),
        )
    if args.json:
        print_json(report.to_dict())
    else:
        rows = [
            ("partitions created", report.partitions),
            ("completed", report.completed),
            ("failures retried", report.failures_retried),
            ("active hash size", report.active_size),
            ("archived (index)", report.archived),
            ("found by the router", f"{report.found} ({report.found_in_archive} from the archive)"),
            ("archive queue length", report.queue_length),
            ("statistics: completed", report.stats_completed),
            ("elapsed", f"{report.elapsed_s} s"),
        ]
        print("\npartarchive demo report")
        for label, value in rows:
            print(f"  {label:22} {value}")
        print("  result                 " + ("OK" if report.ok else "MISMATCH"))
    return 0 if report.ok else EXIT_ERROR


def cmd_stats(args: argparse.Namespace, config: Config) -> int:
    from archiver.stats_cli import show_stats, verify_stats

    client = _client(config)
    if args.action == "verify":
        return verify_stats(client, config, repair=args.repair, as_json=args.json)
    if args.repair:
        raise CliError("--repair goes with 'stats verify'")
    return show_stats(client, config, range_no=args.range_no, day=args.day, as_json=args.json)


def cmd_dead_letters(args: argparse.Namespace, config: Config) -> int:
    from archiver.dead_letters_cli import dead_letters

    return dead_letters(_client(config), config, args)


def cmd_retention(args: argparse.Namespace, config: Config) -> int:
    from archiver.namespace import Namespace

    archive = Namespace(_client(config), config).archive
    if args.seconds is None:
        print(f"retention {archive.retention_s()} s (summary tier: detail kept this long after completion)")
    else:
        print(f"retention set to {archive.set_retention(args.seconds)} s; reads and the sweep use it now")
    return 0


def cmd_migrate(args: argparse.Namespace, config: Config) -> int:
    from archiver.migrate_cli import migrate_from_elk

    client = _client(config)
    return migrate_from_elk(client, config, args)


def cmd_export(args: argparse.Namespace, config: Config) -> int:
    from archiver.migrate_cli import export

    client = _client(config)
    return export(client, config, fmt=args.fmt, output=args.output, into_hash=args.into_hash)


COMMANDS = {
    "run": cmd_run,
    "serve": cmd_serve,
    "get": cmd_get,
    "status": cmd_status,
    "stats": cmd_stats,
    "demo": cmd_demo,
    "migrate": cmd_migrate,
    "retention": cmd_retention,
    "archivers": cmd_archivers,
    "dead-letters": cmd_dead_letters,
    "export": cmd_export,
}


def main(argv: Sequence[str] | None = None) -> int:
    config: Config | None = None
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        config = _config(args)
        return COMMANDS[args.command](args, config)
    except CliError as exc:
        _fail(f"error: {exc}")
        return EXIT_ERROR
    except PartArchiveError as exc:
        _fail(f"error: {exc}")
        return EXIT_ERROR
    except redis.RedisError as exc:
        if is_wrong_type(exc) and config is not None:
            typed = wrong_type_error(_client(config), config.keys)
            _fail(f"error: {typed}")
        else:
            _fail(f"redis error: {exc}")
        return EXIT_ERROR
    except RedisClusterException as exc:  # not a RedisError: the cluster's layout or reach
        _fail(f"redis cluster error: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # a file named on the command line (--output, --rejects)
        _fail(f"error: {exc.strerror or exc}: {exc.filename or ''}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("partarchive: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _fail(message: str) -> None:
    """The one line an operator sees; any URL credentials in it (echoed input) replaced."""
    print(f"partarchive: {redact_text(message)}", file=sys.stderr)


def entry_point() -> None:
    sys.exit(main())

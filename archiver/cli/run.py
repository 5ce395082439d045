"""``partarchive run``: the archiver daemon (one namespace, several, or several processes)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from archiver.cli.args import CliError, check_port
from archiver.config import Config
from archiver.engine import client_for


def command(args: argparse.Namespace, config: Config) -> int:
    from archiver.daemon.loop import ArchiverDaemon
    from archiver.logs import configure_logging

    configure_logging(args.log_level)
    if not 1 <= args.processes <= 64:
        raise CliError("--processes must be in 1..64")
    if args.processes > 1:
        from archiver.daemon.supervisor import Supervisor, child_commands

        if args.consumer:
            raise CliError("--consumer names one process: with --processes each child names itself")
        if args.metrics_port is not None:
            check_port(args.metrics_port + args.processes - 1)
        commands = child_commands(args.argv, args.processes, args.metrics_port)
        return Supervisor(commands, config.drain_timeout_s).run()
    client = client_for(config)
    if len(args.namespaces) > 1:
        from archiver.daemon.multi import MultiArchiver

        if args.metrics_port is not None:
            raise CliError("--metrics-port reports one namespace: serve it per namespace (partarchive serve)")
        configs = [replace(config, namespace=name) for name in args.namespaces]
        MultiArchiver(client, configs, consumer=args.consumer).run()
        return 0
    daemon = ArchiverDaemon(client, config, consumer=args.consumer)
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        from archiver.metrics import register_state_collector

        check_port(args.metrics_port)
        register_state_collector(client, daemon.keys)
        try:
            start_http_server(args.metrics_port, addr=args.metrics_host)
        except OSError as exc:
            where = f"{args.metrics_host}:{args.metrics_port}"
            raise CliError(f"cannot serve metrics on {where}: {exc.strerror or exc}") from None
    daemon.run()
    return 0

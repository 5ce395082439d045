"""``partarchive serve``: the HTTP API, the dashboard and ``/metrics`` (needs the server extra)."""

from __future__ import annotations

import argparse

from archiver.cli.args import CliError, check_port
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.engine import async_client_for


def command(args: argparse.Namespace, config: Config) -> int:
    try:
        import uvicorn

        from archiver.web import create_app
    except ImportError as exc:
        raise CliError(
            f"serve needs the server extra ({exc.name} is not installed): pip install 'partarchive[server]'"
        ) from None
    from archiver.logs import configure_logging, stdlib_log_config

    check_port(args.port)
    configure_logging(args.log_level)
    ns = open_namespace(config, existing=False)
    app = create_app(ns.redis, ns.config, async_client=lambda: async_client_for(ns.config))
    uvicorn.run(app, host=args.host, port=args.port, log_config=stdlib_log_config(args.log_level), access_log=False)
    return 0

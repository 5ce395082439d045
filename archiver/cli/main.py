"""``partarchive``: parse the arguments, build the configuration, run one command's module.

Every failure is one line on stderr and a non-zero exit: 1 for "not found", 2 for errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import redis
from redis.exceptions import RedisClusterException

from archiver.cli.args import EXIT_ERROR, EXIT_NOT_FOUND, CliError, build_parser
from archiver.cli.target import NoSuchNamespace
from archiver.config import Config
from archiver.engine import client_for, redact_text
from codec.errors import PartArchiveError
from layers.keys import check_namespace
from layers.plumbing.key_types import is_wrong_type, wrong_type_error

#: Each command's module in `archiver.cli`, imported when the command runs (``get`` never loads the web stack).
COMMANDS = {
    "run": "run",
    "serve": "serve",
    "get": "get",
    "find": "find",
    "status": "status",
    "stats": "stats",
    "demo": "demo",
    "migrate": "migrate",
    "retention": "retention",
    "archivers": "archivers",
    "dead-letters": "dead_letters",
    "export": "export",
    "archival": "archival",
    "worker": "worker",
    "workers": "workers",
    "functions": "functions",
    "plan": "plan",
}


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
    cold_store = getattr(args, "cold_store", None)
    if cold_store is not None and redact_text(cold_store) != cold_store:
        raise CliError(
            "--cold-store carries a password, which any process list shows: set the URL in "
            "PARTARCHIVE_COLD_STORE instead (or give the filesystem its credentials its own way)"
        )
    return Config.from_env(
        redis_url=args.redis_url,
        namespace=args.namespaces[0] if args.namespaces else None,
        cluster=args.cluster,
        sentinel=args.sentinel,
        sentinel_master=args.sentinel_master,
        claim_idle_ms=getattr(args, "claim_idle_ms", None),
        read_count=getattr(args, "read_count", None),
        elk_prefix=args.elk_prefix,
        elk_namespace=getattr(args, "elk_namespace", None),
        adopt_elk=getattr(args, "adopt_elk", None),
        cold_store=cold_store,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config: Config | None = None
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        config = _config(args)
        module = importlib.import_module(f"archiver.cli.{COMMANDS[args.command]}")
        result: int = module.command(args, config)
        return result
    except NoSuchNamespace as exc:
        _fail(str(exc))
        return EXIT_NOT_FOUND
    except CliError as exc:
        _fail(f"error: {exc}")
        return EXIT_ERROR
    except PartArchiveError as exc:
        _fail(f"error: {exc}")
        return EXIT_ERROR
    except redis.RedisError as exc:
        if is_wrong_type(exc) and config is not None:
            typed = wrong_type_error(client_for(config), config.keys)
            _fail(f"error: {typed}")
        else:
            _fail(f"redis error: {exc}")
        return EXIT_ERROR
    except RedisClusterException as exc:  # not a RedisError: the cluster's layout or reach
        _fail(f"redis cluster error: {exc}")
        return EXIT_ERROR
    except BrokenPipeError:  # the reader went away (``| head``): not an error of ours (an OSError: first)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file named on the command line (--output, --rejects)
        _fail(f"error: {exc.strerror or exc}: {exc.filename or ''}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("partarchive: interrupted", file=sys.stderr)
        return 130


def _fail(message: str) -> None:
    """The one line an operator sees; any URL credentials in it (echoed input) replaced."""
    print(f"partarchive: {redact_text(message)}", file=sys.stderr)


def entry_point() -> None:
    sys.exit(main())

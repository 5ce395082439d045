"""``partarchive retention [SECONDS]``: show or change the summary tier's stored retention."""

from __future__ import annotations

import argparse

from archiver.cli.target import open_namespace
from archiver.config import Config


def command(args: argparse.Namespace, config: Config) -> int:
    archive = open_namespace(config).archive
    if args.seconds is None:
        print(f"retention {archive.retention_s()} s (summary tier: detail kept this long after completion)")
    else:
        print(f"retention set to {archive.set_retention(args.seconds)} s; reads and the sweep use it now")
    return 0

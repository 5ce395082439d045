"""``partarchive dead-letters``: entries that could not be archived, listed, shown, requeued through
the same exactly-once path, or purged."""

from __future__ import annotations

import argparse
import sys

from archiver.cli.args import EXIT_NOT_FOUND, CliError
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json


def command(args: argparse.Namespace, config: Config) -> int:
    """``partarchive dead-letters list | show ID | requeue (ID... | --all) | purge (--all | --older-than S)``."""
    queue = open_namespace(config).queue
    if args.dead_command == "list":
        if not 1 <= args.limit <= 10_000:
            raise CliError("--limit must be in 1..10000")
        letters = queue.dead_letters(args.limit)
        if args.json:
            print_json(letters)
        for d in [] if args.json else letters:
            print(f"{d['id']}  {d['entry']}  {d['reason']}")
        if not args.json and not letters:
            print("no dead letters")
        return 0
    if args.dead_command == "show":
        letter = queue.dead_letter_by_id(_stream_id(args.id))
        if letter is None:
            print(f"partarchive: no dead letter {args.id}", file=sys.stderr)
            return EXIT_NOT_FOUND
        print_json(letter)
        return 0
    if args.dead_command == "requeue":
        if bool(args.ids) == bool(args.all):
            raise CliError("give dead-letter ids or --all")
        ids = [_stream_id(i) for i in args.ids] or [d["id"] for d in queue.dead_letters(10_000)]
        requeued, skipped = queue.requeue(ids)
        print(f"requeued {requeued}" + (f"; {skipped} skipped (gone, or not a queue entry)" if skipped else ""))
        return 0
    if bool(args.all) == (args.older_than is not None):
        raise CliError("give --all or --older-than SECONDS")
    if args.older_than is not None and args.older_than < 0:
        raise CliError("--older-than must be >= 0")
    older = None if args.all else int(args.older_than * 1000)
    print(f"purged {queue.purge_dead_letters(older)} dead letters")
    return 0


def _stream_id(text: str) -> str:
    ms, sep, seq = text.partition("-")
    if not (ms.isdigit() and (not sep or seq.isdigit())):
        raise CliError(f"not a stream entry id: {text!r}")
    return text

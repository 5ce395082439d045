"""``partarchive dead-letters``: what could not be archived or claimed, listed, shown, requeued
through the same exactly-once path, or purged.

Two kinds: the dead-letter stream's entries (ids ``<ms>-<seq>``), and active records no reader
can read, set aside out of the claim indexes (ids ``active:<pid>``, `KeySchema.unreadable`). The
record stays in the active hash: ``show`` prints it as stored, ``requeue`` puts it back in the
index of its status once it reads (mended by hand), ``purge`` leaves it alone.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from archiver.cli.args import EXIT_NOT_FOUND, CliError
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.namespace import Namespace
from archiver.output import print_json
from codec.validate import check_partition_id
from layers.plumbing.replies import as_text

_ACTIVE = "active:"
_UNREADABLE = "unreadable record in the active hash, out of the claim indexes: mend it, then requeue"


def command(args: argparse.Namespace, config: Config) -> int:
    """``partarchive dead-letters list | show ID | requeue (ID... | --all) | purge (--all | --older-than S)``."""
    ns = open_namespace(config)
    queue = ns.queue
    if args.dead_command == "list":
        if not 1 <= args.limit <= 10_000:
            raise CliError("--limit must be in 1..10000")
        letters = queue.dead_letters(args.limit) + _unreadable(ns, args.limit)
        if args.json:
            print_json(letters)
        for d in [] if args.json else letters:
            print(f"{d['id']}  {d['entry']}  {d['reason']}")
        if not args.json and not letters:
            print("no dead letters")
        return 0
    if args.dead_command == "show":
        active = args.id.startswith(_ACTIVE)
        letter = _active_letter(ns, args.id) if active else queue.dead_letter_by_id(_stream_id(args.id))
        if letter is None:
            print(f"partarchive: no dead letter {args.id}", file=sys.stderr)
            return EXIT_NOT_FOUND
        print_json(letter)
        return 0
    if args.dead_command == "requeue":
        if bool(args.ids) == bool(args.all):
            raise CliError("give dead-letter ids or --all")
        active = [_active_pid(i) for i in args.ids if i.startswith(_ACTIVE)]
        ids = [_stream_id(i) for i in args.ids if not i.startswith(_ACTIVE)]
        if args.all:
            ids = [d["id"] for d in queue.dead_letters(10_000)]
            active = [pid for pid, _ in ns.active.unreadable(10_000)]
        requeued, skipped = queue.requeue(ids) if ids else (0, 0)
        still = ns.active.requeue_unreadable(active) if active else []
        print(f"requeued {requeued + len(active) - len(still)}"
              + (f"; {skipped} skipped (gone, or not a queue entry)" if skipped else "")
              + (f"; {len(still)} still unreadable ({_ids(still)})" if still else ""))  # fmt: skip
        return 0
    if bool(args.all) == (args.older_than is not None):
        raise CliError("give --all or --older-than SECONDS")
    if args.older_than is not None and args.older_than < 0:
        raise CliError("--older-than must be >= 0")
    older = None if args.all else int(args.older_than * 1000)
    print(f"purged {queue.purge_dead_letters(older)} dead letters (unreadable active records are kept)")
    return 0


def _unreadable(ns: Namespace, limit: int) -> list[dict[str, Any]]:
    return [
        {"id": f"{_ACTIVE}{pid}", "entry": f"{_ACTIVE}{pid}", "reason": _UNREADABLE, "set_aside_ms": since}
        for pid, since in ns.active.unreadable(limit)
    ]


def _active_letter(ns: Namespace, text: str) -> dict[str, Any] | None:
    pid = _active_pid(text)
    since = ns.redis.zscore(ns.keys.unreadable, str(pid))
    if since is None:
        return None
    raw = ns.redis.hget(ns.keys.active, str(pid))
    record = None if raw is None else as_text(raw)  # type: ignore[arg-type]
    return {"id": text, "entry": text, "reason": _UNREADABLE, "set_aside_ms": int(since), "record": record}  # type: ignore[arg-type]


def _active_pid(text: str) -> int:
    digits = text.removeprefix(_ACTIVE)
    if not digits.isdigit():
        raise CliError(f"not a partition id: {text!r} (active:<pid>)")
    return check_partition_id(int(digits))


def _ids(pids: list[int]) -> str:
    shown = ", ".join(f"{_ACTIVE}{p}" for p in pids[:5])
    return shown + (f" and {len(pids) - 5} more" if len(pids) > 5 else "")


def _stream_id(text: str) -> str:
    ms, sep, seq = text.partition("-")
    if not (ms.isdigit() and (not sep or seq.isdigit())):
        raise CliError(f"not a stream entry id: {text!r}")
    return text

"""``partarchive archival pause|resume|status [--json]``: stop archiving new completions and
start again (the progressive rollback; `layers.archival`)."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import socket

from archiver.config import Config
from archiver.engine import client_for
from archiver.namespace import Namespace
from archiver.output import print_json
from layers.archival import ArchivalState


def command(args: argparse.Namespace, config: Config) -> int:
    ns = Namespace(client_for(config), config)
    action = args.archival_command
    queued = None
    if action == "pause":
        state = ns.archival.pause(_operator())
    elif action == "resume":
        queued = ns.archival.resume()
        state = ns.archival.state()
    else:
        state = ns.archival.state()
    backlog = ns.queue.state().length
    if args.json:
        print_json(state.to_dict() | {"queue_backlog": backlog} | ({} if queued is None else {"queued": queued}))
        return 0
    if action == "resume":
        print(f"archival resumed: {queued:,} partitions completed while paused sent to the archive queue")
    print(format_archival(state, backlog))
    return 0


def format_archival(state: ArchivalState, backlog: int) -> str:
    if not state.paused:
        text = f"archival: running (archive queue backlog {backlog:,})"
        if state.held:
            text += f"; {state.held:,} partitions completed while paused still to be queued"
        return text
    since = "an unknown time" if state.since is None else dt.datetime.fromtimestamp(state.since, dt.UTC).isoformat(
        timespec="seconds"
    )
    return (
        f"archival: paused since {since}{f' by {state.by}' if state.by else ''}\n"
        f"  {state.held:,} completed partitions kept in the active hash (status completed), queued on resume\n"
        f"  {backlog:,} entries queued before the pause are still being archived\n"
        "  resume with: partarchive archival resume"
    )


def _operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"

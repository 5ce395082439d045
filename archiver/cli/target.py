"""The namespace a command works on: connected, and bound to the elk_coordinator KeyPrefix the
server keeps for it (`archiver.namespace.Namespace.bound`), so ``--namespace`` alone reaches it."""

from __future__ import annotations

from archiver.cli.args import CliError
from archiver.config import Config
from archiver.engine import client_for
from archiver.namespace import Namespace


class NoSuchNamespace(CliError):
    """The server holds nothing of the namespace a reading command names (exit 1, like "not found")."""


def open_namespace(config: Config, *, existing: bool = True) -> Namespace:
    """``existing``: refuse a namespace of which the server holds nothing (a typo, the wrong server)."""
    ns = Namespace.bound(client_for(config), config)
    if existing and not ns.exists():
        raise NoSuchNamespace(f"no such namespace {config.namespace!r} on this server")
    return ns

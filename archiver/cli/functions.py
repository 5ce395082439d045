"""``partarchive functions [--unload-old] [--json]``: the worker's Lua function libraries loaded on
the server, one a release (`layers.plumbing.scripts.library_names`), and after an upgrade the old
ones unloaded (`unload_old_libraries`). A process of an old release still running loads its
library again at its next step, so this is safe at any time; run it once every process runs the
new release, or it is only done again."""

from __future__ import annotations

import argparse

from archiver.config import Config
from archiver.engine import client_for
from archiver.output import print_json
from layers.plumbing.lua_sources import library
from layers.plumbing.scripts import library_names, unload_old_libraries


def command(args: argparse.Namespace, config: Config) -> int:
    client = client_for(config)
    current = library().name
    unloaded = unload_old_libraries(client) if args.unload_old else []
    loaded = library_names(client)
    if args.json:
        print_json({"this_release": current, "loaded": loaded, "unloaded": unloaded})
        return 0
    for name in loaded:
        print(f"{name}  {'this release' if name == current else 'another release'}")
    if not loaded:
        print("no partarchive function library loaded (Redis Cluster and servers without functions run scripts)")
    if args.unload_old:
        print(f"unloaded {len(unloaded)} of other releases" + (f": {', '.join(unloaded)}" if unloaded else ""))
    elif len(loaded) > (current in loaded):
        print("unload the other releases' with: partarchive functions --unload-old")
    return 0

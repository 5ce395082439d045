"""How one of the scripts in ``layers/<room>/lua`` is run, written once for both flavours.

`ScriptCore` holds what a client's runs have learnt (does the server have Redis Functions, which
scripts run as scripts because it refused the library, each script's SHA1) and gives the steps
(`layers.plumbing.drive`) of a run: FCALL of the worker's library, or EVALSHA; the library or the
script loaded where the server lacks it; a script whose node never saw it sent whole (EVAL) on
Redis Cluster; every run on Redis Cluster sent again while its slot moves
(`layers.plumbing.slot_moves.riding_out`); and an error Redis answers with ``user_script:N`` named
by the file and line of the script's own source (`layers.plumbing.scripts.located`).
`layers.plumbing.scripts.Scripts` drives them blocking, `layers.plumbing.scripts_async.AsyncScripts`
awaits them.

The worker's hot path pays nothing for this: a driver sends `first` itself and hands the steps
only the error it got, if any.
"""

from __future__ import annotations

import hashlib
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from layers.plumbing.drive import Send, Steps
from layers.plumbing.scripts import (
    LIBRARY_SCRIPTS,
    is_missing_function,
    lacks_functions,
    library,
    located,
    refuses_load,
    script_source,
)
from layers.plumbing.slot_moves import riding_out


class ScriptCore:
    """The script runs of one client (no I/O: the flavours drive its steps)."""

    def __init__(self, *, cluster: bool) -> None:
        self.cluster = cluster
        #: The library (`LIBRARY_SCRIPTS`) runs as functions: not on Redis Cluster (redis-py would
        #: ask the server for an FCALL's keys before every call), nor once the server said it has none.
        self.functions = not cluster
        self.as_scripts: set[str] = set()  # read-only ones run as scripts: the server refused the library
        self._shas: dict[str, str] = {}

    def sha(self, name: str) -> str:
        """The SHA1 of script ``name`` as sent (`script_source`)."""
        sha = self._shas.get(name)
        if sha is None:
            sha = self._shas[name] = hashlib.sha1(script_source(name).encode()).hexdigest()
        return sha

    def _as_function(self, name: str) -> bool:
        return self.functions and name in LIBRARY_SCRIPTS and name not in self.as_scripts

    def first(self, name: str, keys: list[str], args: list[Any]) -> Send | None:
        """The one command that runs ``name`` when all goes well; None on Redis Cluster, where each
        run is `steps` from the start."""
        if self.cluster:
            return None
        if self._as_function(name):
            return Send("fcall", (library().function(name), len(keys), *keys, *args))
        return Send("evalsha", (self.sha(name), len(keys), *keys, *args))

    def steps(self, name: str, keys: list[str], args: list[Any], failed: Exception | None = None) -> Steps[Any]:
        """Run script ``name``; ``failed`` is the error `first`, sent by the driver, got."""
        if self._as_function(name):
            return (yield from self._fcall(name, keys, args, failed))
        try:
            if not self.cluster:
                return (yield from self._script(name, keys, args, failed))
            return (yield from riding_out(lambda: self._script(name, keys, args), name))
        except NoScriptError:
            raise
        except ResponseError as exc:
            raise located(name, exc) from None

    def _script(self, name: str, keys: list[str], args: list[Any], failed: Exception | None = None) -> Steps[Any]:
        """EVALSHA; where the server has not loaded the script (restarted, SCRIPT FLUSH), SCRIPT LOAD
        and EVALSHA again, or on Redis Cluster EVAL, which loads it on the node that runs it (a new
        master, the target of an ASK: not necessarily one the client knows)."""
        call = (self.sha(name), len(keys), *keys, *args)
        try:
            return (yield from _sent(Send("evalsha", call), failed))
        except NoScriptError:
            if self.cluster:
                return (yield Send("eval", (script_source(name), *call[1:])))
            yield Send("script_load", (script_source(name),))
            return (yield Send("evalsha", call))

    def _fcall(self, name: str, keys: list[str], args: list[Any], failed: Exception | None) -> Steps[Any]:
        """FCALL; the library loaded where the server lacks it, or the script run instead where the
        server has no functions or refuses the library (`lacks_functions`, `refuses_load`)."""
        call = (library().function(name), len(keys), *keys, *args)
        for attempt in (1, 2):
            try:
                if attempt == 1:
                    return (yield from _sent(Send("fcall", call), failed))
                if not (yield from self._load(name)):  # refused: `name` runs as a script
                    return (yield from self.steps(name, keys, args))
                return (yield Send("fcall", call))
            except ResponseError as exc:
                if lacks_functions(exc):
                    self.functions = False
                    return (yield from self.steps(name, keys, args))
                if attempt == 2 or not is_missing_function(exc):
                    raise located(name, exc) from None
        raise AssertionError("unreachable")

    def _load(self, name: str) -> Steps[bool]:
        """FUNCTION LOAD the library; False where the server refused and script ``name`` can run
        instead (it is then run as a script from now on)."""
        try:
            yield Send("function_load", (library().source.text,))
        except ResponseError as exc:
            if "already exists" in str(exc):
                return True
            if not refuses_load(name, exc):
                raise
            self.as_scripts.add(name)
            return False
        return True


def _sent(command: Send, failed: Exception | None) -> Steps[Any]:
    """``command``'s reply; or, where the driver sent it already, the error it got."""
    if failed is not None:
        raise failed
    return (yield command)

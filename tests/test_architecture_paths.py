"""docs/architecture.md ends with one completion's path and one lookup's path, file by file, each in two
listings: the path's own files, then the shared plumbing it uses. These tests run both paths on the real
engine and hold the two listings together to the files whose code ran, every one named once and none
named that did not run, and each listing to the counts the document gives.

A file is counted when code of it runs: a function, a method or a generator of it is called or
resumed (`sys.setprofile`, in every thread), while the traced call runs and after a warm-up, so
what a process does once (loading the library, reading the tier before the first page) is not
in it. A Lua file is counted when a script that is it, or that includes it, is sent."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import redis
from fastapi.testclient import TestClient

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from archiver.web import create_app
from layers import ActiveLayer, KeySchema
from layers.archive.tiers import Tier
from layers.plumbing.lua_sources import assembled

ROOT = Path(__file__).resolve().parent.parent
_ROOT_PREFIX = f"{ROOT}/"
DOC = ROOT / "docs" / "architecture.md"
#: The functions of `layers.plumbing.scripts` every script sent goes through, named by their ``name``.
_SCRIPT_FUNCTIONS = {"sha", "first", "steps"}


class Ran:
    """The repository's Python files whose code ran, and the Lua files sent."""

    def __init__(self) -> None:
        self.python: set[str] = set()
        self.scripts: set[str] = set()
        self.on = True

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or not self.on:
            return
        path = frame.f_code.co_filename
        if not path.startswith(_ROOT_PREFIX):
            return
        relative = path[len(_ROOT_PREFIX) :]
        if relative.startswith((".venv/", "tests/")):
            return
        self.python.add(relative)
        if relative == "layers/plumbing/scripts.py" and frame.f_code.co_name in _SCRIPT_FUNCTIONS:
            self.scripts.add(frame.f_locals["name"])

    @property
    def lua(self) -> set[str]:
        return {file for name in self.scripts for file, _ in assembled(name).parts}


@contextmanager
def tracing() -> Iterator[Ran]:
    ran = Ran()
    threading.setprofile(ran.profile)
    sys.setprofile(ran.profile)
    try:
        yield ran
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


class Listing(NamedTuple):
    """The Python and Lua files one listing of a path names."""

    python: set[str]
    lua: set[str]


def _listing(block: str) -> Listing:
    python = set(re.findall(r"\b((?:archiver|codec|layers|stats)/[\w/]+\.py)\b", block))
    return Listing(python, set(re.findall(r"\b(_?\w+\.lua)\b", block)))


def documented(title: str) -> tuple[Listing, Listing, list[tuple[int, int]], tuple[int, int, int]]:
    """A path's two listings (its own files, then the shared plumbing it uses), the counts said under
    each, and the totals said last (Python files, Lua files, all)."""
    section = DOC.read_text(encoding="utf-8").split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```")[1::2]
    assert len(blocks) == 2, f"two listings under '{title}'"
    counts = [(int(py), int(lua)) for py, lua in re.findall(r"(\d+) Python files and (\d+) Lua files", section)]
    assert len(counts) == 3, f"the counts under '{title}': each listing's, then the totals"
    total = re.search(r"(\d+) Python files and (\d+) Lua files ran: (\d+) in all", section)
    assert total, f"the totals under '{title}'"
    own, shared = (_listing(block) for block in blocks)
    return own, shared, counts[:2], (int(total[1]), int(total[2]), int(total[3]))


def check(ran: Ran, title: str) -> None:
    own, shared, counts, total = documented(title)
    assert own.python & shared.python == set() and own.lua & shared.lua == set(), "named in both listings"
    python, lua = own.python | shared.python, own.lua | shared.lua
    assert sorted(ran.python - python) == [], "ran and not named"
    assert sorted(python - ran.python) == [], "named and did not run"
    assert sorted(ran.lua ^ lua) == []
    assert counts == [(len(own.python), len(own.lua)), (len(shared.python), len(shared.lua))]
    assert total == (len(python), len(lua), len(python) + len(lua))


def test_shared_plumbing_is_what_every_path_shares() -> None:
    """The second listing of each path names shared plumbing only: `layers/plumbing/` (with its Lua
    helpers), the key schema, the record and its checks."""
    shared_homes = ("layers/plumbing/", "layers/keys.py", "codec/record.py", "codec/validate.py")
    for title in ("One completion, file by file", "One lookup, file by file"):
        own, shared, _, _ = documented(title)
        assert sorted(f for f in shared.python if not f.startswith(shared_homes)) == []
        assert sorted(f for f in own.python if f.startswith(shared_homes)) == []
        assert shared.lua <= {path.name for path in (ROOT / "layers" / "plumbing" / "lua").glob("*.lua")}


def test_one_completion_runs_in_the_files_its_listing_names(real_redis: redis.Redis, namespace: str) -> None:
    """A batch tier on one server: the worker's ``complete`` (after its claim and start), then the
    archiver's page that seals the completion's batch and commits it. What the archiver does by the
    clock (maintenance, its health entry) is set apart: it is no completion's path, and would come
    into the trace or not with the speed of the machine."""
    config = Config(
        namespace=namespace,
        block_ms=50,
        compressed_from=1,
        batch_size=100,
        maintenance_interval_s=3600,
        health_interval_s=3600,
    )
    worker = ActiveLayer(real_redis, namespace)
    worker.create_partitions(1, 500 * 1000, 1000)
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    daemon.queue.ensure_group()

    def lives(count: int) -> None:
        for _ in range(count):
            part = worker.claim("w")
            assert part is not None
            worker.start(part.partition_id, "w")
            worker.complete(part.partition_id, "w")

    lives(199)  # partitions 1-199: batches 0 and 1 (of 100 partitions each from 0)
    drain(daemon)  # warm-up: the tier moved to compressed, the group, the scripts loaded
    assert daemon.archive.tier() is Tier.COMPRESSED
    part = worker.claim("w")
    assert part is not None
    worker.start(part.partition_id, "w")
    with tracing() as ran:
        worker.complete(part.partition_id, "w")
    lives(99)  # batch 2, whole
    with tracing() as archived:
        drain(daemon)
    ran.python |= archived.python
    ran.scripts |= archived.scripts
    assert daemon.archived == 299
    assert real_redis.bitcount(KeySchema(namespace).index) == 299
    check(ran, "One completion, file by file")


def test_one_lookup_runs_in_the_files_its_listing_names(real_redis: redis.Redis, namespace: str) -> None:
    """``GET /partitions/{id}`` of a partition in a sealed batch, through the HTTP app."""
    config = Config(namespace=namespace, block_ms=50, compressed_from=1, batch_size=100)
    worker = ActiveLayer(real_redis, namespace)
    worker.create_partitions(1, 200 * 1000, 1000)
    for _ in range(200):
        part = worker.claim("w")
        assert part is not None
        worker.complete(part.partition_id, "w")
    daemon = ArchiverDaemon(real_redis, config, consumer="t")
    daemon.queue.ensure_group()
    drain(daemon)
    app = create_app(real_redis, config)
    with tracing() as ran:
        ran.on = False  # on in the client's thread, started here, from the second request on
        with TestClient(app) as http:
            assert http.get("/partitions/7").json()["source"] == "archive:batch"  # warm-up
            ran.on = True
            answer = http.get("/partitions/8").json()
            ran.on = False
    assert (answer["source"], answer["partition"]["min_id"]) == ("archive:batch", 7001)
    check(ran, "One lookup, file by file")

"""Reading the archive a window of partition ids at a time, in bounded, paced round trips: what a
search (`stats.search`) reads, while archiving goes on at full speed.

Every round trip is a pipeline of at most `MAX_COMMANDS` commands whose replies come to at most
`MAX_REPLY_BYTES` (a shelf's size is read first, and one larger than that is read in slices of it),
so no call holds Redis for more than about a millisecond; and `ReadPacer` spaces them so that the
search's calls take at most a share of its time (`PACE_SHARE`): Redis serves archivers and workers
in between. The longest call is kept (`ReadPacer.longest_s`), for the benchmark to report.

A window's reads: the index bits (which partitions were ever archived), and for its batches the
expiry index's scores and the expired bits (whose detail left Redis, or is past its retention),
the cold map (which cold file holds a batch), the sealed blobs (shelf slots, and the batch keys of
versions before shelves while a namespace still has them), staged records and records in the simple
hash.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from codec.errors import DecodeError
from codec.framing import SHELF_SLOTS, shelf_slot, unpack_shelf, unshelved
from layers.archive.cold import add_map_reads
from layers.archive.places import bit_set, byte_of, shelf_of
from layers.keys import KeySchema

MAX_COMMANDS = 256
MAX_REPLY_BYTES = 128 * 1024
#: The share of a search's time its Redis calls may take (the rest is Redis's for everyone else) ...
PACE_SHARE = 0.5
#: ... once they have taken this much (a page's first reads, before it has anything to decode, go at once).
PACE_AFTER_S = 0.01
#: A command added to a pipeline (one call of one of its methods).
Command = Callable[[Any], object]


def command(method: str, *args: Any, **options: Any) -> Command:
    """The queuing of one command: ``command("hget", key, field)``."""
    return lambda pipe: getattr(pipe, method)(*args, **options)


class ReadPacer:
    """Sends pipelines for a reader, each bounded by the caller, spaced so that they take at most
    `PACE_SHARE` of the reader's time (after the first `PACE_AFTER_S`); keeps the longest and the count."""

    def __init__(self, client: redis.Redis, share: float = PACE_SHARE) -> None:
        self.redis = client
        self.share = share
        self.started = time.perf_counter()
        self.busy_s = 0.0
        self.longest_s = 0.0
        self.calls = 0

    def send(self, *commands: Command) -> list[Any]:
        """One round trip of these commands (`command`); their replies (errors raised)."""
        pipe = self.redis.pipeline(transaction=False)
        for one in commands:
            one(pipe)
        if not len(pipe):
            return []
        wait = (self.busy_s - PACE_AFTER_S) / self.share - (time.perf_counter() - self.started)
        if wait > 0:
            time.sleep(wait)
        started = time.perf_counter()
        replies = pipe.execute()
        spent = time.perf_counter() - started
        self.busy_s += spent
        self.longest_s = max(self.longest_s, spent)
        self.calls += 1
        return list(replies)

    def each(self, commands: Sequence[Command], sizes: Sequence[int] | None = None) -> list[Any]:
        """Send ``commands`` (one queuing function each, one command each) in as few bounded round
        trips as `MAX_COMMANDS` and `MAX_REPLY_BYTES` (``sizes``: each reply's expected bytes) allow;
        their replies in order."""
        out: list[Any] = []
        start = 0
        while start < len(commands):
            end, weight = start, 0
            while end < len(commands) and end - start < MAX_COMMANDS:
                size = sizes[end] if sizes is not None else 0
                if end > start and weight + size > MAX_REPLY_BYTES:
                    break
                weight += size
                end += 1
            out += self.send(*commands[start:end])
            start = end
        return out


@dataclass(slots=True)
class ArchiveState:
    """What a search reads of the archive once, before its windows."""

    max_pid: int
    batch_size: int
    tier: str
    retention_s: int | None
    cold_store: str | None
    shelved: bool  # no batch keys of versions before shelves are left
    simple: int  # records in the simple hash
    open_batches: set[int]


@dataclass(slots=True)
class Window:
    """The archive's partitions ``first .. last`` (whole batches) as stored."""

    first: int
    last: int
    index: bytes  # the index bitmap's bytes from ``first // 8``
    expiry: dict[int, float]  # batch -> newest completion, for batches in the expiry index
    expired: set[int]  # batches whose detail the sweep deleted
    cold: dict[int, int]  # batch -> cold file number (0: none)
    blobs: dict[int, list[bytes]] = field(default_factory=dict)  # batch -> its blobs (the shelf's first)
    damaged: dict[int, str] = field(default_factory=dict)  # batch -> why its shelf cannot be read
    staged: dict[int, dict[bytes, bytes]] = field(default_factory=dict)  # batch -> pid -> record
    simple: dict[int, bytes] = field(default_factory=dict)  # pid -> record

    def any_indexed(self, lo: int, hi: int) -> bool:
        """Whether any partition among ``lo .. hi`` was archived (whole bytes compared at once)."""
        base = self.first >> 3
        lo, hi = max(lo, base << 3), min(hi, ((base + len(self.index)) << 3) - 1)
        if lo > hi:
            return False
        a, z = (lo >> 3) - base, (hi >> 3) - base
        head = self.index[a] & (0xFF >> (lo & 7))
        if a == z:
            return bool(head & (0xFF << (7 - (hi & 7))))
        if head:
            return True
        middle = self.index[a + 1 : z]
        if middle.count(0) != len(middle):
            return True
        return bool(self.index[z] & (0xFF << (7 - (hi & 7))) & 0xFF)

    def indexed_in(self, lo: int, hi: int) -> list[int]:
        """The archived partitions among ``lo .. hi``."""
        base = (self.first >> 3) << 3
        out = []
        for at in range(max(0, (lo - base) >> 3), min(len(self.index), ((hi - base) >> 3) + 1)):
            byte = self.index[at]
            if byte:
                for bit in range(8):
                    pid = base + 8 * at + bit
                    if byte & (0x80 >> bit) and lo <= pid <= hi:
                        out.append(pid)
        return out


class ArchiveScan:
    """Reads one namespace's archive window by window (`window`, `read_detail`), paced by ``pacer``."""

    def __init__(self, client: redis.Redis, keys: KeySchema, pacer: ReadPacer) -> None:
        self.redis = client
        self.keys = keys
        self.pacer = pacer

    def state(self, default_batch_size: int) -> ArchiveState:
        k = self.keys
        fields = ["max_pid", "batch_size", "tier", "retention_s", "cold_store", "shelved"]
        meta, simple, opened = self.pacer.send(
            command("hmget", k.archive_meta, fields), command("hlen", k.completed), command("zcard", k.open_batches)
        )
        numbers: set[int] = set()
        for start in range(0, int(opened), 1000):  # bounded reads of a set that is small but may grow
            (page,) = self.pacer.send(command("zrange", k.open_batches, start, start + 999))
            numbers.update(int(b) for b in page)
        text = [None if v is None else v.decode() for v in meta]
        return ArchiveState(
            max_pid=int(text[0] or 0),
            batch_size=int(text[1] or default_batch_size),
            tier=text[2] or "simple",
            retention_s=None if text[3] is None else int(text[3]),
            cold_store=text[4],
            shelved=bool(text[5]),
            simple=int(simple),
            open_batches=numbers,
        )

    def window(self, state: ArchiveState, first_batch: int, last_batch: int) -> Window:
        """The window's index bits, expiry scores, expired bits and cold map entries, and the sizes of
        its shelves: one round trip (each read bounded: a window is at most a few thousand batches)."""
        k, size = self.keys, state.batch_size
        numbers = list(range(first_batch, last_batch + 1))
        first, last = first_batch * size, (last_batch + 1) * size - 1
        summary = state.tier == "summary"
        parse_map = None

        def add(pipe: Any) -> None:
            nonlocal parse_map
            pipe.getrange(k.index, byte_of(first), byte_of(last))
            if summary:
                pipe.zmscore(k.expiry, [str(b) for b in numbers])
                pipe.getrange(k.expired_batches, byte_of(first_batch), byte_of(last_batch))
            if state.cold_store is not None:
                parse_map = add_map_reads(pipe, k, numbers)

        replies = self.pacer.send(add)
        index = bytes(replies[0] or b"")
        expiry: dict[int, float] = {}
        expired: set[int] = set()
        at = 1
        if summary:
            scores, bits = replies[1], bytes(replies[2] or b"")
            expiry = {b: float(s) for b, s in zip(numbers, scores, strict=True) if s is not None}
            expired = {b for b in numbers if bit_set(bits, b, byte_of(first_batch))}
            at = 3
        cold = parse_map(replies[at:]) if parse_map is not None else {}
        return Window(first, last, index, expiry, expired, cold)

    def read_detail(self, state: ArchiveState, window: Window, batches: Sequence[int], pids: Sequence[int]) -> None:
        """Into ``window``: the sealed blobs and staged records of ``batches`` and the simple hash's
        records of ``pids`` (only while the simple hash holds any)."""
        k = self.keys
        shelves = sorted({shelf_of(b) for b in batches})
        sizes = self.pacer.each([command("strlen", k.shelf(s)) for s in shelves])
        commands: list[Command] = []
        expected: list[int] = []
        parts: list[tuple[int, int]] = []  # (shelf, slice start) per command
        for s, length in zip(shelves, sizes, strict=True):
            for start in range(0, max(int(length), 1), MAX_REPLY_BYTES):
                if int(length) <= MAX_REPLY_BYTES:
                    commands.append(command("get", k.shelf(s)))
                else:
                    commands.append(command("getrange", k.shelf(s), start, start + MAX_REPLY_BYTES - 1))
                expected.append(min(int(length) - start, MAX_REPLY_BYTES))
                parts.append((s, start))
        staged = [b for b in batches if b in state.open_batches]
        commands += [command("hgetall", k.staging(b)) for b in staged]
        expected += [100 * state.batch_size] * len(staged)
        legacy = [] if state.shelved else list(batches)
        commands += [command("get", k.batch(b)) for b in legacy]
        expected += [4 * state.batch_size] * len(legacy)
        simple = list(pids) if state.simple else []
        for start in range(0, len(simple), 200):
            commands.append(command("hmget", k.completed, [str(p) for p in simple[start : start + 200]]))
            expected.append(200 * 200)
        replies = self.pacer.each(commands, expected)
        raw: dict[int, bytearray] = {}
        for (s, _), reply in zip(parts, replies, strict=False):
            if reply:
                raw.setdefault(s, bytearray()).extend(reply)
        replies = replies[len(parts) :]
        wanted = set(batches)
        for s in shelves:
            if s not in raw:
                continue
            held = bytes(raw[s])
            try:
                slots: list[bytes | None] = list(unpack_shelf(held))
            except DecodeError:  # a damaged table: the slots it still describes, one by one (as the router reads them)
                slots = []
                for slot in range(SHELF_SLOTS):
                    try:
                        slots.append(shelf_slot(held, slot))
                    except DecodeError as exc:
                        slots.append(None)
                        window.damaged[s * SHELF_SLOTS + slot] = f"shelf {s} is corrupt: {exc}"
            for slot, stored in enumerate(slots):
                b = s * SHELF_SLOTS + slot
                blob = unshelved(stored)
                if blob is not None and b in wanted:
                    window.blobs.setdefault(b, []).append(blob)
        for b, reply in zip(staged, replies, strict=False):
            if reply:
                window.staged[b] = reply
        replies = replies[len(staged) :]
        for b, reply in zip(legacy, replies, strict=False):
            if reply is not None:
                window.blobs.setdefault(b, []).append(reply)
        replies = replies[len(legacy) :]
        for start, reply in zip(range(0, len(simple), 200), replies, strict=False):
            for pid, record in zip(simple[start : start + 200], reply, strict=False):
                if record is not None:
                    window.simple[pid] = record

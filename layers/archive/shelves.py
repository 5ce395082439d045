"""Where sealed batches are stored: shelves of `SHELF_SLOTS` batches (format in `codec.framing`).

Batch ``b`` is slot ``b % 64`` of shelf ``b // 64``. Versions before shelves kept one key per
batch (`KeySchema.batch`); those keys are still read, a seal moves its batch into the shelf and
deletes the old key, and `layers.archive.transitions.shelve_step` moves the rest. Every read here
therefore returns both, and a batch's records are the union of the two (the shelf wins).

A slot is written by `shelf_put.lua` only if it still holds what the writer read, so concurrent
sealers and the expiry sweep never overwrite each other's work: the one refused reads again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from codec import DecodeError
from codec.framing import SHELF_SLOTS, shelf_slot, shelved, unshelved
from layers.archive.dead_letters import DeadLetters
from layers.archive.places import shelf_of, slot_of
from layers.keys import KeySchema
from layers.plumbing.replies import script_error
from layers.plumbing.roundtrip import Part, RoundTrip, raised
from layers.plumbing.scripts import Scripts


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """What Redis holds for one sealed batch."""

    batch_no: int
    slot: bytes | None  # the blob in the batch's shelf slot
    legacy: bytes | None = None  # the batch's own key (written before shelves)
    damaged: str = ""  # why the shelf could not be read ('' if it could)

    @property
    def blob(self) -> bytes | None:
        """The blob a reader decodes first (the shelf's, else the old key's)."""
        return self.slot if self.slot is not None else self.legacy

    @property
    def blobs(self) -> list[bytes]:
        """Every blob held for the batch, the shelf's first."""
        return [b for b in (self.slot, self.legacy) if b is not None]


@dataclass(frozen=True, slots=True)
class SlotWrite:
    batch_no: int
    expected: bytes | None  # the slot as read (None: empty); the write is refused if it changed since
    blob: bytes  # b'' empties the slot
    legacy: bytes | None = None  # the batch's own key as read (deleted once written, if unchanged)


def add_shelf_reads(
    trip: RoundTrip, keys: KeySchema, numbers: Iterable[int], quarantine: Callable[[int, Any, str], None] | None = None
) -> Part[dict[int, StoredBatch]]:
    """Add the reads of these batches to ``trip`` (a shelf is read once however many of its batches
    are asked for); the part's value is the stored batches. A shelf whose slot table is damaged
    reads as empty, with the reason in `StoredBatch.damaged`, and is handed to ``quarantine``."""
    wanted = sorted(set(numbers))
    shelves = sorted({shelf_of(b) for b in wanted})

    def read(replies: list[Any]) -> dict[int, StoredBatch]:
        raised(replies)
        raw = dict(zip(shelves, replies, strict=False))
        damaged: dict[int, str] = {}
        out = {}
        for b, legacy in zip(wanted, replies[len(shelves) :], strict=True):
            s, slot = shelf_of(b), slot_of(b)
            blob = None
            if s not in damaged:
                try:
                    blob = unshelved(shelf_slot(raw[s], slot))
                except DecodeError as exc:
                    damaged[s] = f"shelf {s} is corrupt: {exc}"
                    if quarantine is not None:
                        quarantine(s, raw[s], str(exc))
            out[b] = StoredBatch(b, blob, legacy, damaged.get(s, ""))
        return out

    part = trip.part(read)
    for s in shelves:
        part.get(keys.shelf(s))
    for b in wanted:
        part.get(keys.batch(b))
    return part


class ShelfStore:
    def __init__(self, client: redis.Redis, keys: KeySchema) -> None:
        self.redis = client
        self.keys = keys
        self._scripts = Scripts.of(client)
        self.dead_letters = DeadLetters(client, keys)

    def read(self, numbers: Iterable[int], *, repair: bool = True) -> dict[int, StoredBatch]:
        """The stored blobs of these batches, in one round trip (see `add_reads`)."""
        trip = RoundTrip.on(self.redis)
        reads = self.add_reads(trip, numbers, repair=repair)
        trip.run()
        return reads.value

    def add_reads(
        self, trip: RoundTrip, numbers: Iterable[int], *, repair: bool = True
    ) -> Part[dict[int, StoredBatch]]:
        """`add_shelf_reads`; with ``repair`` a shelf whose slot table is damaged is also
        quarantined, so the next seals rebuild its batches from what is staged."""
        return add_shelf_reads(trip, self.keys, numbers, self._quarantine if repair else None)

    def write(self, writes: Sequence[SlotWrite], already_there: set[int] | None = None) -> set[int]:
        """Write slots, one script call per shelf (one round trip); returns the batches written
        (the others changed since they were read; ``already_there`` as in `add_write`); the old
        per-batch keys of those written are deleted."""
        trip = RoundTrip.on(self.redis)
        written = self.add_write(trip, writes, already_there)
        trip.run()
        return written.value

    def add_write(
        self, trip: RoundTrip, writes: Sequence[SlotWrite], already_there: set[int] | None = None
    ) -> Part[set[int]]:
        """`write` in the caller's round trip: the part's value is the batches written. Those among
        them whose slot already held the new blob (not written by this call) are added to
        ``already_there``."""
        by_shelf: dict[int, list[SlotWrite]] = defaultdict(list)
        for w in writes:
            by_shelf[shelf_of(w.batch_no)].append(w)
        shelves = sorted(by_shelf.items())
        calls = []
        for s, group in shelves:
            args: list[Any] = [SHELF_SLOTS]
            for w in group:
                args += [slot_of(w.batch_no), shelved(w.expected or b""), shelved(w.blob)]
            calls.append(("shelf_put", [self.keys.shelf(s)], args))
        puts = self._scripts.add_calls(trip, calls)

        def written() -> set[int]:
            done: set[int] = set()
            for (s, group), reply in zip(shelves, puts.value, strict=True):
                refused = script_error(reply)
                if refused is not None:
                    if refused.code != "corrupt":
                        raise RuntimeError(f"shelf_put refused: {refused.detail}")
                    self._quarantine(s, self.redis.get(self.keys.shelf(s)), refused.detail)
                    continue
                done.update(w.batch_no for w, ok in zip(group, reply, strict=True) if int(ok))
                if already_there is not None:
                    already_there.update(w.batch_no for w, ok in zip(group, reply, strict=True) if int(ok) == 2)
            old = [(w.batch_no, w.legacy) for w in writes if w.legacy and w.batch_no in done]
            if old:
                self._scripts.run_many([("del_if_equal", [self.keys.batch(b)], [raw]) for b, raw in old])
            return done

        return trip.after(written)

    def _quarantine(self, shelf_no: int, raw: Any, reason: str) -> None:
        """Keep a shelf with a damaged table aside (its blobs cannot be told apart) and remove it,
        so the next seals rebuild its batches; the statistics still count their partitions."""
        if raw is None:
            return
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.shelf_quarantine(shelf_no), raw)
        self.dead_letters.note(f"shelf:{shelf_no}", f"corrupt shelf quarantined: {reason}", pipe=pipe)
        pipe.execute()
        self._scripts("del_if_equal", [self.keys.shelf(shelf_no)], [raw])

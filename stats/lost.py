"""Detail that is gone: indexed partitions whose record no tier holds.

A partition's index bit is never cleared, and its detail is written before the commit that sets
the bit, so an indexed partition without detail either expired on purpose (the summary tier's
sweep deleted its batch and marked it in `KeySchema.expired_batches`) or was lost: a batch blob,
shelf slot or simple-tier record deleted behind partarchive's back. `stats verify` and the paced
walk of `stats.index_check` tell the two apart here; nothing can bring lost records back, so
they are named (as runs of partition ids), never repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from layers.archive.places import bit_set


@dataclass
class LostDetail:
    missing: list[int] = field(default_factory=list)  # partition ids, ascending
    expired: int = 0  # indexed partitions whose detail expired on purpose

    def add(self, other: LostDetail) -> None:
        self.missing += other.missing
        self.expired += other.expired


def indexed_pids(index: bytes, first_pid: int = 0) -> Iterator[int]:
    """The partition ids whose bit is set in a slice of the index bitmap starting at ``first_pid``
    (a multiple of 8)."""
    for byte_no, byte in enumerate(index):
        if byte:
            for bit in range(8):
                if byte & (0x80 >> bit):
                    yield first_pid + byte_no * 8 + bit


def marked(marks: bytes, batch_no: int, first_batch: int = 0) -> bool:
    """Whether a batch's bit is set in a slice of the expired-batches bitmap from ``first_batch``."""
    return bit_set(marks, batch_no - first_batch)


def lost_detail(
    pids: Iterable[int],
    found: Collection[int],
    batch_of: Callable[[int], int],
    expired: Callable[[int], bool],
    unreadable: Collection[int] = (),
) -> LostDetail:
    """Of the indexed ``pids``, those without detail in ``found``: expired (their batch marked by
    ``expired``) or missing. Those of ``unreadable`` batches are left out (reported as such)."""
    out = LostDetail()
    for pid in pids:
        if pid in found:
            continue
        batch = batch_of(pid)
        if batch in unreadable:
            continue
        if expired(batch):
            out.expired += 1
        else:
            out.missing.append(pid)
    return out


def runs(pids: Iterable[int]) -> list[str]:
    """Ascending ids as runs: ``["100-199", "250"]``."""
    out: list[str] = []
    start = prev = None
    for pid in pids:
        if prev is not None and pid == prev + 1:
            prev = pid
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = pid
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return out

"""How a range hash names its per-worker counters.

A range hash holds a worker's count, summed duration and processed data of that range. There
is one range hash per 1,000 partitions, so the names of these fields are paid for a thousand
times per million partitions: they name the worker by its registry number (`WorkerRegistrar`,
the numbering the batch blobs use), ``#12c``, ``#12d``, ``#12p``, not by its ID.

Earlier versions wrote ``{worker_id}:c`` / ``:d`` / ``:p``; those are still read, and a range
that received completions across the upgrade holds both. The two never collide: an ID-named
field has ``:`` before its last character, a numbered one a digit. Readers and the consistency
check first turn numbered fields into ID-named ones (`by_worker_id`), so everything past that
point works on ID names, as the per-worker rollup (`KeySchema.stats_workers`) and the day
hashes always have.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from layers.plumbing.replies import as_text

KINDS = ("c", "d", "p")  # count, total duration, processed data
_NUMBERED = re.compile(r"#([1-9][0-9]*)([cdp])")
_SHORT = re.compile(r"[1-9][0-9]{0,9}")


def numbered_names(short: int) -> tuple[str, str, str]:
    """The range fields of worker number ``short``, in `KINDS` order."""
    return f"#{short}c", f"#{short}d", f"#{short}p"


def id_names(worker_id: str) -> tuple[str, str, str]:
    """The ID-named fields of ``worker_id``, in `KINDS` order (and the per-worker rollup's names)."""
    return f"{worker_id}:c", f"{worker_id}:d", f"{worker_id}:p"


def worker_ids(registry: Mapping[Any, Any]) -> dict[int, str]:
    """short -> worker ID from an HGETALL of `KeySchema.workers_by_short` (a field that is not a
    number is left out: its workers' fields then keep their numbers)."""
    return {int(s): as_text(worker) for short, worker in registry.items() if _SHORT.fullmatch(s := as_text(short))}


def by_worker_id(fields: Mapping[str, int], worker_ids: Mapping[int, str]) -> dict[str, int]:
    """``fields`` with each numbered worker field renamed to its ID-named form (added to an
    ID-named field of the same worker, if the range has one). A number the registry does not
    know (``worker_ids`` is short -> ID) keeps its name, so a check sees it as unexpected."""
    out: dict[str, int] = {}
    for name, value in fields.items():
        match = _NUMBERED.fullmatch(name)
        worker_id = worker_ids.get(int(match[1])) if match else None
        if match and worker_id is not None:
            name = f"{worker_id}:{match[2]}"
        out[name] = out.get(name, 0) + value
    return out


def per_worker(fields: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """worker -> {kind: value} of fields `by_worker_id` returned; an unregistered number shows as
    ``#12``."""
    out: dict[str, dict[str, int]] = {}
    for name, value in fields.items():
        match = _NUMBERED.fullmatch(name)
        if match:
            worker, kind = f"#{match[1]}", match[2]
        else:
            worker, sep, kind = name.rpartition(":")
            if not sep or kind not in KINDS:
                continue
        entry = out.setdefault(worker, dict.fromkeys(KINDS, 0))
        entry[kind] += value
    return out


def to_numbered(fields: Mapping[str, int], short_of: Callable[[Iterable[str]], Mapping[str, int]]) -> dict[str, int]:
    """``fields`` (ID-named, as `by_worker_id` returns them) as a range stores them;
    ``short_of`` gives the registry numbers of the worker IDs it is passed (registering new ones)."""
    workers = {name.rpartition(":")[0] for name in fields if name.rpartition(":")[2] in KINDS and ":" in name}
    shorts = short_of(workers)
    out: dict[str, int] = {}
    for name, value in fields.items():
        worker, sep, kind = name.rpartition(":")
        if sep and kind in KINDS and worker in shorts:
            name = f"#{shorts[worker]}{kind}"
        out[name] = out.get(name, 0) + value
    return out

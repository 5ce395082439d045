"""The seed's text format, exactly: ``P{pid}:{min_id}-{max_id}:w{short}:{timestamp}:{duration}``.

Records are joined by commas. ``min_id``/``max_id`` are signed 64-bit, so a negative range
reads ``P7:-3000--2001:w1:...`` (the separating ``-`` is followed by the sign). Worker IDs go
through a `WorkerNumbering`, so an ID containing ``:`` or ``,`` cannot break the format. Numbers are
canonical decimals (no leading zeros, a sign only on negative ids), so every text decodes to one
batch and encodes back to the same text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from codec.errors import DecodeError, ValidationError
from codec.record import ArchivedPartition
from codec.workers import WorkerNumbering

_NUM = r"(0|[1-9][0-9]{0,19})"
_SNUM = r"(0|-?[1-9][0-9]{0,18})"
_RECORD = re.compile(rf"P{_NUM}:{_SNUM}-{_SNUM}:w([1-9][0-9]{{0,9}}):{_NUM}:{_NUM}")


def encode_text(records: Sequence[ArchivedPartition], workers: WorkerNumbering) -> str:
    if not records:
        raise ValidationError("a batch needs at least one record")
    return ",".join(
        f"P{r.partition_id}:{r.min_id}-{r.max_id}:w{workers.short_id(r.worker_id)}:{r.completed_at}:{r.duration}"
        for r in records
    )


def decode_text(text: str, workers: WorkerNumbering) -> list[ArchivedPartition]:
    if not isinstance(text, str):
        raise DecodeError("text batch must be a str")
    if not text:
        raise DecodeError("empty text batch")
    out = []
    for item in text.split(","):
        match = _RECORD.fullmatch(item)
        if match is None:
            raise DecodeError(f"malformed record {item[:80]!r}")
        pid, lo, hi, short, ts, duration = (int(g) for g in match.groups())
        try:
            out.append(ArchivedPartition(pid, lo, hi, workers.worker_id(short), ts, duration))
        except ValidationError as exc:
            raise DecodeError(f"record {item[:80]!r} is out of range: {exc}") from None
    return out

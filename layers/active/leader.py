"""The leader's steps of the worker SDK: partitions created, failed ones retried. An object
`layers.active.core.ActiveCore` holds (its ``leader``), apart from the steps a worker takes on every
partition; it is handed the core's steps it takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from codec import ValidationError
from codec.gojson import go_json
from codec.validate import MAX_INT64, MAX_PARTITION_ID, MIN_INT64, check_int
from layers.keys import KeySchema
from layers.plumbing.replies import script_error
from layers.plumbing.steps import Steps

MAX_PARTITIONS_PER_CALL = 1_000_000


def creation_refused(code: str, detail: str) -> ValidationError:
    """A creation's refusal (``_create.lua``'s ``new_pids``) as the error it raises."""
    if code == "pid_range":
        return ValidationError(f"partition ids would reach {detail}, past 2^32 - 1")
    return ValidationError(f"partition {detail} already exists; is the id counter behind?")


def options_text(options: dict[str, Any] | None, record_format: str) -> str:
    """New partitions' ``options`` as the JSON text their records hold ('' for none)."""
    if options is None or options == {}:
        return ""
    if not isinstance(options, dict):
        raise ValidationError("options must be a dict")
    try:
        text = go_json(options) if record_format == "elk" else orjson.dumps(options).decode()
    except (TypeError, ValidationError) as exc:
        raise ValidationError(f"options are not JSON-serialisable: {exc}") from None
    if len(text) > 16384:
        raise ValidationError("options are larger than 16 KiB")
    return text


class ActiveLeader:
    """The leader's steps of the worker SDK (`ActiveCore.leader`), on the core's clock, scripts and
    index rebuild (`ActiveCore._clock_args`, `ActiveCore._run`, `ActiveCore._sync`)."""

    def __init__(
        self,
        keys: KeySchema,
        record_format: str,
        *,
        clock_args: Callable[[], Steps[tuple[int, int, str]]],
        run: Callable[[str, list[str], list[Any]], Steps[Any]],
        sync: Callable[[], Steps[dict[str, int]]],
    ) -> None:
        self.keys = keys
        self.record_format = record_format
        self._clock_args = clock_args
        self._run = run
        self._sync = sync

    def _create_partitions(
        self, first_id: int, last_id: int, size: int, options: dict[str, Any] | None = None
    ) -> Steps[range]:
        """Split ``first_id..last_id`` (signed 64-bit) into partitions of ``size`` IDs; returns their pids.

        One script per call, all or nothing: it checks the id range and every new field before
        it writes, and two leaders creating at once each get one contiguous run of pids.
        """
        check_int("first_id", first_id, MIN_INT64, MAX_INT64)
        check_int("last_id", last_id, MIN_INT64, MAX_INT64)
        check_int("size", size, 1, MAX_INT64 - MIN_INT64 + 1)
        if last_id < first_id:
            raise ValidationError(f"inverted range: first_id {first_id} > last_id {last_id}")
        count = (last_id - first_id) // size + 1
        if count > MAX_PARTITIONS_PER_CALL:
            raise ValidationError(
                f"{count} partitions in one call; the limit is {MAX_PARTITIONS_PER_CALL:,} "
                "(each call is one atomic step)"
            )
        options_json = options_text(options, self.record_format)
        _, now_s, now_elk = yield from self._clock_args()
        now = now_elk if self.record_format == "elk" else str(now_s)
        bounds = ",".join(f"{lo},{min(last_id, lo + size - 1)}" for lo in range(first_id, last_id + 1, size))
        k = self.keys
        got = yield from self._run(
            "create",
            [k.active, k.pending, k.meta, *k.go_stats],
            [self.record_format, now, options_json, MAX_PARTITION_ID, bounds],
        )
        refused = script_error(got)
        if refused is not None:
            raise creation_refused(refused.code, refused.detail)
        return range(int(got[1]), int(got[2]) + 1)

    def _retry_failed(self, limit: int | None = None) -> Steps[int]:
        """Move failed partitions back to pending; returns how many moved."""
        if limit is not None:
            check_int("limit", limit, 1, 2**31)
        k = self.keys
        if k.elk_prefix is not None:
            yield from self._sync()
        moved = 0
        while limit is None or moved < limit:
            step = 1000 if limit is None else min(1000, limit - moved)
            _, now_s, now_elk = yield from self._clock_args()
            keys = [k.active, k.failed, k.pending, k.attempts, *k.go_stats]
            got = yield from self._run("retry_failed", keys, [now_s, now_elk, step])
            n, looked = int(got[0]), int(got[1])
            moved += n
            if looked < step or n == 0:
                break
        return moved

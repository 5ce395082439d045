"""The worker SDK's methods, listed once: each an `operation` of the steps in `layers.active.core`
(with `layers.active.reads` and `layers.active.leader`), a method that returns the result on
`layers.active.sdk.ActiveLayer` (blocking) and a coroutine function on
`layers.active.sdk_async.AsyncActiveLayer` (asyncio)."""

from __future__ import annotations

from layers.active.core import ActiveCore
from layers.plumbing.steps import operation


class ActiveOperations(ActiveCore):
    """Worker SDK: create, claim, start, heartbeat, complete, fail and inspect partitions."""

    create_partitions = operation(ActiveCore._create_partitions)
    claim = operation(ActiveCore._claim)
    sync = operation(ActiveCore._sync)
    start = operation(ActiveCore._start)
    heartbeat = operation(ActiveCore._heartbeat)
    fail = operation(ActiveCore._fail)
    complete = operation(ActiveCore._complete)
    retry_failed = operation(ActiveCore._retry_failed)
    get = operation(ActiveCore._get)
    all_active = operation(ActiveCore._all_active)
    get_all_active = operation(ActiveCore._all_active)
    page = operation(ActiveCore._page)
    counts = operation(ActiveCore._counts)
    size = operation(ActiveCore._size)
    is_completed = operation(ActiveCore._is_completed)
    claim_and_start = operation(ActiveCore._claim_and_start)
    complete_and_claim = operation(ActiveCore._complete_and_claim)
    fail_and_claim = operation(ActiveCore._fail_and_claim)
    beat = operation(ActiveCore._beat)
    release = operation(ActiveCore._release)
    presence = operation(ActiveCore._presence)
    unreadable = operation(ActiveCore._unreadable)
    requeue_unreadable = operation(ActiveCore._requeue_unreadable)

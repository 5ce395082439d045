"""The worker SDK's methods, listed once: each an `operation` of the steps in `layers.active.core`
(or of the objects it holds: `layers.active.reads`, `layers.active.leader`), a method that returns the result on
`layers.active.sdk.ActiveLayer` (blocking) and a coroutine function on
`layers.active.sdk_async.AsyncActiveLayer` (asyncio)."""

from __future__ import annotations

from layers.active.core import ActiveCore
from layers.active.leader import ActiveLeader
from layers.active.reads import ActiveReads
from layers.plumbing.runners import operation


class ActiveOperations(ActiveCore):
    """Worker SDK: create, claim, start, heartbeat, complete, fail and inspect partitions."""

    create_partitions = operation(ActiveLeader._create_partitions, on="leader")
    claim = operation(ActiveCore._claim)
    sync = operation(ActiveCore._sync)
    start = operation(ActiveCore._start)
    heartbeat = operation(ActiveCore._heartbeat)
    fail = operation(ActiveCore._fail)
    complete = operation(ActiveCore._complete)
    retry_failed = operation(ActiveLeader._retry_failed, on="leader")
    get = operation(ActiveReads._get, on="reads")
    all_active = operation(ActiveReads._all_active, on="reads")
    get_all_active = operation(ActiveReads._all_active, on="reads")
    page = operation(ActiveReads._page, on="reads")
    counts = operation(ActiveCore._counts)
    size = operation(ActiveReads._size, on="reads")
    is_completed = operation(ActiveReads._is_completed, on="reads")
    claim_and_start = operation(ActiveCore._claim_and_start)
    complete_and_claim = operation(ActiveCore._complete_and_claim)
    fail_and_claim = operation(ActiveCore._fail_and_claim)
    beat = operation(ActiveCore._beat)
    release = operation(ActiveCore._release)
    presence = operation(ActiveCore._presence)
    unreadable = operation(ActiveReads._unreadable, on="reads")
    requeue_unreadable = operation(ActiveCore._requeue_unreadable)

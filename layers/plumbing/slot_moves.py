"""Calls on Redis Cluster while a slot moves between masters (live resharding).

While a slot migrates (the target IMPORTING, the source MIGRATING, its keys sent over with
``MIGRATE`` batch by batch) the source serves a command only if it still has every key the
command names; it sends a command whose keys it has none of on to the target with ASK, and refuses
one whose keys are split with TRYAGAIN; the target, asked, refuses a multi-key command missing any
of its keys with TRYAGAIN too. A key that does not exist counts as missing on both sides, so a
script naming a key that is usually absent (``complete.lua``: the archival pause) is refused for
the whole move of its namespace's slot. A refused call did not run, and every partarchive script
is idempotent and checks before its first write: it is sent again.

What redis-py (8.1) does about it on its own, read in its source and tried on a local cluster:

- a single command follows ASK (``ASKING``, then the command on the target) and MOVED, and sends
  one refused with TRYAGAIN again 16 times within about 0.4 s, then raises ``ClusterError("TTL
  exhausted.")``: far shorter than a move;
- an ASK to a master that serves no slot yet (a new master receiving its first) ends in
  AttributeError: the client knows only the nodes ``CLUSTER SLOTS`` lists (redis-py #4015);
- ``EVALSHA`` sent on with ASK to a node that never loaded the script gets NOSCRIPT; redis-py's
  ``Script`` then loads it on the primaries the client knows (not a master it has not met) and
  sends ``EVALSHA`` once more;
- a pipeline without transaction sends the commands refused with ASK, MOVED or TRYAGAIN again one
  by one as single commands (above);
- a transaction (MULTI/EXEC) retries ASK and MOVED with the client's ``Retry`` but never sends
  ``ASKING``, so it cannot run once one of its keys has left the source until the move ends (an
  AskError once the client's retries are spent); TRYAGAIN it does not retry;
- CLUSTERDOWN is retried with the client's ``Retry``, 0.25 s apart.

So: `follow_ask_to_new_masters` lets a client follow ASK to a master it has not met; `ride_out`
sends a call refused because its slot is moving again, with exponential backoff and jitter, for
up to `BUDGET_S`, then raises `SlotMoving`. `layers.plumbing.scripts.Scripts` runs every script through it on
Redis Cluster, `run_transaction` every MULTI/EXEC. Each call sent again is counted in
``partarchive_slot_move_retries_total{call}`` (created on the first, so importing registers nothing).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import redis
from prometheus_client import Counter
from redis.client import Pipeline
from redis.cluster import PRIMARY, ClusterNode, NodesManager
from redis.exceptions import AskError, ClusterError, SlotNotCoveredError, TryAgainError

from layers.errors import SlotMoving

T = TypeVar("T")

#: How long a call is sent again while its slot moves (plus the client's own retries of the last try).
BUDGET_S = 10.0
FIRST_DELAY_S = 0.02
MAX_DELAY_S = 1.0
#: Refusals that mean "not here, not now": the slot is moving (TRYAGAIN; ASK or MOVED a transaction
#: cannot follow; redis-py's "TTL exhausted" after its own tries; CLUSTERDOWN). The call did not run.
MOVING_ERRORS = (TryAgainError, AskError, ClusterError, SlotNotCoveredError)


def ride_out(call: Callable[[], T], what: str, *, budget_s: float | None = None) -> T:
    """``call()``, called again while Redis Cluster refuses it because its slot is moving, with
    exponential backoff and jitter (20 ms doubling up to 1 s, each scaled by 0.5..1); raises
    `SlotMoving` once ``budget_s`` (default `BUDGET_S`) would be exceeded. Other errors pass.
    ``what`` names the call in the error and in the retries' metric (a few fixed names)."""
    budget = BUDGET_S if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    tries = 0
    while True:
        try:
            return call()
        except MOVING_ERRORS as exc:
            if isinstance(exc, SlotMoving):
                raise
            tries += 1
            delay = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (tries - 1)) * random.uniform(0.5, 1.0)
            if time.monotonic() + delay > deadline:
                last = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                raise SlotMoving(
                    f"Redis Cluster refused {what!r} for {budget:g} s while its slot moved between masters "
                    f"({tries} tries, the last: {last}); it did not run"
                ) from exc
            slot_move_retries().labels(call=what).inc()
            time.sleep(delay)


@cache
def slot_move_retries() -> Counter:
    return Counter(
        "partarchive_slot_move_retries",
        "Calls sent again because Redis Cluster refused them while their slot moved between masters.",
        ["call"],
    )


def run_transaction(client: redis.Redis, fill: Callable[[Pipeline], object], what: str) -> list[Any]:
    """MULTI, the commands ``fill`` queues on the pipeline, EXEC; on Redis Cluster built and sent
    again while its slot moves (a refused transaction ran none of its commands)."""

    def once() -> list[Any]:
        pipe = client.pipeline(transaction=True)
        fill(pipe)
        return pipe.execute()

    if not isinstance(client, redis.RedisCluster):
        return once()
    return ride_out(once, what)


class _NodesFollowingAsk(NodesManager):
    """redis-py's table of cluster nodes, which also hands out a node it has not met when asked for
    it by name, as the target of an ASK is: a new master serving no slot yet, missing from
    ``CLUSTER SLOTS``. It stays in the table until the next refresh, as a MOVED target does."""

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        node: ClusterNode | None = super().get_node(host, port, node_name)
        if node is None and node_name and host is None and port is None:
            address, _, number = node_name.rpartition(":")
            if address and number.isdigit():
                with self._lock:
                    new = ClusterNode(address, int(number), PRIMARY)  # type: ignore[no-untyped-call]
                    node = self.nodes_cache.setdefault(node_name, new)
        return node


def follow_ask_to_new_masters(client: object) -> None:
    """Let a `redis.RedisCluster` follow ASK to a master it does not know yet (see the module's
    notes); a client with a node table of its own making is left as it is."""
    nodes = getattr(client, "nodes_manager", None)
    if type(nodes) is NodesManager:
        nodes.__class__ = _NodesFollowingAsk

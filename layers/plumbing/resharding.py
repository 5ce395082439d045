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

redis-py's asyncio cluster client does the same (``redis.asyncio.cluster``), ASK to an unknown
master included.

So: `follow_ask_to_new_masters` lets a client of either flavour follow ASK to a master it has not
met; `riding_out` sends a call refused because its slot is moving again, with exponential backoff
and jitter (`RideOut`), for up to `BUDGET_S`, then raises `SlotMoving`. It is steps
(`layers.plumbing.steps`), so the blocking and the asyncio flavours ride out alike: every script on
Redis Cluster (`layers.plumbing.scripts`), every MULTI/EXEC (`run_transaction`,
`layers.plumbing.steps`), and any call through `ride_out` / `ride_out_async`. Each call sent again is counted in
``partarchive_slot_move_retries_total{namespace,call}`` (created on the first, so importing registers
nothing), the namespace the one whose keys the call names (`KeySchema.namespace_of`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from typing import Any, TypeVar

import redis
from prometheus_client import Counter
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import NodesManager as AsyncNodesManager
from redis.client import Pipeline
from redis.cluster import PRIMARY, ClusterNode, NodesManager
from redis.exceptions import AskError, ClusterError, SlotNotCoveredError, TryAgainError

from layers.errors import SlotMoving
from layers.keys import KeySchema
from layers.plumbing.steps import Call, Steps, Wait, adrive, aperform, drive, perform

T = TypeVar("T")

#: How long a call is sent again while its slot moves (plus the client's own retries of the last try).
BUDGET_S = 10.0
FIRST_DELAY_S = 0.02
MAX_DELAY_S = 1.0
#: Refusals that mean "not here, not now": the slot is moving (TRYAGAIN; ASK or MOVED a transaction
#: cannot follow; redis-py's "TTL exhausted" after its own tries; CLUSTERDOWN). The call did not run.
MOVING_ERRORS = (TryAgainError, AskError, ClusterError, SlotNotCoveredError)


class RideOut:
    """The backoff of one call riding out a slot move: exponential with jitter (20 ms doubling up
    to 1 s, each scaled by 0.5..1) within a budget of ``budget_s`` (default `BUDGET_S`)."""

    def __init__(self, what: str, budget_s: float | None = None, keys: Sequence[str] = ()) -> None:
        self.what = what
        self.keys = keys  # the call's: its namespace labels the retries
        self.budget = BUDGET_S if budget_s is None else budget_s
        self.deadline = time.monotonic() + self.budget
        self.tries = 0

    def wait_s(self, refused: Exception) -> float:
        """How long to wait before sending the call again after ``refused``; raises `SlotMoving`
        once the budget would be exceeded (and re-raises ``refused`` if it is `SlotMoving`)."""
        if isinstance(refused, SlotMoving):
            raise refused
        self.tries += 1
        delay = min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** (self.tries - 1)) * random.uniform(0.5, 1.0)
        if time.monotonic() + delay > self.deadline:
            last = str(refused).splitlines()[0][:200] if str(refused) else type(refused).__name__
            raise SlotMoving(
                f"Redis Cluster refused {self.what!r} for {self.budget:g} s while its slot moved between masters "
                f"({self.tries} tries, the last: {last}); it did not run"
            ) from refused
        slot_move_retries().labels(namespace=KeySchema.namespace_of(self.keys), call=self.what).inc()
        return delay


def riding_out(
    attempt: Callable[[], Steps[T]], what: str, *, budget_s: float | None = None, keys: Sequence[str] = ()
) -> Steps[T]:
    """The steps of ``attempt()``, sent again (a new generator each time) while Redis Cluster
    refuses them because their slot is moving, waiting as `RideOut` says; other errors pass.
    ``what`` names the call in the error and in the retries' metric (a few fixed names), ``keys``
    (the call's) its namespace there."""
    policy = RideOut(what, budget_s, keys)
    while True:
        try:
            return (yield from attempt())
        except MOVING_ERRORS as exc:
            yield Wait(policy.wait_s(exc))


def _calling(call: Callable[[], Any]) -> Callable[[], Steps[Any]]:
    def attempt() -> Steps[Any]:
        return (yield Call(call))

    return attempt


def ride_out(call: Callable[[], T], what: str, *, budget_s: float | None = None, keys: Sequence[str] = ()) -> T:
    """``call()``, called again while Redis Cluster refuses it because its slot is moving
    (`riding_out`); raises `SlotMoving` once the budget is spent."""
    steps: Steps[T] = riding_out(_calling(call), what, budget_s=budget_s, keys=keys)
    return drive(steps, _perform)


async def ride_out_async(
    call: Callable[[], Awaitable[T]], what: str, *, budget_s: float | None = None, keys: Sequence[str] = ()
) -> T:
    """`ride_out` awaiting ``call()``."""
    steps: Steps[T] = riding_out(_calling(call), what, budget_s=budget_s, keys=keys)
    return await adrive(steps, _aperform)


def _perform(step: Any) -> Any:
    return perform(None, step)


def _aperform(step: Any) -> Awaitable[Any]:
    return aperform(None, step)


@cache
def slot_move_retries() -> Counter:
    return Counter(
        "partarchive_slot_move_retries",
        "Calls sent again because Redis Cluster refused them while their slot moved between masters.",
        ["namespace", "call"],
    )


def run_transaction(client: redis.Redis, fill: Callable[[Pipeline], object], what: str) -> list[Any]:
    """MULTI, the commands ``fill`` queues on the pipeline, EXEC; on Redis Cluster built and sent
    again while its slot moves (a refused transaction ran none of its commands)."""

    clustered = isinstance(client, redis.RedisCluster)
    keys: list[str] = []  # the commands' first arguments, for the retries' metric

    def once() -> list[Any]:
        pipe = client.pipeline(transaction=True)
        fill(pipe)
        if clustered:
            keys[:] = [str(command.args[1]) for command in pipe.command_stack if len(command.args) > 1]
        return pipe.execute()

    if not clustered:
        return once()
    return ride_out(once, what, keys=keys)


class _NodesFollowingAsk(NodesManager):
    """redis-py's table of cluster nodes, which also hands out a node it has not met when asked for
    it by name, as the target of an ASK is: a new master serving no slot yet, missing from
    ``CLUSTER SLOTS``. It stays in the table until the next refresh, as a MOVED target does."""

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        node: ClusterNode | None = super().get_node(host, port, node_name)
        if node is None and node_name and host is None and port is None:
            found = _new_master(node_name)
            if found is not None:
                with self._lock:
                    new = ClusterNode(*found, PRIMARY)  # type: ignore[no-untyped-call]
                    node = self.nodes_cache.setdefault(node_name, new)
        return node


def _new_master(node_name: str) -> tuple[str, int] | None:
    """The address in the name of a node asked for by name only (an ASK's target), if it is one."""
    address, _, number = node_name.rpartition(":")
    return (address, int(number)) if address and number.isdigit() else None


class _AsyncNodesFollowingAsk(AsyncNodesManager):
    """`_NodesFollowingAsk` for `redis.asyncio.RedisCluster`, whose ASK finds its target the same way."""

    __slots__ = ()

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> AsyncClusterNode | None:
        node: AsyncClusterNode | None = super().get_node(host, port, node_name)
        found = _new_master(node_name) if node is None and node_name and not (host and port) else None
        if found is not None and node_name:
            new = AsyncClusterNode(*found, PRIMARY, **self.connection_kwargs)
            node = self.nodes_cache.setdefault(node_name, new)
        return node


def follow_ask_to_new_masters(client: object) -> None:
    """Let a `redis.RedisCluster` or a `redis.asyncio.RedisCluster` follow ASK to a master it does
    not know yet (see the module's notes); a client with a node table of its own making is left as
    it is."""
    nodes = getattr(client, "nodes_manager", None)
    if type(nodes) is NodesManager:
        nodes.__class__ = _NodesFollowingAsk
    elif type(nodes) is AsyncNodesManager:
        nodes.__class__ = _AsyncNodesFollowingAsk

"""The query router for asyncio programs: `AsyncQueryRouter` awaits the lookup of
`archiver.router.RouterCore` on a `redis.asyncio` client (``redis.asyncio.Redis``, a Sentinel's
``master_for``, or ``redis.asyncio.RedisCluster``): the same answers, chain, metrics and errors
as `QueryRouter`, one round trip per lookup (a script; a pipeline on Redis Cluster), and the
statistics fallback read on the same client, so nothing blocks the event loop."""

from __future__ import annotations

from archiver.router import RouterCore, SummaryLookup
from layers import ArchiveLayer, KeySchema, TierPolicy
from layers.archive.workers import WorkerNumbers
from layers.keys import is_cluster_client
from layers.plumbing.meta import StoredBatchSize
from layers.plumbing.steps import AsyncClient, AsyncIO, awaiting


class AsyncQueryRouter(RouterCore):
    """``answer = await router.get(pid)``. With ``archive`` (a synchronous `ArchiveLayer` of the same
    namespace) the router shares its policy, stored batch size and worker numbering, and does no
    I/O through it; ``summary_lookup`` may be a plain or a coroutine function."""

    def __init__(
        self,
        redis_client: AsyncClient,
        namespace: str | KeySchema = "elk",
        *,
        cluster: bool = False,
        policy: TierPolicy | None = None,
        summary_lookup: SummaryLookup | None = None,
        archive: ArchiveLayer | None = None,
    ) -> None:
        self.redis = redis_client
        self._io = AsyncIO(redis_client)
        keys = KeySchema.of(namespace, cluster, client=redis_client)
        workers: WorkerNumbers
        if archive is not None:
            policy, batch_sizes, workers = archive.policy, archive.batch_sizes, archive.workers
        else:
            policy = policy or TierPolicy()
            batch_sizes, workers = StoredBatchSize(keys.archive_meta, policy.batch_size), WorkerNumbers(keys)
        scripted = not is_cluster_client(redis_client)
        super().__init__(keys, policy, batch_sizes, workers, summary_lookup, scripted=scripted)

    get = awaiting(RouterCore._get)

"""The worker runtime: the loop every user of the worker SDK would write, written once.

`Worker` (threads) and `AsyncWorker` (asyncio tasks) run the user's ``process(partition, lease)`` on
up to ``window`` partitions at once, at one round trip a partition, with heartbeats in the background,
a retry policy, a circuit breaker, a presence entry, metrics and a clean stop, and, given a planner, a
leader that creates the partitions as the data grows (`archiver.runtime.leader`); ``partarchive worker
MODULE:FUNCTION`` runs them as processes under the supervisor ``partarchive run --processes`` uses.
"""

from archiver.runtime.core import Duty, RunReport
from archiver.runtime.leader import LeaderSettings
from archiver.runtime.lease import Lease, LeaseLost
from archiver.runtime.settings import WorkerSettings, default_worker_id
from archiver.runtime.worker import Worker
from archiver.runtime.worker_async import AsyncWorker
from layers.active.window import RetryPolicy

__all__ = [
    "AsyncWorker",
    "Duty",
    "LeaderSettings",
    "Lease",
    "LeaseLost",
    "RetryPolicy",
    "RunReport",
    "Worker",
    "WorkerSettings",
    "default_worker_id",
]

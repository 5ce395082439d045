"""Redis-backed layers: the active layer (worker SDK), the archive queue and the archive."""

from codec.validate import MAX_PARTITION_ID
from layers.active import ActiveLayer, Completion
from layers.active_async import AsyncActiveLayer
from layers.archive import ArchiveLayer
from layers.errors import (
    CorruptMetadata,
    InvalidTransition,
    NotOwner,
    OutOfMemory,
    PartitionNotFound,
    SlotMoving,
    StaleWorkerNumbers,
    VersionConflict,
    WrongKeyType,
)
from layers.keys import KeySchema
from layers.queue import ArchiveQueue, QueueEntry, QueueState
from layers.tiers import Tier, TierPolicy
from layers.transitions import migrate_step
from layers.workers import WorkerRegistry

__all__ = [
    "MAX_PARTITION_ID",
    "ActiveLayer",
    "ArchiveLayer",
    "ArchiveQueue",
    "AsyncActiveLayer",
    "Completion",
    "CorruptMetadata",
    "InvalidTransition",
    "KeySchema",
    "NotOwner",
    "OutOfMemory",
    "PartitionNotFound",
    "QueueEntry",
    "QueueState",
    "SlotMoving",
    "StaleWorkerNumbers",
    "Tier",
    "TierPolicy",
    "VersionConflict",
    "WorkerRegistry",
    "WrongKeyType",
    "migrate_step",
]

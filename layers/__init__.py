"""Redis-backed layers: the active layer (worker SDK), the archive queue and the archive."""

from codec.validate import MAX_PARTITION_ID
from layers.active.sdk import ActiveLayer, Completion
from layers.active.sdk_async import AsyncActiveLayer
from layers.archive.layer import ArchiveLayer
from layers.archive.queue import ArchiveQueue, QueueEntry, QueueState
from layers.archive.tiers import Tier, TierPolicy
from layers.archive.transitions import migrate_step
from layers.archive.workers import WorkerRegistrar
from layers.errors import (
    CorruptMetadata,
    InvalidTransition,
    NotLeader,
    NotOwner,
    OutOfMemory,
    PartitionNotFound,
    PlanChanged,
    SlotMoving,
    StaleWorkerNumbers,
    VersionConflict,
    WrongKeyType,
)
from layers.keys import KeySchema

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
    "NotLeader",
    "NotOwner",
    "OutOfMemory",
    "PartitionNotFound",
    "PlanChanged",
    "QueueEntry",
    "QueueState",
    "SlotMoving",
    "StaleWorkerNumbers",
    "Tier",
    "TierPolicy",
    "VersionConflict",
    "WorkerRegistrar",
    "WrongKeyType",
    "migrate_step",
]

"""Redis-backed layers: the active layer (worker SDK), the archive queue and the archive."""

from layers.active import MAX_PARTITION_ID, ActiveLayer, Completion
from layers.archive import ArchiveLayer
from layers.errors import InvalidTransition, NotOwner, PartitionNotFound, VersionConflict
from layers.keys import KeySchema
from layers.queue import ArchiveQueue, QueueEntry, QueueState

__all__ = [
    "MAX_PARTITION_ID",
    "ActiveLayer",
    "ArchiveLayer",
    "ArchiveQueue",
    "Completion",
    "InvalidTransition",
    "KeySchema",
    "NotOwner",
    "PartitionNotFound",
    "QueueEntry",
    "QueueState",
    "VersionConflict",
]

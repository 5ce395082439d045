"""Typed errors of the Redis-backed layers."""

from redis.exceptions import ClusterError

from codec.errors import DecodeError, PartArchiveError


class PartitionNotFound(PartArchiveError, LookupError):
    """No active partition has this id (it never existed, or it is no longer active)."""


class NotOwner(PartArchiveError):
    """The partition is claimed by another worker."""


class InvalidTransition(PartArchiveError):
    """The partition is not in a status that allows this operation."""


class VersionConflict(PartArchiveError):
    """The partition changed since the version the caller expected."""


class WrongKeyType(PartArchiveError):
    """A key partarchive needs holds another Redis type (tampered or foreign data); names the key."""


class CorruptMetadata(DecodeError):
    """A stored setting or counter of the namespace is not what partarchive wrote (tampered or
    foreign data); names the key and field."""


class OutOfMemory(PartArchiveError):
    """Redis is at ``maxmemory`` and refuses writes (noeviction): the call wrote nothing."""


class StaleWorkerNumbers(PartArchiveError):
    """The worker registry is not the one the caller's worker numbers came from (it was lost
    and rebuilt since): nothing was written; reload the registry and build the write again."""


class SlotMoving(PartArchiveError, ClusterError):
    """Redis Cluster kept refusing a call because the slot of its keys was moving between masters
    (TRYAGAIN, ASK, CLUSTERDOWN) for longer than the retry budget (`layers.plumbing.resharding`): the call
    did not run. Also a Redis error, so a caller that waits out Redis errors waits this out too."""


class ColdStoreUnavailable(PartArchiveError):
    """The cold store cannot be written or read as a whole (unwritable, unreachable, its package not
    installed, credentials missing); the message shows its URL without a password. Nothing is
    expired from Redis meanwhile."""


class ColdFileDamaged(DecodeError):
    """A cold file the archive records is missing or cannot be read as one of ours: its partitions
    are answered from the statistics."""


class NotLeader(PartArchiveError):
    """A leader's write carried the fencing token of a lease that is no longer the namespace's (it
    ended, another holder leads since, or elk_coordinator's own leader holds its lock): nothing was
    written (`layers.active.planning`)."""


class PlanChanged(PartArchiveError):
    """The plan moved on between its read and a write built on it (another writer planned meanwhile):
    nothing was written; read the plan again."""

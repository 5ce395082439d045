"""The one place that spells Redis key names.

With the default namespace ``elk`` the names are the original ones: ``elk_partitions``,
``elk_completed``, ``elk_completed:index``, ``elk_completed:batch:{n}``. In cluster mode the
namespace is wrapped in a hash tag (``{elk}_partitions``) for every key that a script touches
together with others, so they share a slot; batch keys stay untagged to spread over slots.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codec.errors import ValidationError

ARCHIVER_GROUP = "archivers"
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE_RE.match(namespace):
        raise ValidationError(f"namespace must be 1-64 characters of letters, digits, '_', '.', '-': {namespace!r}")
    return namespace


@dataclass(frozen=True, slots=True)
class KeySchema:
    namespace: str = "elk"
    cluster: bool = False

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    @property
    def _tagged(self) -> str:
        return f"{{{self.namespace}}}" if self.cluster else self.namespace

    # active layer
    @property
    def active(self) -> str:
        """Hash pid -> PartitionInfo JSON: only unfinished partitions."""
        return f"{self._tagged}_partitions"

    @property
    def pending(self) -> str:
        """Sorted set of pending pids (score = pid), so claim takes the lowest in O(log n)."""
        return f"{self._tagged}_partitions:pending"

    @property
    def leases(self) -> str:
        """Sorted set of claimed/running pids, score = last heartbeat (unix ms)."""
        return f"{self._tagged}_partitions:leases"

    @property
    def failed(self) -> str:
        """Sorted set of failed pids (score = pid)."""
        return f"{self._tagged}_partitions:failed"

    @property
    def counts(self) -> str:
        """Hash status -> number of active partitions in that status."""
        return f"{self._tagged}_partitions:counts"

    @property
    def meta(self) -> str:
        """Hash with the highest partition id ever created (``last_pid``) and similar."""
        return f"{self._tagged}_partitions:meta"

    @property
    def done(self) -> str:
        """Bitmap: partitions completed through the SDK (set with the queue append)."""
        return f"{self._tagged}_partitions:done"

    # queue
    @property
    def queue(self) -> str:
        """Stream of completed partitions waiting for the archiver."""
        return f"{self._tagged}_archive:queue"

    @property
    def dead_letter(self) -> str:
        """Stream of queue entries that could not be archived, with the reason."""
        return f"{self._tagged}_archive:dead"

    # archive layer
    @property
    def completed(self) -> str:
        """Hash pid -> ArchivedPartition JSON (simple tier)."""
        return f"{self._tagged}_completed"

    @property
    def index(self) -> str:
        """Bitmap: partitions ever archived (never cleared when detail expires)."""
        return f"{self._tagged}_completed:index"

    @property
    def archive_meta(self) -> str:
        """Hash: ``total`` archived, current ``tier``, ``batch_size`` in use, transition progress."""
        return f"{self._tagged}_completed:meta"

    @property
    def open_batches(self) -> str:
        """Sorted set of batch numbers with staged records, score = last staging time (unix ms)."""
        return f"{self._tagged}_completed:open"

    def _batch_part(self, batch_no: int) -> str:
        return f"{{{batch_no}}}" if self.cluster else str(batch_no)

    def batch(self, batch_no: int) -> str:
        """String: the sealed, encoded batch. In cluster mode tagged by batch number (not namespace)."""
        return f"{self.namespace}_completed:batch:{self._batch_part(batch_no)}"

    def quarantine(self, batch_no: int) -> str:
        """String: a batch blob that failed to decode, kept aside when the batch is re-sealed."""
        return f"{self.namespace}_completed:corrupt:{self._batch_part(batch_no)}"

    def staging(self, batch_no: int) -> str:
        """Hash pid -> archived JSON of a batch not sealed yet; same slot as `batch`."""
        return f"{self.namespace}_completed:stage:{self._batch_part(batch_no)}"

    @property
    def workers(self) -> str:
        """Hash worker_id -> short number (the registry behind the compact formats)."""
        return f"{self._tagged}_workers"

    @property
    def workers_by_short(self) -> str:
        """Hash short number -> worker_id, the reverse of `workers`."""
        return f"{self._tagged}_workers:by_short"

    # statistics layer (tagged: the commit script updates them with the index and the queue)
    @property
    def stats_global(self) -> str:
        """Hash: completed, processed, duration, last_updated."""
        return f"{self._tagged}_stats:global"

    @property
    def stats_workers(self) -> str:
        """Hash ``{short}:c`` / ``{short}:d`` / ``{short}:p``: count, total duration, processed data."""
        return f"{self._tagged}_stats:workers"

    def stats_range(self, range_no: int) -> str:
        """Hash for partitions ``range_no * width .. + width - 1``: totals, bounds, per-worker fields."""
        return f"{self._tagged}_stats:range:{range_no}"

    def stats_day(self, day: str) -> str:
        """Hash for one UTC day (YYYY-MM-DD): ``h00``..``h23`` completions, ``w{short}`` per worker."""
        return f"{self._tagged}_stats:day:{day}"

    @property
    def stats_meta(self) -> str:
        """Hash: range width in use, last consistency check (time, result, differences)."""
        return f"{self._tagged}_stats:meta"

    def patterns(self) -> list[str]:
        """SCAN patterns that match every key of this namespace (for tests and cleanup)."""
        tagged = self._tagged.replace("{", "\\{").replace("}", "\\}")
        return sorted({f"{tagged}_*", f"{self.namespace}_*"})

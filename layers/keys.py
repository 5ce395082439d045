"""The one place that spells Redis key names, partarchive's and elk_coordinator's.

With the default namespace ``elk`` the names are the original ones: ``elk_partitions``,
``elk_completed``, ``elk_completed:index``, ``elk_completed:shelf:<n>``. In cluster mode the
namespace is wrapped in a hash tag (``{elk}_partitions``) for every key that a script touches
together with others, so they share a hash slot. The per-batch keys (shelves, staging, legacy batch
keys, quarantine) are not in the namespace's hash slot: each is tagged by its own number instead
(``elk_completed:shelf:{7}``), so they spread over the hash slots. A namespace bound to an
elk_coordinator prefix has every key in the hash slot of the prefix's own ``{tag}``.

A namespace can be bound to an elk_coordinator deployment by its ``KeyPrefix`` option
(``elk_prefix``; configured, never guessed). Go's keys are ``"elk:" + KeyPrefix + name`` with
no separator added (`ElkKeys`); the active hash is then Go's own ``elk_partitions`` and every
key of ours goes under the same prefix (``elk:my-app:elk_completed`` ...). Go's keys carry no
hash tag of ours: on Redis Cluster a bound namespace needs a ``{tag}`` inside KeyPrefix (Go's
own multi-key scripts need it too), otherwise it is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import redis
import redis.asyncio

from codec.errors import ValidationError

ARCHIVER_GROUP = "archivers"
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_ELK_PREFIX_RE = re.compile(r"^[\x21-\x7e]{0,128}$")
_HASH_TAG_RE = re.compile(r"\{[^}]+\}")
#: The key prefixes (``{ns}_``, ``ns_``, ``elk:<prefix>ns_``) of every schema this process has
#: built, and their namespace: `KeySchema.namespace_of`.
_PREFIXES: dict[str, str] = {}


def is_cluster_client(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster client, synchronous or asyncio."""
    return isinstance(client, redis.RedisCluster | redis.asyncio.RedisCluster)


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE_RE.match(namespace):
        raise ValidationError(
            f"namespace must be 1-64 characters of letters, digits, '_', '.', ':', '-': {namespace!r}"
        )
    return namespace


def check_elk_prefix(prefix: str) -> str:
    """Go's KeyPrefix option: printable ASCII without spaces, up to 128 characters, may be empty."""
    if not isinstance(prefix, str) or not _ELK_PREFIX_RE.match(prefix) or "*" in prefix or "?" in prefix:
        raise ValidationError(f"elk_coordinator KeyPrefix must be printable ASCII without spaces or globs: {prefix!r}")
    return prefix


@dataclass(frozen=True, slots=True)
class ElkKeys:
    """elk_coordinator's key families under one KeyPrefix (FORMAT.md, "Key names")."""

    key_prefix: str

    def __post_init__(self) -> None:
        check_elk_prefix(self.key_prefix)

    @property
    def base(self) -> str:
        return f"elk:{self.key_prefix}"

    @property
    def partitions(self) -> str:
        """Hash pid -> PartitionInfo JSON: Go's active hash."""
        return f"{self.base}elk_partitions"

    @property
    def archived(self) -> str:
        """Hash pid -> completed PartitionInfo JSON."""
        return f"{self.base}elk_archived"

    @property
    def compressed(self) -> str:
        """Hash batch name -> CompressedBatch JSON (gzip'd binary records)."""
        return f"{self.base}elk_compressed_archive"

    @property
    def stats(self) -> str:
        """Hash of eight counters (total, pending, ..., max_partition_id, last_allocated_id)."""
        return f"{self.base}elk_partition_stats"

    @property
    def workers(self) -> str:
        """Sorted set of WorkerInfo JSON by register time; batches number workers by position."""
        return f"{self.base}workers"

    def heartbeat(self, worker_id: str) -> str:
        """String: a live worker's registration time (RFC 3339, seconds), expiring 180 s after its last
        refresh; Go's leader counts the workers whose key exists."""
        return f"{self.base}heartbeat:{worker_id}"

    def leader_lock(self, go_namespace: str) -> str:
        """String: the id of the worker leading Go's namespace (NewMgr's first argument), with a time to
        live (LeaderLockExpiry); taken with SET NX."""
        return f"{self.base}{go_namespace}:leader_lock"

    @staticmethod
    def prefix_of(active_hash_key: str) -> str | None:
        """The KeyPrefix of a key named ``elk:<prefix>elk_partitions``, or None."""
        if key_matches := re.fullmatch(r"elk:(.*)elk_partitions", active_hash_key, re.DOTALL):
            return key_matches.group(1)
        return None

    SCAN_PATTERN = "elk:*elk_partitions"


def check_elk_namespace(name: str) -> str:
    """Go's namespace (the first argument of ``NewMgr``), which names its leader lock: printable ASCII
    without spaces, 1 to 128 characters."""
    if not isinstance(name, str) or not name or not _ELK_PREFIX_RE.match(name):
        raise ValidationError(f"elk_coordinator's namespace must be 1-128 printable ASCII characters: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class KeySchema:
    namespace: str = "elk"
    cluster: bool = False
    elk_prefix: str | None = None
    #: Go's namespace (NewMgr's first argument) of the deployment bound by ``elk_prefix``: it names Go's
    #: leader lock, which a partarchive leader of a bound namespace holds too (`go_leader_lock`).
    elk_namespace: str | None = None

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        if self.elk_namespace is not None:
            check_elk_namespace(self.elk_namespace)
        if self.elk_prefix is not None:
            check_elk_prefix(self.elk_prefix)
            if self.cluster and not _HASH_TAG_RE.search(self.elk_prefix):
                raise ValidationError(
                    f"elk_coordinator KeyPrefix {self.elk_prefix!r} has no {{hash tag}}: its keys spread over "
                    "cluster hash slots, so neither Go's scripts nor partarchive's can run on Redis Cluster"
                )
        _PREFIXES.setdefault(f"{self._tagged}_", self.namespace)
        _PREFIXES.setdefault(f"{self._untagged}_", self.namespace)

    @staticmethod
    def namespace_of(keys: Iterable[str]) -> str:
        """The namespace of the first of ``keys`` that a schema of this process named (``(unknown)``
        if none): for a metric's label where only a call's keys are at hand (`layers.plumbing.resharding`)."""
        for key in keys:
            found = max((p for p in _PREFIXES if key.startswith(p)), key=len, default=None)
            if found is not None:
                return _PREFIXES[found]
        return "(unknown)"

    @classmethod
    def of(
        cls, namespace: str | KeySchema, cluster: bool = False, elk_prefix: str | None = None, *, client: object = None
    ) -> KeySchema:
        """``namespace`` as a schema: a `KeySchema` passes through, a name is built into one.

        With a Redis Cluster ``client`` a name always gets hash-tagged keys, and a schema without
        them is refused: the scripts' keys would land in different hash slots.
        """
        on_cluster = is_cluster_client(client)
        if not isinstance(namespace, KeySchema):
            return cls(namespace, cluster or on_cluster, elk_prefix)
        if on_cluster and not namespace.cluster:
            raise ValidationError(
                f"namespace {namespace.namespace!r} is used on Redis Cluster without hash-tagged keys: "
                "set --cluster (PARTARCHIVE_CLUSTER=1)"
            )
        return namespace

    #: SCAN pattern of every namespace's archive meta hash (how the dashboard lists namespaces).
    ARCHIVE_META_PATTERN = "*_completed:meta"

    @staticmethod
    def namespace_of_archive_meta(key: str) -> str | None:
        """The namespace whose `archive_meta` is ``key``; None for a namespace bound to an
        elk_coordinator prefix (the prefix and the name cannot be told apart in the key)."""
        name = key.removesuffix("_completed:meta")
        if name == key or key.startswith("elk:"):
            return None
        if name.startswith("{") and name.endswith("}"):
            name = name[1:-1]
        return name if _NAMESPACE_RE.fullmatch(name) else None

    @property
    def elk(self) -> ElkKeys | None:
        """Go's keys when this namespace is bound to an elk_coordinator deployment."""
        return None if self.elk_prefix is None else ElkKeys(self.elk_prefix)

    @property
    def elk_binding(self) -> str:
        """String: the elk_coordinator KeyPrefix this namespace is bound to, kept under the namespace's
        own name whatever the binding (``{ns}_elk_prefix``), so a command given only the namespace finds it."""
        return f"{{{self.namespace}}}_elk_prefix" if self.cluster else f"{self.namespace}_elk_prefix"

    @property
    def _tagged(self) -> str:
        if self.elk_prefix is not None:
            return f"elk:{self.elk_prefix}{self.namespace}"
        return f"{{{self.namespace}}}" if self.cluster else self.namespace

    @property
    def _untagged(self) -> str:
        return self.namespace if self.elk_prefix is None else self._tagged

    # active layer
    @property
    def active(self) -> str:
        """Hash pid -> PartitionInfo JSON: only unfinished partitions (Go's own hash when bound)."""
        if self.elk_prefix is not None:
            return ElkKeys(self.elk_prefix).partitions
        return f"{self._tagged}_partitions"

    @property
    def complete_keys(self) -> list[str]:
        """KEYS[1..7] of ``complete.lua``, in its order (Go's stats hash follows in a bound namespace);
        the last two are needed only while archival is paused and when latencies are handed."""
        return [self.active, self.leases, self.done, self.queue, self.archival_paused, self.archival_held,
                self.complete_latency]  # fmt: skip

    @property
    def go_stats(self) -> list[str]:
        """Go's counters hash as an optional trailing script key (empty when not bound)."""
        return [] if self.elk_prefix is None else [ElkKeys(self.elk_prefix).stats]

    @property
    def pending(self) -> str:
        """Sorted set of pending pids (score = pid), so claim takes the lowest in O(log n)."""
        return f"{self._tagged}_partitions:pending"

    @property
    def leases(self) -> str:
        """Sorted set of claimed/running pids, score = last heartbeat (unix ms) as the index last saw
        it: positive while claimed, negative while running, so the leases counted by sign give both
        counts. A heartbeat does not move it; the claim checks a lease that looks stale against
        the record (``layers/active/lua/claim.lua``)."""
        return f"{self._tagged}_partitions:leases"

    @property
    def failed(self) -> str:
        """Sorted set of failed pids (score = pid)."""
        return f"{self._tagged}_partitions:failed"

    @property
    def unreadable(self) -> str:
        """Sorted set of pids whose records no reader can read (score = when they were set aside,
        unix ms): out of the pending, lease and failed indexes, so no claim meets them again; the
        records stay in the active hash until mended and requeued (``layers/active/lua/upgrade.lua``)."""
        return f"{self._tagged}_partitions:unreadable"

    @property
    def meta(self) -> str:
        """Hash with the highest partition id ever created (``last_pid``) and similar."""
        return f"{self._tagged}_partitions:meta"

    @property
    def done(self) -> str:
        """Bitmap: partitions completed through the SDK (set with the queue append)."""
        return f"{self._tagged}_partitions:done"

    @property
    def complete_latency(self) -> str:
        """Hash: the worker SDK's completion latencies, counts per bucket ``b{i}`` and ``sum_us``."""
        return f"{self._tagged}_partitions:complete_latency"

    @property
    def retries(self) -> str:
        """Sorted set of failed pids a retry policy sends back to pending, score = when (unix ms):
        written by a failure with a policy (``finish.lua``), read by the workers' beats (``beat.lua``)."""
        return f"{self._tagged}_partitions:retries"

    @property
    def attempts(self) -> str:
        """Hash pid -> the failures a retry policy counted for it so far; the field goes when the runtime
        completes the partition (``finish.lua``; one completed by the SDK's ``complete`` keeps its few
        bytes, its pid never used again) or it is retried by hand (``retry_failed``)."""
        return f"{self._tagged}_partitions:attempts"

    @property
    def presence(self) -> str:
        """Hash worker id -> the presence entry of a worker runtime process (JSON: host, pid, window,
        partitions in hand, processed, last beat, when it expires), refreshed by its beats."""
        return f"{self._tagged}_runtime:workers"

    @property
    def presence_expiry(self) -> str:
        """Sorted set worker id -> when its presence entry expires (unix ms): a beat deletes the
        entries of processes that stopped beating (``beat.lua``)."""
        return f"{self._tagged}_runtime:expiry"

    # the leader (`layers.active.planning`)
    @property
    def leader_lock(self) -> str:
        """Hash: the leader's lease (``holder``, its fencing ``token``, ``since`` in unix ms), expiring a
        lease after its last renewal (``lead.lua``)."""
        return f"{self._tagged}_leader:lock"

    @property
    def leader_tokens(self) -> str:
        """String counter: the last fencing token handed out; each new lease takes the next one, so a
        leader's writes carry a token no earlier lease had (``_fence.lua``)."""
        return f"{self._tagged}_leader:tokens"

    @property
    def go_leader_lock(self) -> list[str]:
        """Go's leader lock as an optional trailing script key (empty unless bound with Go's namespace)."""
        elk = self.elk
        return [] if elk is None or self.elk_namespace is None else [elk.leader_lock(self.elk_namespace)]

    @property
    def plan(self) -> str:
        """Hash: the leader's plan: ``first_id`` and ``next_id`` (decimal text: the planned IDs are
        ``first_id .. next_id - 1``, contiguous), ``partitions`` and ``runs`` created, the last writer's
        ``token``, Go's ``last_allocated_id`` as the last run left it (``go_last_allocated``, bound only:
        a change since is Go's leader's), the pids of runs no longer listed (``folded``: ``lo-hi,...``)
        (``plan.lua``); and where its check is: ``seen_pid`` (the partitions created up to it
        are checked), ``sweep_pid`` (its walk over every partition), ``passes``, ``checked_at``,
        ``failed_final`` (``plan_check.lua``)."""
        return f"{self._tagged}_plan"

    @property
    def plan_holes(self) -> str:
        """Hash pid -> JSON (IDs, why) of each planned partition the leader's check found neither active
        nor completed, or holding less than its plan; ``run:<pid>`` for runs that do not follow on. Kept
        while it lasts: each check of a pid sets or deletes its entry."""
        return f"{self._tagged}_plan:holes"

    @property
    def plan_overlaps(self) -> str:
        """Hash pid -> JSON of each partition the check found over IDs planned for another one (created
        outside the plan, or holding more than its plan); as `plan_holes`."""
        return f"{self._tagged}_plan:overlaps"

    @property
    def plan_runs(self) -> str:
        """List: the latest creation calls of the plan (at most `layers.active.planning.RUNS_KEPT`), one
        entry each, ``first_pid,last_pid,min_id,max_id,size``, in order; a call that goes on from the last
        entry in its size and pids is merged into it. Older entries are folded: their pids kept as
        intervals in the plan's ``folded`` field."""
        return f"{self._tagged}_plan:runs"

    @property
    def plan_go_spans(self) -> str:
        """List: ``min_id,max_id`` of each span of IDs elk_coordinator's leader planned between the plan's
        runs (a bound namespace whose leader was Go's for a while), in order."""
        return f"{self._tagged}_plan:go"

    @property
    def finish_keys(self) -> list[str]:
        """KEYS[1..11] of ``finish.lua``, in its order (Go's stats hash follows in a bound namespace)."""
        return [self.active, self.leases, self.done, self.queue, self.archival_paused, self.archival_held,
                self.complete_latency, self.pending, self.failed, self.retries, self.attempts]  # fmt: skip

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
    def expiry(self) -> str:
        """Sorted set (summary tier): batch number, score = newest completion in it (unix s)."""
        return f"{self._tagged}_completed:expiry"

    @property
    def expired_batches(self) -> str:
        """Bitmap (summary tier): batches whose detail the expiry sweep deleted, so a check of the
        archive tells detail that expired on purpose from detail that is missing (`stats.lost`)."""
        return f"{self._tagged}_completed:expired"

    @property
    def cold_map(self) -> str:
        """String (a batch tier with a cold store): per batch number a big-endian u32 at byte
        ``4 * batch``, the number of the cold file holding that batch's records (0: none), so a
        lookup finds a batch's file with one GETRANGE (`layers.archive.cold`)."""
        return f"{self._tagged}_completed:cold"

    @property
    def cold_files(self) -> str:
        """Hash: cold file number -> JSON (name, rows, bytes, batches, pid and time bounds, when written)."""
        return f"{self._tagged}_completed:cold_files"

    @property
    def cold_retired(self) -> str:
        """Sorted set: names of cold files whose batches a newer file holds, score = when (unix s);
        deleted from the store once no reader can still be on its way to them."""
        return f"{self._tagged}_completed:cold_retired"

    @property
    def sealed_counted(self) -> str:
        """Sorted set: archiver process -> the last of its seals' bookkeeping counted (its byte
        counters added), so a bookkeeping sent again is not counted twice (`seal_bookkeeping.lua`)."""
        return f"{self._tagged}_completed:counted"

    @property
    def archivers(self) -> str:
        """Hash consumer name -> health JSON (pid, host, started, last beat, rate, pending) of
        each archiver; an entry not beaten for a while belongs to a dead archiver."""
        return f"{self._tagged}_archivers"

    @property
    def maintenance_lock(self) -> str:
        """String: the replica doing tier moves, sweeps and compaction, with a time to live."""
        return f"{self._tagged}_maintenance:lock"

    @property
    def unsealed(self) -> str:
        """Sorted set (batch tiers): batch numbers whose records were stored unsealed in the simple
        hash while compression was skipped (a critical backlog), score = last such write (unix ms);
        maintenance seals them batch by batch once the backlog is gone."""
        return f"{self._tagged}_completed:unsealed"

    @property
    def pressure(self) -> str:
        """Hash: the backlog mode every archiver follows (``skip`` = store without sealing), since
        when and why, and when the backlog first looked critical; written by the lock holder."""
        return f"{self._tagged}_archive:pressure"

    @property
    def archival_paused(self) -> str:
        """The archival switch, a string read by `complete()`: absent while every completion is
        archived; the gray release's share (``{"share":N}``), or a pause (JSON: since when, by
        whom, and the share to go back to), otherwise (`layers/control/lua/_share.lua`). A completion
        paused or outside the share stays in the active hash and queues nothing. Named before
        the share existed."""
        return f"{self._tagged}_archival:paused"

    @property
    def archival_held(self) -> str:
        """Sorted set of pids completed while archival was paused or outside the share (score =
        bucket * 1e13 + completion in unix ms, `_share.lua`), sent to the archive queue once
        archival runs for their bucket."""
        return f"{self._tagged}_archival:held"

    @property
    def archival_released(self) -> str:
        """String counter: held completions sent to the archive queue so far (`release_held.lua`)."""
        return f"{self._tagged}_archival:released"

    @property
    def progress(self) -> str:
        """Hash: unix minute -> ``"{time},{completed so far}"``, sampled by the lock holder (about a
        day of minutes): the completion rates and the ETA of `partarchive status`."""
        return f"{self._tagged}_progress:samples"

    @property
    def open_batches(self) -> str:
        """Sorted set of batch numbers with staged records, score = last staging time (unix ms)."""
        return f"{self._tagged}_completed:open"

    def _batch_part(self, batch_no: int) -> str:
        return f"{{{batch_no}}}" if self.cluster and self.elk_prefix is None else str(batch_no)

    def batch(self, batch_no: int) -> str:
        """String: a sealed batch as versions before shelves kept it, one key per batch (read, and
        moved into its shelf by the next seal). In cluster mode tagged by batch number."""
        return f"{self._untagged}_completed:batch:{self._batch_part(batch_no)}"

    def shelf(self, shelf_no: int) -> str:
        """String: the sealed batches ``shelf_no * 64 ..`` in one shelf (`codec.framing`); in cluster
        mode tagged by shelf number, so shelves spread over the hash slots."""
        return f"{self._untagged}_completed:shelf:{self._batch_part(shelf_no)}"

    def shelf_quarantine(self, shelf_no: int) -> str:
        """String: a shelf whose slot table was unreadable, kept aside before it was rebuilt."""
        return f"{self._untagged}_completed:corrupt_shelf:{self._batch_part(shelf_no)}"

    def quarantine(self, batch_no: int) -> str:
        """String: a batch blob that failed to decode, kept aside when the batch is re-sealed."""
        return f"{self._untagged}_completed:corrupt:{self._batch_part(batch_no)}"

    def staging(self, batch_no: int) -> str:
        """Hash pid -> archived JSON of a batch not sealed yet; same hash slot as `batch`."""
        return f"{self._untagged}_completed:stage:{self._batch_part(batch_no)}"

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
        """Hash ``{worker_id}:c`` / ``:d`` / ``:p``: count, total duration, processed data."""
        return f"{self._tagged}_stats:workers"

    def stats_range(self, range_no: int) -> str:
        """Hash for partitions ``range_no * width .. + width - 1``: totals, bounds, per-worker fields
        named by registry number (``#12c``, ``#12d``, ``#12p``; `stats.fields`)."""
        return f"{self._tagged}_stats:range:{range_no}"

    def stats_coarse(self, coarse_no: int) -> str:
        """Hash: the merged rollups of old ranges ``coarse_no * 100 .. + 99`` (same fields as a range)."""
        return f"{self._tagged}_stats:coarse:{coarse_no}"

    def stats_day(self, day: str) -> str:
        """Hash for one UTC day (YYYY-MM-DD): ``h00``..``h23`` completions per hour, ``s00``..``s23`` their
        summed durations (seconds), ``w:{worker_id}`` completions per worker, and ``d``, the hours that
        the statistics retention rolled into the day's total (`stats.compaction`)."""
        return f"{self._tagged}_stats:day:{day}"

    @property
    def stats_minutes(self) -> str:
        """Hash: completions per minute, the field a unix minute (``completed_at // 60``), counted with
        the hours of `stats_day` by the same commit, so the dashboard's two charts agree; fields
        older than `stats.progress.MINUTES_KEPT` are not counted, and dropped by the progress sampler."""
        return f"{self._tagged}_stats:minutes"

    @property
    def stats_index_check(self) -> str:
        """Hash: the archiver's paced check of the archive against the index (`stats.index_check`),
        while one is under way: next range, last range, running counts; ``...:examples``, a list of
        the first differences."""
        return f"{self._tagged}_stats:index_check"

    @property
    def stats_meta(self) -> str:
        """Hash: range width in use, last consistency check (time, result, differences)."""
        return f"{self._tagged}_stats:meta"

    # imports from elk_coordinator
    @property
    def migrate_rejects(self) -> str:
        """Hash ``source:field`` -> reason: records an import could not represent (left in place)."""
        return f"{self._tagged}_migrate:rejects"

    @property
    def migrate_flags(self) -> str:
        """Hash pid -> why an imported record is uncertain: a placeholder worker, a range widened
        from Go's 32-bit count, or both (``; `` between them)."""
        return f"{self._tagged}_migrate:flags"

    def patterns(self) -> list[str]:
        """SCAN patterns that match every key of this namespace (for tests and cleanup)."""
        escape = str.maketrans({c: f"\\{c}" for c in "{}[]*?\\"})
        return sorted({f"{self._tagged.translate(escape)}_*", f"{self._untagged.translate(escape)}_*"})

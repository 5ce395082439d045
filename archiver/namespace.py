"""One namespace, wired once: its settings, keys and tier policy, and the layers built on them.

Every process (daemon, HTTP API, CLI commands, importer) builds one `Namespace` from its
`Config` and a client, and takes its parts from it, so they share one key schema, one tier
policy, one script registry (`Scripts.of`) and one worker registry instead of each building
its own.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import redis

from archiver.config import Config
from archiver.snapshot import NamespaceSnapshot, SnapshotReader
from codec import ValidationError
from layers import ActiveLayer, ArchiveLayer, ArchiveQueue, KeySchema, TierPolicy
from layers.archive.cold_store import ColdReads
from layers.archive.commit import CommitBuffer
from layers.control.liveness import Liveness
from layers.control.maintenance import MaintenanceLock
from layers.control.pressure import BacklogPressure
from layers.control.switch import ArchivalSwitch
from layers.plumbing.replies import as_text
from layers.plumbing.resharding import ride_out
from stats import StatsCompactor, StatsReader
from stats.progress import ProgressLog
from stats.rollup import commit_buffer


class Namespace:
    def __init__(self, client: redis.Redis, config: Config) -> None:
        if isinstance(client, redis.RedisCluster) and not config.cluster:
            config = replace(config, cluster=True)  # a cluster client needs hash-tagged keys
        self.redis = client
        self.config = config
        self.keys: KeySchema = config.keys
        self.policy: TierPolicy = config.policy

    @classmethod
    def bound(cls, client: redis.Redis, config: Config) -> Namespace:
        """The namespace with the elk_coordinator KeyPrefix the server keeps for it (`remember_binding`),
        so ``--namespace`` alone reaches a bound namespace; a different configured prefix is refused."""
        ns = cls(client, config)
        stored = ns.stored_binding()
        if stored is None or stored == config.elk_prefix:
            return ns
        if config.elk_prefix is not None:
            raise ns._contradiction(stored)
        return cls(client, replace(ns.config, elk_prefix=stored))

    def stored_binding(self) -> str | None:
        raw = self.redis.get(self.keys.elk_binding)
        return None if raw is None else as_text(raw)

    def remember_binding(self) -> None:
        """Keep the namespace's KeyPrefix in Redis (once; a different one stored is refused), so every
        command finds the binding from the namespace alone. Done by the writers: the daemon, the import."""
        prefix = self.config.elk_prefix
        if prefix is None or self.redis.set(self.keys.elk_binding, prefix, nx=True):
            return
        stored = self.stored_binding()
        if stored is not None and stored != prefix:
            raise self._contradiction(stored)

    def _contradiction(self, stored: str) -> ValidationError:
        return ValidationError(
            f"namespace {self.config.namespace!r} is bound to elk_coordinator KeyPrefix {stored!r}, "
            f"not {self.config.elk_prefix!r}: drop --elk-prefix (PARTARCHIVE_ELK_PREFIX) or give {stored!r}"
        )

    def exists(self) -> bool:
        """Whether the server holds anything of this namespace: partitions, counters, queue or archive."""
        k = self.keys
        keys = (k.active, k.pending, k.queue, k.archive_meta, k.stats_global)
        if not isinstance(self.redis, redis.RedisCluster):
            return bool(self.redis.exists(*keys))
        return bool(ride_out(lambda: self.redis.exists(*keys), "namespace_exists", keys=keys))  # one slot: TRYAGAIN

    @cached_property
    def active(self) -> ActiveLayer:
        return ActiveLayer(
            self.redis, self.keys, lease_timeout=self.config.lease_timeout_s, record_format=self.config.record_format
        )

    @cached_property
    def queue(self) -> ArchiveQueue:
        return ArchiveQueue(self.redis, self.keys)

    @cached_property
    def archive(self) -> ArchiveLayer:
        """The archive layer; with a cold store configured (``run --cold-store``), its cold tier, which
        the expiry sweep writes expired batches to (`ColdStoreUnavailable` without the cold extra)."""
        archive = ArchiveLayer(self.redis, self.keys, self.policy)
        cfg = self.config
        if cfg.cold_store is not None:
            from layers.archive.cold import ColdTier
            from layers.archive.cold_store import ColdStore

            store = ColdStore(cfg.cold_store, self.keys.namespace)
            archive.cold = ColdTier(archive, store, file_batches=cfg.cold_file_batches, gather_s=cfg.cold_gather_s)
        return archive

    @cached_property
    def cold_reads(self) -> ColdReads:
        """How this process's readers reach the cold store: the configured one, else the one the
        archive meta names (`ColdReads`)."""
        return ColdReads(self.config.cold_store, self.keys.namespace)

    @cached_property
    def liveness(self) -> Liveness:
        return Liveness(self.redis, self.keys)

    @cached_property
    def archival(self) -> ArchivalSwitch:
        return ArchivalSwitch(self.redis, self.keys)

    @cached_property
    def pressure(self) -> BacklogPressure:
        return BacklogPressure(self.redis, self.keys)

    @cached_property
    def progress(self) -> ProgressLog:
        return ProgressLog(self.redis, self.keys)

    @cached_property
    def snapshots(self) -> SnapshotReader:
        return SnapshotReader(self.redis, self.keys, self.policy)

    def snapshot(self, *, rollups: bool = False) -> NamespaceSnapshot:
        """The namespace's state, read once (`archiver.snapshot`)."""
        return self.snapshots.read(rollups=rollups)

    @cached_property
    def stats_reader(self) -> StatsReader:
        return StatsReader(self.redis, self.keys)

    def commit_buffer(self) -> CommitBuffer:
        """The archiver's buffer of entries waiting for their commit (one per daemon)."""
        cfg = self.config
        return commit_buffer(
            self.archive,
            flush_count=cfg.stats_flush_count,
            flush_interval_s=cfg.stats_flush_interval_s,
            range_width=cfg.stats_range_width,
        )

    def compactor(self) -> StatsCompactor:
        cfg = self.config
        return StatsCompactor(
            self.redis,
            self.keys,
            range_width=cfg.stats_range_width,
            hourly_keep_days=cfg.stats_hourly_keep_days,
            range_keep_days=cfg.stats_range_keep_days,
        )

    def maintenance_lock(self, holder: str) -> MaintenanceLock:
        return MaintenanceLock(self.redis, self.keys, holder, self.config.maintenance_lock_ttl_s)

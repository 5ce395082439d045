"""Configuration of the processes: defaults, overridden by environment, overridden by flags."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from codec.errors import ValidationError
from layers import KeySchema, TierPolicy
from layers.active.sdk import RECORD_FORMATS
from layers.archive.commit import DEFAULT_FLUSH_COUNT, DEFAULT_FLUSH_INTERVAL_S
from layers.control.pressure import PressureSettings
from layers.keys import check_namespace
from stats import DEFAULT_RANGE_WIDTH

if TYPE_CHECKING:
    from archiver.runtime.leader import LeaderSettings
    from archiver.runtime.settings import WorkerSettings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Connections of an asyncio client's pool (`archiver.engine.connect.waiting_pool`): redis-py's default.
DEFAULT_POOL_CONNECTIONS = 100
_TIERS = TierPolicy()  # the tier settings' defaults live in TierPolicy
_PRESSURE = PressureSettings()  # and the critical backlog's in PressureSettings


@dataclass(frozen=True, slots=True)
class Config:
    redis_url: str | None = None
    namespace: str = "elk"
    cluster: bool = False
    sentinel: str | None = None
    sentinel_master: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    redis_password: str | None = field(default=None, repr=False)
    sentinel_retry_s: float = 60.0
    redis_pool_connections: int = DEFAULT_POOL_CONNECTIONS
    elk_prefix: str | None = None
    elk_namespace: str | None = None
    record_format: str | None = None
    adopt_elk: bool = False
    adopt_interval_s: float = 5.0
    read_count: int = 500
    block_ms: int = 1000
    claim_idle_ms: int = 60_000
    max_deliveries: int = 5
    drain_timeout_s: float = 10.0
    health_interval_s: float = 5.0
    lease_timeout_s: float = 300.0
    compressed_from: int = _TIERS.compressed_from
    summary_above: int = _TIERS.summary_above
    batch_size: int = _TIERS.batch_size
    retention_s: int = _TIERS.retention_s
    seal_idle_s: float = _TIERS.seal_idle_s
    maintenance_interval_s: float = 1.0
    maintenance_slice_s: float = 0.2
    maintenance_lock_ttl_s: float = 30.0
    stats_flush_count: int = DEFAULT_FLUSH_COUNT
    stats_flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    stats_range_width: int = DEFAULT_RANGE_WIDTH
    stats_hourly_keep_days: int = 30
    stats_range_keep_days: int = 30
    skip_compression_backlog: int = _PRESSURE.critical_backlog
    skip_compression_for_s: float = _PRESSURE.critical_for_s
    skip_compression_age_s: float = _PRESSURE.critical_age_s
    skip_compression_low_water: int = _PRESSURE.low_water
    scale_interval_s: float = 5.0
    scale_up_age_s: float = 10.0
    scale_down_idle_s: float = 60.0
    worker_window: int = 3
    worker_heartbeat_s: float = 10.0
    worker_max_attempts: int = 3
    worker_backoff_s: float = 1.0
    worker_backoff_max_s: float = 300.0
    worker_breaker_failures: int = 3
    worker_breaker_cooldown_s: float = 30.0
    leader_lease_s: float = 30.0
    allocation_interval_s: float = 30.0
    partition_multiple: int = 5
    max_pending: int = 1000
    cold_store: str | None = field(default=None, repr=False)  # may carry a password (`codec.redact`)
    cold_file_batches: int = 1024
    cold_gather_s: float = 300.0

    @property
    def keys(self) -> KeySchema:
        """The namespace's key schema (bound to an elk_coordinator KeyPrefix when configured)."""
        return KeySchema(self.namespace, self.cluster, self.elk_prefix, self.elk_namespace)

    @property
    def policy(self) -> TierPolicy:
        return TierPolicy(
            compressed_from=self.compressed_from,
            summary_above=self.summary_above,
            batch_size=self.batch_size,
            retention_s=self.retention_s,
            seal_idle_s=self.seal_idle_s,
        )

    @property
    def pressure(self) -> PressureSettings:
        """When the backlog is critical enough to skip compression (`layers.control.pressure`)."""
        return PressureSettings(
            critical_backlog=self.skip_compression_backlog,
            critical_for_s=self.skip_compression_for_s,
            critical_age_s=self.skip_compression_age_s,
            low_water=self.skip_compression_low_water,
            looks_every_s=self.maintenance_interval_s,
        )

    def worker_settings(self, **overrides: Any) -> WorkerSettings:
        """The worker runtime's settings (`archiver.runtime.settings`), flags in ``overrides`` (None: not
        given) over these; checked there, so a bad value stops only the worker."""
        from archiver.runtime.settings import WorkerSettings
        from layers.active.window import RetryPolicy

        given = {name: value for name, value in overrides.items() if value is not None}
        backoff = given.pop("backoff_s", self.worker_backoff_s)
        retry = RetryPolicy(
            max_attempts=given.pop("max_attempts", self.worker_max_attempts),
            backoff_s=backoff,
            backoff_max_s=max(self.worker_backoff_max_s, backoff),
        )
        values: dict[str, Any] = {
            "window": self.worker_window,
            "heartbeat_s": self.worker_heartbeat_s,
            "lease_s": self.lease_timeout_s,
            "drain_timeout_s": self.drain_timeout_s,
            "breaker_failures": self.worker_breaker_failures,
            "breaker_cooldown_s": self.worker_breaker_cooldown_s,
        }
        return WorkerSettings(**(values | given), retry=retry)

    def leader_settings(self, **overrides: Any) -> LeaderSettings:
        """The worker runtime leader's settings (`archiver.runtime.leader`), flags in ``overrides`` (None:
        not given) over these; checked there."""
        from archiver.runtime.leader import LeaderSettings

        values = {"lease_s": self.leader_lease_s, "interval_s": self.allocation_interval_s,
                  "multiple": self.partition_multiple, "max_pending": self.max_pending}  # fmt: skip
        return LeaderSettings(**(values | {name: value for name, value in overrides.items() if value is not None}))

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """The Sentinel addresses (empty without ``--sentinel``)."""
        return parse_addresses(self.sentinel) if self.sentinel else []

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        self._check_sentinel()
        _ = self.keys  # validates the binding
        if self.record_format is not None and self.record_format not in RECORD_FORMATS:
            raise ValidationError(f"record_format must be native or elk, got {self.record_format!r}")
        if self.adopt_elk and self.elk_prefix is None:
            raise ValidationError("adopting elk_coordinator's completions needs the namespace bound: set --elk-prefix")
        for name in (
            "read_count",
            "block_ms",
            "claim_idle_ms",
            "stats_flush_count",
            "stats_range_width",
            "max_deliveries",
            "redis_pool_connections",
        ):
            if getattr(self, name) < 1:
                raise ValidationError(f"{name} must be at least 1")
        if (
            self.drain_timeout_s <= 0
            or self.health_interval_s <= 0
            or self.lease_timeout_s <= 0
            or self.maintenance_interval_s < 0
            or self.stats_flush_interval_s <= 0
        ):
            raise ValidationError("timeouts must be positive")
        _ = self.policy  # validates the tier settings
        _ = self.pressure
        if self.scale_interval_s <= 0 or self.scale_up_age_s < 0 or self.scale_down_idle_s < 0:
            raise ValidationError("the scaling interval must be positive, its ages not negative")
        if not 1 <= self.cold_file_batches <= 100_000 or self.cold_gather_s < 0:
            raise ValidationError("cold_file_batches must be in 1..100000 and cold_gather_s not negative")
        if self.cold_store is not None and not self.cold_store.strip():
            raise ValidationError("the cold store is a directory or an fsspec URL, not an empty string")

    def _check_sentinel(self) -> None:
        if not self.sentinel:
            if self.sentinel_master:
                raise ValidationError("--sentinel-master needs --sentinel host:port[,...] (PARTARCHIVE_SENTINEL)")
            return
        if self.cluster:
            raise ValidationError(
                "--sentinel and --cluster exclude each other: the sentinels of one primary, or any node of a cluster"
            )
        _ = self.sentinels  # validates the addresses
        if not self.sentinel_master:
            raise ValidationError(
                "--sentinel needs --sentinel-master NAME (PARTARCHIVE_SENTINEL_MASTER): the name the sentinels monitor"
            )
        if self.sentinel_retry_s <= 0:
            raise ValidationError("sentinel_retry_s must be positive")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> Config:
        """``REDIS_URL`` and ``PARTARCHIVE_<FIELD>`` variables, then explicit overrides."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        if env.get("REDIS_URL"):
            values["redis_url"] = env["REDIS_URL"]
        for f in fields(cls):
            raw = env.get(f"PARTARCHIVE_{f.name.upper()}")
            if raw is None or f.name == "redis_url":
                continue
            values[f.name] = _parse(f.name, raw, f.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)


_ADDRESS = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>[0-9]{1,5})")


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (an IPv6 host in brackets: ``[::1]:26379``) as (host, port) pairs."""
    found: list[tuple[str, int]] = []
    for item in text.split(","):
        match = _ADDRESS.fullmatch(item.strip())
        port = int(match.group("port")) if match else 0
        if match is None or not 1 <= port <= 65535:
            raise ValidationError(f"--sentinel takes host:port[,host:port...], got {item.strip()!r}")
        found.append((match.group("ipv6") or match.group("host"), port))
    return found


def _parse(name: str, raw: str, kind: Any) -> Any:
    kind = str(kind)
    try:
        if kind.startswith("bool"):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValidationError(f"PARTARCHIVE_{name.upper()} must be a number, got {raw!r}") from None
    return raw

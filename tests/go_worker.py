"""An elk_coordinator worker and leader, emulated from FORMAT.md's call sequences (for side-by-side tests).

Writes go through the same version check as Go's ``HUpdatePartitionWithVersion`` (cjson decode
of the stored record, compare ``version``, HSET the new JSON); completion is Go's unscripted
sequence (HSET ``elk_archived``, HDEL the active hash, counters). Records are Go's bytes.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from codec.elk import ElkRecord, decode_elk
from codec.gojson import ZERO_TIME, GoTime
from layers.keys import ElkKeys

_VERSIONED_WRITE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local v = cjson.decode(cur).version or 0
  if v ~= tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
_UNREGISTER = """
local workers = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #workers, 2 do
  local ok, decoded = pcall(cjson.decode, workers[i])
  if ok and decoded.worker_id == ARGV[1] then
    decoded.stop_time = ARGV[2]
    redis.call('ZREM', KEYS[1], workers[i])
    redis.call('ZADD', KEYS[1], workers[i + 1], cjson.encode(decoded))
    break
  end
end
redis.call('DEL', KEYS[2])
return 'OK'
"""
CHINA = 8 * 3600


def now(offset: int = CHINA) -> GoTime:
    t = time.time_ns()
    return GoTime(t // 10**9, t % 10**9, offset)


class GoWorker:
    def __init__(self, client: redis.Redis, key_prefix: str, worker_id: str) -> None:
        self.redis = client
        self.keys = ElkKeys(key_prefix)
        self.worker_id = worker_id

    def create(self, count: int, size: int = 1000) -> list[int]:
        """The leader's CreatePartitionsIfNotExist: ids after max_partition_id, version 1, counters."""
        stats: Any = self.redis.hgetall(self.keys.stats)
        last = int(stats.get(b"max_partition_id", b"0"))
        last_id = int(stats.get(b"last_allocated_id", b"0"))
        t = now()
        pids = []
        for pid in range(last + 1, last + count + 1):
            lo = last_id + 1 + (pid - last - 1) * size
            rec = ElkRecord(pid, lo, lo + size - 1, "", t, "pending", t, None, 1, "", t)
            self.redis.hset(self.keys.partitions, str(pid), rec.to_json())
            pids.append(pid)
        self.redis.hincrby(self.keys.stats, "total", count)
        self.redis.hincrby(self.keys.stats, "pending", count)
        self.redis.hset(
            self.keys.stats, mapping={"max_partition_id": last + count, "last_allocated_id": last_id + count * size}
        )
        return pids

    def try_elect(self, namespace: str, expiry_ms: int = 30_000) -> bool:
        """The leader's TryElect (leader/election.go): its worker id into ``P NS:leader_lock``, SET NX PX."""
        return bool(self.redis.set(self.keys.leader_lock(namespace), self.worker_id, nx=True, px=expiry_ms))

    def register(self, offset: int = CHINA) -> bytes:
        """RegisterWorker (data/redis.go): its WorkerInfo in ``P workers``, its heartbeat key for 3 minutes."""
        t = now(offset)
        member = f'{{"worker_id":"{self.worker_id}","register_time":"{t.format()}"}}'.encode()
        self.redis.zadd(self.keys.workers, {member: t.seconds * 10**9 + t.nanos})
        self.redis.set(self.keys.heartbeat(self.worker_id), GoTime(t.seconds, 0, offset).format(), ex=180)
        return member

    def unregister(self, stop_time: str, workers_key: str | None = None) -> None:
        """UnregisterWorker: its member rewritten with ``stop_time`` by a script (cjson decode, set, encode;
        the score kept), its heartbeat key deleted; on ``workers_key`` instead of ``P workers`` if given."""
        self.redis.eval(_UNREGISTER, 2, workers_key or self.keys.workers, self.keys.heartbeat(self.worker_id),
                        self.worker_id, stop_time)  # fmt: skip

    def records(self) -> dict[int, ElkRecord]:
        """GetAllActivePartitions: records Go cannot decode are skipped."""
        out = {}
        raw: Any = self.redis.hgetall(self.keys.partitions)
        for fld, value in raw.items():
            try:
                out[int(fld)] = decode_elk(value)
            except ValueError:
                continue
        return out

    def _write(self, rec: ElkRecord, expected: int) -> bool:
        new = rec._replace(version=expected + 1)
        return bool(
            self.redis.eval(_VERSIONED_WRITE, 1, self.keys.partitions, rec.partition_id, expected, new.to_json())
        )

    def claim(self) -> ElkRecord | None:
        for pid, rec in sorted(self.records().items()):
            if rec.status == "pending":
                t = now()
                claimed = rec._replace(status="claimed", worker_id=self.worker_id, updated_at=t, last_heartbeat=t)
                if self._write(claimed, rec.version):
                    self.redis.hincrby(self.keys.stats, "pending", -1)
                    self.redis.hincrby(self.keys.stats, "claimed", 1)
                    return self.get(pid)
        return None

    def get(self, pid: int) -> ElkRecord:
        raw: Any = self.redis.hget(self.keys.partitions, str(pid))
        return decode_elk(raw)

    def start(self, pid: int) -> ElkRecord:
        rec = self.get(pid)
        assert rec.worker_id == self.worker_id
        t = now()
        assert self._write(rec._replace(status="running", updated_at=t, last_heartbeat=t), rec.version)
        return self.get(pid)

    def complete(self, pid: int) -> None:
        rec = self.get(pid)
        assert rec.worker_id == self.worker_id
        self.redis.hset(self.keys.archived, str(pid), rec._replace(status="completed", updated_at=now()).to_json())
        self.redis.hdel(self.keys.partitions, str(pid))
        self.redis.hincrby(self.keys.stats, "running", -1)
        self.redis.hincrby(self.keys.stats, "completed", 1)

    def fail(self, pid: int, error: str) -> ElkRecord:
        """Go's three failure writes: status + error, release, failed again."""
        rec = self.get(pid)
        options = dict(rec.options or {}, error=error)
        failed = rec._replace(status="failed", error=error, options=options, updated_at=now())
        assert self._write(failed, rec.version)
        rec = self.get(pid)
        assert self._write(rec._replace(last_heartbeat=ZERO_TIME, updated_at=now()), rec.version)
        rec = self.get(pid)
        assert self._write(rec._replace(updated_at=now()), rec.version)
        return self.get(pid)

"""The Redis-backed worker registry: persists the `codec.WorkerNumbering` numbering."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import redis

from codec import ArchivedPartition, DecodeError, WorkerNumbering, find_in_blob
from codec.validate import check_worker_id
from layers.keys import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.roundtrip import Part, RoundTrip, raised
from layers.plumbing.runners import SyncIO
from layers.plumbing.scripts import Scripts
from layers.plumbing.steps import Batch, Steps


class RegistryReader:
    """The numbering of a registry as last read, and its reading as steps (`layers.plumbing.steps`): what a
    reader of sealed batches needs, on either kind of client."""

    def __init__(self, keys: KeySchema) -> None:
        self.keys = keys
        self.map = WorkerNumbering()
        self.generation: str | None = None  # of the registry ``map`` was read from (see register_workers.lua)
        self._lock = threading.RLock()  # a bulk import registers from two threads

    def is_current(self, generation: Any) -> bool:
        """Whether ``generation`` (the field '' of the workers hash, as read) is the cached one."""
        return (None if generation is None else as_text(generation)) == self.generation

    def refresh_steps(self, *, forget: bool = False) -> Steps[WorkerNumbering]:
        """Read every pair from Redis into the map (after another process registered workers);
        with ``forget`` the map is rebuilt from what was read alone."""
        batch = Batch()
        batch.hget(self.keys.workers, "")
        batch.hgetall(self.keys.workers_by_short)
        generation, raw = yield batch
        generation = None if generation is None else as_text(generation)
        with self._lock:
            if forget or generation != self.generation:  # another registry than the cached one: nothing of it holds
                self.map = WorkerNumbering()
                self.generation = generation
            try:
                for short, worker_id in raw.items():
                    self.map.add(int(short), as_text(worker_id))
            except ValueError as exc:
                raise DecodeError(f"the worker registry is corrupt: {exc}") from None
            return self.map

    def find_steps(self, blob: bytes, pid: int) -> Steps[ArchivedPartition | None]:
        """One partition's record in a sealed blob (None if the batch does not hold it), its worker
        named by this numbering, read again once if the blob names a worker it lacks (another
        archiver may have registered new workers)."""
        try:
            return find_in_blob(blob, self.map, pid)
        except DecodeError:
            yield from self.refresh_steps()
            return find_in_blob(blob, self.map, pid)


class WorkerRegistrar(RegistryReader):
    """A local `WorkerNumbering` kept in step with the registry in Redis."""

    def __init__(self, redis_client: redis.Redis, keys: KeySchema) -> None:
        super().__init__(KeySchema.of(keys, client=redis_client))
        self.redis = redis_client
        self._io = SyncIO(redis_client)
        self._scripts = Scripts.of(redis_client)
        self.round_trips = 0

    def register(self, worker_ids: Iterable[str], *, verify: bool = True) -> WorkerNumbering:
        """Make sure every worker has a number (assigned atomically in Redis); returns the local map.

        With ``verify`` the numbers the local map holds for these workers are first checked
        against Redis (one HMGET): after Redis lost its data, or another process changed the
        registry, a stale number would name the wrong worker in every blob encoded with it.
        """
        wanted = _checked(worker_ids)
        with self._lock:
            return self._register(wanted, verify)

    def numbering(self, worker_ids: Iterable[str]) -> tuple[WorkerNumbering, str | None]:
        """`register` without the check against Redis (no round trip when every worker is
        known), and the registry generation those numbers belong to, read together: the commit
        script refuses numbers of a registry that has changed since."""
        wanted = _checked(worker_ids)
        with self._lock:
            return self._register(wanted, verify=False), self.generation

    def add_register(self, trip: RoundTrip, worker_ids: Iterable[str]) -> Part[WorkerNumbering]:
        """`register` with the check of the known numbers in the caller's round trip (an HMGET,
        none when no worker is known yet): the part's value is the map, new workers registered."""
        wanted = _checked(worker_ids)
        with self._lock:
            known = [w for w in wanted if w in self.map]

        def read(replies: list[Any]) -> WorkerNumbering:
            with self._lock:
                if known:
                    self._check(known, raised(replies)[0])
                return self._register(wanted, verify=False)

        part = trip.part(read)
        if known:
            part.hmget(self.keys.workers, ["", *known])
        return part

    def _check(self, known: list[str], stored: Any) -> None:
        """Reload if Redis's numbers for ``known`` (and its generation) are not the cached ones."""
        if [None if raw is None else as_text(raw) for raw in stored] != [
            self.generation,
            *(str(self.map.known_short_id(w)) for w in known),
        ]:
            self.reload()  # out of step with Redis (it lost its data, or was changed by hand)

    def _register(self, wanted: list[str], verify: bool) -> WorkerNumbering:
        known = [w for w in wanted if w in self.map]
        if verify and known:
            self.round_trips += 1
            self._check(known, self.redis.hmget(self.keys.workers, ["", *known]))
        new = [w for w in wanted if w not in self.map]
        if new:
            self.round_trips += 1
            reply = self._scripts("register_workers", [self.keys.workers, self.keys.workers_by_short], new)
            generation = as_text(reply[0])
            if generation != self.generation:
                self.reload()  # a registry other than the one cached: take its numbers
            for worker_id, short in zip(new, reply[1:], strict=True):
                self.map.add(int(short), worker_id)
        return self.map

    def reload(self) -> WorkerNumbering:
        """Forget the local numbering and read Redis's."""
        with self._lock:  # held over the read too: no registration in this process meanwhile
            return self._io.run(self.refresh_steps(forget=True))

    def refresh(self) -> WorkerNumbering:
        """Reload every pair from Redis (after another process registered workers)."""
        with self._lock:
            return self._io.run(self.refresh_steps())


def _checked(worker_ids: Iterable[str]) -> list[str]:
    """The distinct worker IDs, sorted, each checked (`ValidationError` for a bad one)."""
    wanted = sorted(set(worker_ids))
    for w in wanted:
        check_worker_id(w)
    return wanted

"""A runtime process of a namespace bound to an elk_coordinator deployment, registered where Go's leader
counts workers (`layers.active.go_workers`), as a duty of the runtime (`archiver.runtime.core.Duty`):
registered as the process starts, kept alive every Go HeartbeatInterval (10 s), and unregistered, as
Go's ``Mgr.Stop`` does, when it stops. Go's leader then plans for these workers too."""

from __future__ import annotations

import structlog

from archiver.runtime.core import TROUBLE
from layers.active.go_workers import GoWorkers
from layers.keys import KeySchema
from layers.plumbing.steps import Steps

log = structlog.get_logger("partarchive.worker")

#: elk_coordinator's HeartbeatInterval: how often its nodes refresh their heartbeat key.
GO_HEARTBEAT_S = 10.0


class ElkRegistration:
    name = "elk_coordinator registration"

    def __init__(self, keys: KeySchema, worker_id: str) -> None:
        self.registry = GoWorkers(keys)
        self.worker_id = worker_id
        self.registered: str | None = None  # the heartbeat key's value, once registered
        self._failing = False

    def turn(self) -> Steps[float]:
        try:
            if self.registered is None:
                self.registered = yield from self.registry.register(self.worker_id)
            else:
                yield from self.registry.refresh(self.worker_id, self.registered)
        except TROUBLE as exc:
            if not self._failing:
                log.warning("could not refresh the registration with elk_coordinator; trying again", error=str(exc))
            self._failing = True
            return 1.0
        self._failing = False
        return GO_HEARTBEAT_S

    def close(self) -> Steps[None]:
        if self.registered is not None:
            self.registered = None
            yield from self.registry.unregister(self.worker_id)

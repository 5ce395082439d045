"""The dead-letter stream's one writer: what could not be archived, with its reason, never dropped.

Two kinds of letters, both kept to the newest `DEAD_LETTERS_KEPT`:

- a queue entry that cannot be archived (`DeadLetters.entry`): moved off the archive queue in
  the same script that writes the letter (``dead_letter.lua``), so it is in one place or the
  other, never both, never neither;
- stored data found damaged and set aside (`DeadLetters.note`): a staged or simple-tier record,
  a batch blob or a shelf. The letter names it; the data itself is kept where the caller put it
  (a quarantine key, or the payload field).
"""

from __future__ import annotations

from typing import Any

import redis

from layers.keys import ARCHIVER_GROUP, KeySchema
from layers.plumbing.scripts import Scripts

DEAD_LETTERS_KEPT = 10_000


class DeadLetters:
    def __init__(self, client: redis.Redis, keys: KeySchema, group: str = ARCHIVER_GROUP) -> None:
        self.redis = client
        self.keys = keys
        self.group = group
        self._scripts = Scripts.of(client)

    def entry(self, entry_id: str, payload: bytes, reason: str) -> None:
        """Move queue entry ``entry_id`` (acknowledged and deleted) to the dead letters."""
        self._scripts(
            "dead_letter",
            [self.keys.queue, self.keys.dead_letter],
            [self.group, entry_id, reason, payload, DEAD_LETTERS_KEPT],
        )

    def note(self, what: str, reason: str, payload: bytes = b"", *, pipe: Any = None) -> None:
        """A letter for damaged data ``what`` (e.g. ``shelf:3``); into ``pipe`` when given, so it
        goes out with the caller's other writes."""
        target = pipe if pipe is not None else self.redis
        target.xadd(
            self.keys.dead_letter,
            {"entry": what, "reason": reason, "p": payload},
            maxlen=DEAD_LETTERS_KEPT,
            approximate=True,
        )

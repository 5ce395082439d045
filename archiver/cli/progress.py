"""Progress bars for the long commands (migrate, stats verify, demo): tqdm's when the
``progress`` extra is installed, otherwise a plain line on stderr every few seconds, so the
base install needs no terminal library."""

from __future__ import annotations

import sys
import time
from typing import Any

LINE_EVERY_S = 5.0


class _Lines:
    """tqdm's ``n`` / ``total`` / ``update`` as a line now and then."""

    def __init__(self, desc: str, unit: str, total: int | None, disable: bool) -> None:
        self.desc, self.unit, self.total, self.disable = desc, unit, total, disable
        self.n = 0
        self._shown = time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        if not self.disable and time.monotonic() - self._shown >= LINE_EVERY_S:
            self._shown = time.monotonic()
            of = f"/{self.total:,}" if self.total else ""
            print(f"{self.desc}: {self.n:,}{of} {self.unit}", file=sys.stderr, flush=True)

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def progress_bar(*, desc: str, unit: str, total: int | None = None, disable: bool = False, leave: bool = True) -> Any:
    """A context manager giving an object with ``n``, ``total`` and ``update(k)``."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _Lines(desc, unit, total, disable)
    return tqdm(desc=desc, unit=unit, total=total, disable=disable, leave=leave, file=sys.stderr)



"""Machine-readable output of the read commands (``--json``)."""

from __future__ import annotations

import sys
from typing import Any

import orjson


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")

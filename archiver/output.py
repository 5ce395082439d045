"""Machine-readable output of the read commands (``--json``) and of the lookup's fast path."""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson


def json_bytes(data: Any, *, indent: bool = False) -> bytes:
    """``data`` as JSON: orjson's, or the standard library's when an integer is past 64 bits
    (a statistics sum may be: one partition of the whole int64 range processes 2^64 ids)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_INDENT_2 if indent else None)
    except orjson.JSONEncodeError:
        return json.dumps(data, indent=2 if indent else None, ensure_ascii=False).encode()


def print_json(data: Any) -> None:
    sys.stdout.write(json_bytes(data, indent=True).decode() + "\n")

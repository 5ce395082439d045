"""Reading Redis replies: values that are bytes or str depending on the client's decode_responses,
and the one parser of the ``{'err', code, detail}`` replies the Lua scripts give instead of a result.

A script validates everything before its first write and answers ``{'err', code, detail}`` when
it refuses, so such a reply always means nothing was written. Two codes mean the same in every
script and become the same typed error everywhere: ``wrong_type`` (a key of the namespace holds
another Redis type; the detail names it) and ``corrupt_meta`` (a stored setting or counter is
not a number partarchive wrote; the detail is the field, or the key and field). The others are
the caller's to read (`ScriptError`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from layers.errors import CorruptMetadata, WrongKeyType


def as_text(value: Any) -> str:
    """A reply value as str (undecodable bytes replaced, for names and ids that only get displayed)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class ScriptError(NamedTuple):
    """A script's refusal (nothing written): its code and detail."""

    code: str
    detail: str


def script_error(reply: Any, *, meta_key: str = "", unchanged: str = "nothing was changed") -> ScriptError | None:
    """None if ``reply`` is a result. A refusal of a code every script shares is raised as its
    typed error (`WrongKeyType`, `CorruptMetadata` naming ``meta_key`` when the detail is only a
    field, and saying ``unchanged``); any other refusal is returned for the caller to raise."""
    if not (isinstance(reply, list) and reply and as_text(reply[0]) == "err"):
        return None
    code = as_text(reply[1]) if len(reply) > 1 else ""
    detail = as_text(reply[2]) if len(reply) > 2 else ""
    if code == "wrong_type":
        raise WrongKeyType(detail)
    if code == "corrupt_meta":
        where = f"{meta_key} {detail}" if meta_key and " " not in detail else detail
        raise CorruptMetadata(f"{where} is not a number partarchive wrote; {unchanged}")
    return ScriptError(code, detail)

"""fakeredis's SETBIT and whole-key BITCOUNT, made linear in C instead of Python.

fakeredis copies and compares the whole value several times in Python for each SETBIT, and counts
bits through ``bin()``: a bit at offset 2**32 - 1 (a 512 MB bitmap, `tests/test_commit_index.py`)
took 40 s. The replacements give the same replies and store the same values (and dirty a WATCHed
key in the same cases); every other command is fakeredis's own.
"""

from __future__ import annotations

from fakeredis import _msgs as msgs
from fakeredis._core import CommandItem
from fakeredis._helpers import DRAGONFLY_MAX_STRING_SIZE, SimpleError
from fakeredis.commands_mixins.bitmap_mixin import BitmapCommandsMixin


def _setbit(self: BitmapCommandsMixin, key: CommandItem, offset: int, value: int) -> int:
    if self.server_type == "dragonfly" and offset >= 8 * DRAGONFLY_MAX_STRING_SIZE:  # type: ignore[attr-defined]
        raise SimpleError(msgs.INVALID_BIT_OFFSET_MSG)
    old: bytes | None = key.value
    val = old if old is not None else b"\x00"
    byte, mask = offset // 8, 1 << (7 - offset % 8)
    old_byte = val[byte] if byte < len(val) else 0
    new_byte = old_byte | mask if value == 1 else old_byte & ~mask
    grows = old is None or byte >= len(val)
    if grows or old_byte != new_byte or self._server.server_type == "dragonfly":  # type: ignore[attr-defined]
        view = memoryview(val)  # the new value in one copy of the old (512 MB at 2**32 - 1)
        key.update(b"".join((view[:byte], bytes(max(0, byte - len(val))), bytes((new_byte,)), view[byte + 1 :])))
    return value if old_byte == new_byte else 1 - value


def speed_up_fakeredis_bitmaps() -> None:
    """Replace the two methods (fakeredis dispatches a command to the method of its name, with
    the arguments parsed by the signature its decorator registered: kept as they are)."""
    original_bitcount = BitmapCommandsMixin.bitcount
    if getattr(original_bitcount, "sped_up", False):
        return

    def bitcount(self: BitmapCommandsMixin, key: CommandItem, *args: bytes) -> int:
        if not args and key.value is not None:
            return int.from_bytes(key.value, "little").bit_count()
        return int(original_bitcount(self, key, *args))

    bitcount.sped_up = True  # type: ignore[attr-defined]
    BitmapCommandsMixin.setbit = _setbit  # type: ignore[method-assign,assignment]
    BitmapCommandsMixin.bitcount = bitcount  # type: ignore[method-assign]

"""JSON exactly as Go's ``encoding/json`` writes it, and Go's ``time.Time`` in RFC 3339.

elk_coordinator stores records with ``encoding/json`` (Go 1.19 rules): map keys sorted
byte-wise, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` ..., control
characters as ``\\n``, ``\\r``, ``\\t`` or ``\\u00xx``, other text as raw UTF-8; float64 in the
shortest form that round-trips, switching to exponent form below 1e-6 and from 1e21
(``1e+21``, ``-3e-7``). Encoding what Go wrote gives back Go's bytes.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, NamedTuple

from codec.errors import DecodeError, ValidationError

_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update(
    {
        ord('"'): '\\"',
        ord("\\"): "\\\\",
        ord("\n"): "\\n",
        ord("\r"): "\\r",
        ord("\t"): "\\t",
        ord("<"): "\\u003c",
        ord(">"): "\\u003e",
        ord("&"): "\\u0026",
        0x2028: "\\u2028",
        0x2029: "\\u2029",
    }
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def go_string(text: str) -> str:
    """A JSON string literal as Go writes it (invalid UTF-8 becomes U+FFFD, as in Go)."""
    escaped = text.translate(_ESCAPES)
    try:
        escaped.encode("utf-8")
    except UnicodeEncodeError:
        escaped = _SURROGATE.sub("\ufffd", escaped)
    return f'"{escaped}"'


def go_float(value: float) -> str:
    if not math.isfinite(value):
        raise ValidationError(f"JSON has no representation for {value}")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)  # always exponent form in this range, shortest digits, like Go's 'e', -1
        if len(text) >= 4 and text[-4] == "e" and text[-3] == "-" and text[-2] == "0":
            text = text[:-2] + text[-1]
        return text
    return format(Decimal(repr(value)).normalize(), "f")


def go_json(value: Any) -> str:
    """Encode a JSON value (dict, list, str, int, float, bool, None) the way Go does."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        items = sorted(((str(k).encode("utf-8", "surrogatepass"), k) for k in value), key=lambda kv: kv[0])
        return "{" + ",".join(f"{go_string(str(k))}:{go_json(value[k])}" for _, k in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise ValidationError(f"cannot encode a {type(value).__name__} as JSON")


# --- time.Time in RFC 3339 with nanoseconds -------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


class GoTime(NamedTuple):
    """A Go ``time.Time`` as JSON keeps it: an instant plus the writer's UTC offset.

    ``seconds`` are Unix seconds (the zero time, year 1, is ``ZERO_SECONDS``), ``nanos``
    0..999,999,999, ``offset`` seconds east of UTC (0 prints as ``Z``).
    """

    seconds: int
    nanos: int = 0
    offset: int = 0

    @property
    def is_zero(self) -> bool:
        return self.seconds == ZERO_SECONDS and self.nanos == 0

    @property
    def unix_ms(self) -> int:
        return self.seconds * 1000 + self.nanos // 1_000_000

    @classmethod
    def parse(cls, text: str) -> GoTime:
        """Parse RFC 3339 with a zone, as Go's ``time.Time.UnmarshalJSON`` accepts it."""
        # the canonical shape is taken apart by position with cached pieces (date, clock, zone,
        # each validated when first met); anything else goes to the regex, which also gives the
        # precise complaint
        if type(text) is str and len(text) >= 20 and text[10] == "T":
            offset: int | None
            if text[-1] == "Z":
                offset, frac = 0, text[19:-1]
            else:
                offset, frac = ZONES[text[-6:]], text[19:-6]
            days, clock = DATE_DAYS[text[:10]], CLOCKS[text[11:19]]
            if offset is not None and days is not None and clock is not None:
                if not frac:
                    return tuple.__new__(cls, (days * 86400 + clock - offset, 0, offset))
                digits = frac[1:]
                if frac[0] == "." and 0 < len(digits) <= 9 and digits.isascii() and digits.isdigit():
                    nanos = int(digits) * _SCALE[len(digits)]
                    return tuple.__new__(cls, (days * 86400 + clock - offset, nanos, offset))
        if not isinstance(text, str):
            raise DecodeError("a time must be an RFC 3339 string")
        return cls._parse_slow(text)

    @classmethod
    def _parse_slow(cls, text: str) -> GoTime:
        match = _RFC3339.fullmatch(text)
        if match is None:
            raise DecodeError(f"time {text[:40]!r} is not RFC 3339 with a zone")
        y, mo, d, h, mi, s = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
        frac, zulu, sign, oh, om = match.group(7, 8, 9, 10, 11)
        leap = mo == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
        if not (1 <= mo <= 12 and 1 <= d <= _DAYS[mo - 1] + leap and h < 24 and mi < 60 and s < 60):
            raise DecodeError(f"time {text!r} is out of range")
        offset = 0
        if not zulu:
            if int(oh) >= 24 or int(om) >= 60:
                raise DecodeError(f"time {text!r} has an invalid zone offset")
            offset = (int(oh) * 3600 + int(om) * 60) * (-1 if sign == "-" else 1)
        nanos = int(frac.ljust(9, "0")) if frac else 0
        seconds = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset
        return cls(seconds, nanos, offset)

    def format(self) -> str:
        local = self.seconds + self.offset
        days, rest = divmod(local, 86400)
        y, m, d = _civil_from_days(days)
        if not 0 <= y <= 9999:
            raise ValidationError(f"year {y} cannot be written in RFC 3339")
        text = f"{y:04d}-{m:02d}-{d:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
        if self.nanos:
            text += "." + f"{self.nanos:09d}".rstrip("0")
        if self.offset == 0:
            return text + "Z"
        sign = "-" if self.offset < 0 else "+"
        off = abs(self.offset)
        return f"{text}{sign}{off // 3600:02d}:{off // 60 % 60:02d}"


class _DateDays(dict[str, int | None]):
    """``YYYY-MM-DD`` -> days since 1970 (None if not a valid date), filled as dates are met."""

    def __missing__(self, date: str) -> int | None:
        value: int | None = None
        if (
            len(date) == 10
            and date.isascii()
            and date[4] == "-"
            and date[7] == "-"
            and date[:4].isdigit()
            and date[5:7].isdigit()
            and date[8:].isdigit()
        ):
            y, mo, d = int(date[:4]), int(date[5:7]), int(date[8:])
            leap = mo == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
            if 1 <= mo <= 12 and 1 <= d <= _DAYS[mo - 1] + leap:
                value = _days_from_civil(y, mo, d)
        if len(self) < 100_000:
            self[date] = value
        return value


class _Clocks(dict[str, int | None]):
    """``HH:MM:SS`` -> seconds of the day (None if not a valid clock)."""

    def __missing__(self, clock: str) -> int | None:
        value = None
        if len(clock) == 8 and clock.isascii() and clock[2] == ":" and clock[5] == ":":
            h, m, s = clock[:2], clock[3:5], clock[6:]
            if h.isdigit() and m.isdigit() and s.isdigit() and int(h) < 24 and int(m) < 60 and int(s) < 60:
                value = int(h) * 3600 + int(m) * 60 + int(s)
        if len(self) < 200_000:
            self[clock] = value
        return value


class _Zones(dict[str, int | None]):
    """``+HH:MM`` -> offset in seconds (None if not a zone offset)."""

    def __missing__(self, zone: str) -> int | None:
        value = None
        ok = len(zone) == 6 and zone.isascii() and zone[0] in "+-" and zone[3] == ":"
        if ok and zone[1:3].isdigit() and zone[4:].isdigit() and int(zone[1:3]) < 24 and int(zone[4:]) < 60:
            value = (int(zone[1:3]) * 3600 + int(zone[4:]) * 60) * (-1 if zone[0] == "-" else 1)
        if len(self) < 10_000:
            self[zone] = value
        return value


#: The parser's caches, shared with the bulk import's inlined copy (`codec.elk.completed_as_archived_page`).
DATE_DAYS = _DateDays()
CLOCKS = _Clocks()
ZONES = _Zones()
_SCALE = [10 ** (9 - n) for n in range(10)]
ZERO_SECONDS = _days_from_civil(1, 1, 1) * 86400
ZERO_TIME = GoTime(ZERO_SECONDS, 0, 0)

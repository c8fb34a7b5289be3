"""ISO-8601 durations (and .NET TimeSpan text) to and from milliseconds, as Config.json and
the management API write them."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

from sbemu.config.jsonc import _json_type
from sbemu.config.model import _TIMESPAN_MAX_EXACT_MS, TIMESPAN_MAX_MS

_NUM = r"(\d+(?:[.,]\d+)?)"
_ISO_DURATION = re.compile(
    rf"P(?:{_NUM}Y)?(?:{_NUM}M)?(?:{_NUM}W)?(?:{_NUM}D)?(?:T(?:{_NUM}H)?(?:{_NUM}M)?(?:{_NUM}S)?)?\Z",
    re.IGNORECASE,
)
# Seconds per ISO designator; Y and M as .NET XmlConvert.ToTimeSpan counts them (365 / 30 days).
_ISO_UNITS = (365 * 86_400, 30 * 86_400, 7 * 86_400, 86_400, 3_600, 60, 1)
# .NET TimeSpan text: [d.]hh:mm[:ss[.fffffff]] or [d:]hh:mm:ss[.fffffff]
_TIMESPAN = re.compile(
    r"(?:(\d+)[.:](?=\d{1,2}:\d{1,2}:))?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?\Z"
)


def parse_duration_ms(text: str) -> int:
    """Milliseconds in an ISO-8601 duration (PT1H, P1DT2H, P2W, PT0.5S) or .NET TimeSpan text.

    TimeSpan forms: ``hh:mm:ss``, ``hh:mm``, ``d.hh:mm:ss``, ``d:hh:mm:ss``, with an optional
    ``.fffffff`` fraction of a second. Years count 365 days and months 30, like .NET's
    XmlConvert.ToTimeSpan. Sub-millisecond parts are rounded half up. Raises ValueError.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string, got {_json_type(text)}")
    raw = text.strip()
    if raw.startswith("-"):
        raise ValueError(f"negative duration {text!r} is not allowed")
    iso = _ISO_DURATION.match(raw)
    if iso and raw.upper() not in ("P", "PT") and not raw.upper().endswith("T"):
        seconds = sum(
            (
                Decimal(part.replace(",", ".")) * unit
                for part, unit in zip(iso.groups(), _ISO_UNITS, strict=True)
                if part is not None
            ),
            Decimal(0),
        )
    else:
        span = _TIMESPAN.match(raw)
        if not span:
            raise ValueError(
                f"{text!r} is not a duration (expected ISO-8601 like PT1M, PT20S, P1D or hh:mm:ss)"
            )
        days, hours, minutes, secs, fraction = span.groups()
        if int(hours) > 23 or int(minutes) > 59 or int(secs or 0) > 59:
            raise ValueError(f"{text!r} is not a valid hh:mm:ss time span")
        seconds = Decimal(
            int(days or 0) * 86_400 + int(hours) * 3_600 + int(minutes) * 60 + int(secs or 0)
        ) + Decimal(f"0.{fraction or 0}")
    exact_ms = seconds * 1000
    if exact_ms > _TIMESPAN_MAX_EXACT_MS:
        raise ValueError(f"duration {text!r} is longer than the largest .NET TimeSpan")
    return min(int(exact_ms.quantize(Decimal(1), rounding=ROUND_HALF_UP)), TIMESPAN_MAX_MS)


def _plain(value: Decimal) -> str:
    """A Decimal in positional notation: normalize() turns 30 into 3E+1, which no ISO reader takes."""
    return format(value, "f") if value else ""


def format_duration_ms(ms: int) -> str:
    """ISO-8601 text for ``ms`` milliseconds, e.g. 300000 -> 'PT5M', 86400000 -> 'P1D'."""
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = Decimal(rest) / 1000
    date = f"{days}D" if days else ""
    time = "".join(
        f"{v}{u}"
        for v, u in ((hours, "H"), (minutes, "M"), (_plain(seconds.normalize()), "S"))
        if v
    )
    if not date and not time:
        return "PT0S"
    return "P" + date + (f"T{time}" if time else "")

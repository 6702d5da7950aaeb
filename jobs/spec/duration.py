"""The one duration grammar of joinshift: specs, the CLI, candidate grids and reports all use it.

A duration is an optional sign and one or more ``<number><unit>`` parts, largest first or not:
``-3h``, ``+30m``, ``-4h30m``, ``1d2h``, ``250ms``, ``1.5h``; a bare ``0``; or a number of seconds.
Units: ``ms``, ``s``, ``m``, ``h``, ``d``.

Example::

    parse_duration("-4h30m")                          # timedelta(seconds=-16200)
    format_duration(timedelta(seconds=-16200), True)   # "-4h30m"
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_HELP = "write a signed number with a unit (ms, s, m, h, d), e.g. -3h, +30m, -4h30m, 7d, or a bare 0"


def duration_seconds(value: Any) -> float:
    """Seconds of a duration text, a number of seconds or a timedelta; ValueError says the grammar."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-").replace(" ", "")
        if body in ("0", "0.0"):
            return 0.0
        parts = _PART.findall(body)
        if body and parts and "".join(n + u for n, u in parts) == body:
            return sign * sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    raise ValueError(f"{value!r} is not a duration; {_HELP}")


def parse_duration(value: Any) -> timedelta:
    """``"-3h"``, ``"-4h30m"``, ``"250ms"``, a number of seconds or a timedelta -> timedelta."""
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=duration_seconds(value))
    except OverflowError:  # a ValueError, so that a spec names the field
        raise ValueError(f"{value!r} is longer than any duration can be; {_HELP}") from None


def require_positive(value: timedelta | None, example: str) -> timedelta | None:
    """A spec validator's check: ``value`` (None: not set) must be above zero; ``example`` ends the
    message (what to write instead)."""
    if value is not None and value.total_seconds() <= 0:
        raise ValueError(f"must be positive, e.g. {example}")
    return value


def require_whole_seconds(value: timedelta, name: str = "") -> timedelta:
    """A window bound or a watermark delay: every engine keeps them in whole seconds (Spark's
    intervals, the sweep's bound points), so ``1500ms`` would silently become 1 s."""
    if value % timedelta(seconds=1):
        said = f"{name}: {format_duration(value, True)}" if name else format_duration(value)
        raise ValueError(f"{said} is not a whole number of seconds (joins keep windows and watermarks in seconds)")
    return value


def format_duration(td: timedelta | float, signed: bool = False) -> str:
    """The inverse of :func:`parse_duration`: exact, compound where needed (``-4h30m``, ``1d2h``)."""
    total = td.total_seconds() if isinstance(td, timedelta) else float(td)
    sign = "-" if total < 0 else ("+" if signed else "")
    ms = round(abs(total) * 1000)
    if ms == 0:
        return f"{'+' if signed else ''}0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        n, ms = divmod(ms, int(UNIT_SECONDS[unit] * 1000))
        if n:
            parts.append(f"{n}{unit}")
    return sign + "".join(parts)


_HUMAN_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def fmt_duration(seconds: Any, signed: bool = False, dash: str = "—") -> str:
    """For people, not specs: seconds as at most two units, rounded: ``9000 -> "2h 30m"``,
    ``45 -> "45s"``, ``-10800 -> "-3h"``, ``0.25 -> "250ms"``; ``signed`` adds "+" to positive
    values; missing (None, NaN) -> ``dash``."""
    try:
        f = float(seconds)
    except (TypeError, ValueError):
        return dash
    if seconds is None or isinstance(seconds, bool) or not math.isfinite(f):
        return dash
    sign = "-" if f < 0 else ("+" if signed and f > 0 else "")
    a = abs(f)
    if a == 0:
        return "+0s" if signed else "0s"
    if a < 1:
        return f"{sign}{round(a * 1000)}ms"
    if a < 10 and round(a, 1) != round(a):
        return f"{sign}{a:.1f}s"

    def largest(v: float) -> int:
        return next(i for i, (_, n) in enumerate(_HUMAN_UNITS) if v >= n)

    # round to the unit below the largest one, e.g. 2h 29m 50s -> 2h 30m
    step = _HUMAN_UNITS[min(largest(a) + 1, len(_HUMAN_UNITS) - 1)][1]
    total = int(round(a / step)) * step
    i = largest(total)  # rounding may carry into a bigger unit: 59m 59.6s -> 1h
    q, r = divmod(total, _HUMAN_UNITS[i][1])
    parts = [f"{q}{_HUMAN_UNITS[i][0]}"]
    if i + 1 < len(_HUMAN_UNITS) and r // _HUMAN_UNITS[i + 1][1]:
        parts.append(f"{r // _HUMAN_UNITS[i + 1][1]}{_HUMAN_UNITS[i + 1][0]}")
    return sign + " ".join(parts)


#: A pydantic field type: parsed by the grammar, written back signed (``+30m``).
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda td: format_duration(td, signed=True), return_type=str),
]

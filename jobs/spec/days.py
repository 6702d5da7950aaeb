"""The one grammar of a ds a person gives (a CLI flag, a DAG run's parameter): a day, and a span of
days from a first to a last. ValueError says what to write; its caller names the flag or param."""

from __future__ import annotations

from datetime import date, timedelta

#: The days a ds may be: the windows reach days around it, and year 9999's next day overflows.
FIRST_DAY, LAST_DAY = date(1900, 1, 1), date(9998, 12, 31)


def parse_day(value: str) -> date:
    """A ds as written (YYYY-MM-DD)."""
    try:
        d = date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a date; use YYYY-MM-DD") from None
    if not FIRST_DAY <= d <= LAST_DAY:
        raise ValueError(f"{value!r}: give a day from {FIRST_DAY} to {LAST_DAY}")
    return d


def day_span(first: date | None, last: date | None, names: tuple[str, str]) -> list[date]:
    """The days from ``first`` to ``last`` (default: ``first``); [] with neither (every day held).
    A last day without a first, or before it, is refused naming the two (``names``)."""
    if last and not first:
        raise ValueError(f"{names[1]} needs {names[0]} (the first arrival day)")
    if not first:
        return []
    last = last or first
    if last < first:
        raise ValueError(f"{names[1]} ({last}) is before {names[0]} ({first})")
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]

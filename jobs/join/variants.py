"""The paper's three batch baselines (§7.1), the cut-off-free reference, the stream, and which
right-stream days each reads.

* ``batch_1d_1d``       left ds ⋈ right ds, key equality only
* ``batch_1d_2d``       left ds ⋈ right ds and the neighbouring day(s) the window reaches into
                        (ds+1 for a positive upper bound, ds−1 for a negative lower bound), key only
* ``batch_1d_windowed`` left ds ⋈ right ds, restricted to the spec's window
* ``reference``         left ds ⋈ every right ds the window reaches (``ds + floor(lower / 1d)`` ..
                        ``ds + ceil(upper / 1d)``: N days for a window longer than a day; a
                        day of 23 h in a zone with daylight saving),
                        restricted to the window: the join with no daily cut-off, the ceiling a
                        streaming join can reach (a right event arriving later than the last of
                        those days is out of its reach too)

Every variant applies the spec's extra ``join.predicate`` when it has one (it is part of the join).
"""

from __future__ import annotations

import functools
import math
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from jobs.spec import JoinSpec

#: The paper's three baselines (what the quality gates and docs call "the batch baselines").
BATCH_VARIANTS = ("batch_1d_1d", "batch_1d_2d", "batch_1d_windowed")
#: The windowed join with no daily cut-off.
REFERENCE = "reference"
#: What the daily batch DAG computes per ds: the baselines and the reference.
DAILY_VARIANTS = (*BATCH_VARIANTS, REFERENCE)
#: Every output of a pipeline, in report order.
VARIANTS = (*DAILY_VARIANTS, "stream")
#: The stream's first answers, where late corrections amended some (``corrections.horizon``): its
#: rows as first emitted (:func:`jobs.join.columns.first_answers`); "stream" is then the final answer.
FIRST_ANSWER = "stream_first_answer"
#: Variants whose matches are bounded by the window (boundary deltas mean something for them).
WINDOWED_VARIANTS = ("batch_1d_windowed", REFERENCE, "stream")

DAY_S = 86_400


@functools.cache
def shortest_day_s(timezone: str) -> int:
    """The shortest day of ``timezone``'s ds partitions: 23 h where clocks change for daylight
    saving (its offset differs between January and July), else 24 h."""
    zone = ZoneInfo(timezone)
    offsets = {datetime(2026, month, 1, tzinfo=zone).utcoffset() for month in (1, 7)}
    return DAY_S - 3600 if len(offsets) > 1 else DAY_S


def window_day_offsets(lower_s: int, upper_s: int, timezone: str = "UTC") -> list[int]:
    """Right ds offsets (days) the window ``[lower_s, upper_s]`` reaches from a left ds:
    ``floor(lower / 1d) .. ceil(upper / 1d)``; ``[-3h, +30m]`` -> ``[-1, 0, 1]``, ``[0, +36h]`` -> ``[0, 1, 2]``.
    A day is ``timezone``'s shortest (:func:`shortest_day_s`): across a 23-hour day a window of
    ``[0, +24h]`` reaches two days ahead (23:30 + 24 h is 00:30 two dates later)."""
    day = shortest_day_s(timezone)
    return list(range(math.floor(lower_s / day), math.ceil(upper_s / day) + 1))


def right_offsets(spec: JoinSpec, variant: str) -> list[int]:
    """Right ds offsets (days from the left ds) a daily variant reads."""
    if variant not in DAILY_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(DAILY_VARIANTS)}, not {variant!r}")
    lower, upper = spec.window.lower_seconds, spec.window.upper_seconds
    if variant == REFERENCE:
        return window_day_offsets(lower, upper, spec.timezone)
    if variant == "batch_1d_2d":  # the paper's baseline: at most the neighbouring days, whatever the window
        return [*([-1] if lower < 0 else []), 0, *([1] if upper > 0 else [])]
    return [0]


def right_days(spec: JoinSpec, variant: str, ds: date) -> list[date]:
    """Which right-stream partitions a variant reads for left partition ``ds``."""
    return [ds + timedelta(days=o) for o in right_offsets(spec, variant)]


def is_windowed(variant: str) -> bool:
    return variant in WINDOWED_VARIANTS


def computable_ds(spec: JoinSpec, variant: str, landed: date) -> date:
    """The left ds a daily variant can compute once right ds ``landed`` has landed: the one whose
    last right day it is (``landed`` itself for the same-day variants, the day before for
    ``batch_1d_2d`` and the demo's reference, N days before for a window reaching N days ahead)."""
    return landed - timedelta(days=max(0, *right_offsets(spec, variant)))  # its left ds must have landed too


def missing_days(needed: list[date], landed: list[date]) -> list[date]:
    """Needed partitions not landed yet. Days before the first landed day are history the
    pipeline never had: they count as landed (and empty), not as missing."""
    first = min(landed) if landed else None
    return [d for d in needed if d not in landed and (first is None or d >= first)]

"""Candidate windows: the grid a window sweep measures, in code or in its compact text form.

A candidate is ``(lower_s, upper_s)``, whole seconds, ``lower <= upper``. The compact form takes
``start..end/step`` ranges, single values, or values joined by ``|``; units ms/s/m/h/d, compound
like ``-4h30m``; a bare ``0`` is allowed::

    candidate_grid(range(-21600, 1, 1800), range(0, 21601, 1800))     # 13 × 13 = 169
    parse_grid("lower=-6h..0h/30m,upper=0..6h/30m")                    # the same
    parse_grid("lower=-3h|-1h,upper=30m")                              # [(-10800, 1800), (-3600, 1800)]
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from datetime import timedelta

from jobs.spec import format_duration
from jobs.spec.duration import duration_seconds


class GridError(ValueError):
    """A candidate grid is invalid; the message names the bad part."""


#: Most candidate windows one sweep takes (the recommendation's default grid has 169); a grid
#: beyond it is a step typed too fine, refused before its bound points fill the memory.
MAX_CANDIDATES = 100_000


def _seconds(value: object, what: str) -> int:
    """Whole seconds of an int, a timedelta or a duration text (``-3h``, ``-4h30m``, ``0``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, timedelta)):
        raise GridError(f"{what}: {value!r} is not a duration")
    try:
        secs = duration_seconds(value)
    except ValueError:
        raise GridError(
            f"{what}: {value!r} is not a duration; write a signed number with a unit (ms, s, m, h, d), "
            "e.g. -6h, 30m, -4h30m, or a bare 0"
        ) from None
    if secs != int(secs):
        raise GridError(f"{what}: {value!r} is not a whole number of seconds")
    return int(secs)


def candidate_grid(lowers: Iterable[object], uppers: Iterable[object]) -> list[tuple[int, int]]:
    """Every ``(lower_s, upper_s)`` with ``lower <= upper``, sorted; bounds as ints (seconds),
    timedeltas or duration texts. Pairs with ``lower > upper`` are not windows and are skipped."""
    lo = sorted({_seconds(v, "lower") for v in lowers})
    up = sorted({_seconds(v, "upper") for v in uppers})
    if not lo or not up:
        raise GridError("a grid needs at least one lower and one upper bound")
    windows = sum(len(up) - bisect_left(up, a) for a in lo)  # counted before a pair is built
    if windows > MAX_CANDIDATES:
        raise GridError(
            f"{len(lo):,} lower x {len(up):,} upper bounds make {windows:,} candidate windows; a sweep takes at "
            f"most {MAX_CANDIDATES:,}: use coarser steps"
        )
    grid = [(a, b) for a in lo for b in up if a <= b]
    if not grid:
        raise GridError(f"no candidate has lower <= upper (lowers {lo[0]}..{lo[-1]} s, uppers {up[0]}..{up[-1]} s)")
    return grid


def _values(name: str, text: str, part: str) -> list[int]:
    out: list[int] = []
    for item in text.split("|"):
        item = item.strip()
        where = f"grid part {part!r}"
        if not item:
            raise GridError(f"{where}: empty value")
        if ".." not in item:
            out.append(_seconds(item, where))
            continue
        rng, _, step_text = item.partition("/")
        start_text, _, end_text = rng.partition("..")
        start, end = _seconds(start_text, where), _seconds(end_text, where)
        if start > end:
            raise GridError(f"{where}: range {item!r} runs backwards ({start_text.strip()} > {end_text.strip()})")
        if start == end:
            out.append(start)
            continue
        if not step_text.strip():
            raise GridError(f"{where}: range {item!r} needs a step, e.g. {rng}/30m")
        step = _seconds(step_text, where)
        if step <= 0:
            raise GridError(f"{where}: the step {step_text.strip()!r} must be positive")
        if (end - start) % step:
            raise GridError(
                f"{where}: the step {step_text.strip()} does not divide the range "
                f"{start_text.strip()}..{end_text.strip()}"
            )
        if (end - start) // step + 1 > MAX_CANDIDATES:
            raise GridError(
                f"{where}: range {item!r} has {(end - start) // step + 1:,} bound points; a sweep takes at most "
                f"{MAX_CANDIDATES:,} candidates: use a coarser step"
            )
        out.extend(range(start, end + 1, step))
    return out


def parse_grid(text: str) -> list[tuple[int, int]]:
    """``"lower=-6h..0h/30m,upper=0..6h/30m"`` -> :func:`candidate_grid` of both bound lists."""
    bounds: dict[str, list[int]] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise GridError(f"grid {text!r}: empty part (two commas in a row, or a trailing comma?)")
        name, eq, values = part.partition("=")
        name = name.strip()
        if not eq or name not in ("lower", "upper"):
            raise GridError(
                f"grid part {part!r}: write lower=<values> or upper=<values> (values: -6h..0h/30m, -3h, or -3h|-1h)"
            )
        if name in bounds:
            raise GridError(f"grid part {part!r}: {name} is given twice")
        bounds[name] = _values(name, values, part)
    for name in ("lower", "upper"):
        if name not in bounds:
            raise GridError(f"grid {text!r}: missing {name}=..., e.g. lower=-6h..0h/30m,upper=0..6h/30m")
    return candidate_grid(bounds["lower"], bounds["upper"])


def format_candidate(lower_s: int, upper_s: int) -> str:
    return f"[{format_duration(timedelta(seconds=lower_s), True)}, {format_duration(timedelta(seconds=upper_s), True)}]"


def check_candidates(candidates: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The candidates as whole seconds, each ``lower <= upper``, duplicates dropped (order kept)."""
    if not candidates:
        raise GridError("no candidate windows to sweep")
    out = []
    for c in candidates:
        a, b = _seconds(c[0], "lower"), _seconds(c[1], "upper")
        if a > b:
            raise GridError(f"candidate {format_candidate(a, b)}: lower is after upper")
        out.append((a, b))
    return list(dict.fromkeys(out))


def widest(candidates: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The window every candidate lies in: (min lower, max upper)."""
    return min(a for a, _ in candidates), max(b for _, b in candidates)

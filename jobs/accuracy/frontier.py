"""Choosing among candidates: the Pareto frontier (match rate up, p99 latency down; memory shown),
the choice within the budgets, what to relax when nothing fits, and where to refine the grid.

Pure pandas over :func:`jobs.accuracy.tradeoff.evaluate`'s rows (one per window × left delay ×
right delay). Match rates closer than :data:`TIE_PP` are ties: then lower latency, then lower
memory wins.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from jobs.accuracy.paced_model import FIRST_ANSWER_RATE
from jobs.spec import fmt_duration, format_bytes
from jobs.spec.shares import pct

#: Match rates within this many percentage points are ties (one left event in 10,000).
TIE_PP = 0.01
KEY = ["lower_s", "upper_s", "left_delay_s", "right_delay_s"]


@dataclass(frozen=True)
class Limits:
    """The spec's budgets in seconds and bytes (None: no budget), and the match-rate floor."""

    latency_s: float | None = None
    memory_bytes: float | None = None
    floor_rate: float | None = None  # baseline − tolerance
    floor_label: str = ""  # "within 1.5 pp of batch_1d_windowed (92.91%)"


def _rate_key(rate: pd.Series) -> pd.Series:
    return (rate * 100 / TIE_PP).round()


def pareto(df: pd.DataFrame) -> pd.DataFrame:
    """Candidates no other beats on both match rate and p99 latency (ties: the lower memory),
    sorted by latency."""
    d = df.dropna(subset=["match_rate", "p99_latency_s"]).assign(_k=lambda x: _rate_key(x.match_rate))
    d = d.sort_values(["p99_latency_s", "_k", "memory_bytes"], ascending=[True, False, True])
    keep, best = [], -math.inf
    for i, k in zip(d.index, d._k):
        if k > best:
            keep.append(i)
            best = k
    return d.loc[keep].drop(columns="_k")


def fits(df: pd.DataFrame, limits: Limits) -> pd.Series:
    ok = pd.Series(True, index=df.index)
    if limits.latency_s is not None:
        ok &= df.p99_latency_s <= limits.latency_s
    if limits.memory_bytes is not None:
        ok &= df.memory_bytes <= limits.memory_bytes
    return ok


def choose(df: pd.DataFrame, limits: Limits) -> pd.Series | None:
    """The best match rate within both budgets (ties: lower latency, then memory); None if none fits."""
    pool = df[fits(df, limits)].dropna(subset=["match_rate"])
    if pool.empty:
        return None
    pool = pool.assign(_k=_rate_key(pool.match_rate)).sort_values(
        ["_k", "p99_latency_s", "memory_bytes"], ascending=[False, True, True]
    )
    return pool.iloc[0].drop("_k")


def _nice_up(seconds: float) -> float:
    """Round a budget suggestion up to a number people write (1m, 5m or 10m steps)."""
    step = 60 if seconds < 3600 else 300 if seconds < 6 * 3600 else 600
    return math.ceil(seconds / step) * step


def describe(c: pd.Series) -> str:
    from jobs.accuracy.grid import format_candidate

    window = f"window {format_candidate(int(c.lower_s), int(c.upper_s))}"
    if FIRST_ANSWER_RATE in c.index:  # the paced engine's: no watermark delays
        return window
    return f"{window}, watermarks left {fmt_duration(c.left_delay_s)} / right {fmt_duration(c.right_delay_s)}"


def _least(df: pd.DataFrame, first: str, then: str) -> pd.Series:
    """The candidate with the least ``first``; ties: the best match rate, then the least ``then``."""
    d = df.assign(_k=_rate_key(df.match_rate)).sort_values([first, "_k", then], ascending=[True, False, True])
    return d.iloc[0].drop("_k")


def reaches_floor(rate: Any, limits: Limits) -> Any:
    """Whether a predicted match rate (or a Series of them) reaches the floor: within a tie of it
    counts (what the recommendation calls "within the tolerance", and what :func:`relax` leaves)."""
    return True if limits.floor_rate is None else rate >= limits.floor_rate - TIE_PP / 200


def at_floor(df: pd.DataFrame, limits: Limits) -> pd.DataFrame:
    """The candidates whose match rate reaches the floor (all of them with none)."""
    return df if limits.floor_rate is None else df[reaches_floor(df.match_rate, limits)]


def relax(df: pd.DataFrame, limits: Limits) -> list[str]:
    """When no candidate within the budgets reaches the floor: which budget to relax, by how much."""
    if limits.floor_rate is None:
        return []
    good = at_floor(df, limits)
    if not good[fits(good, limits)].empty:
        return []
    if good.empty:
        best = df.loc[df.match_rate.idxmax()]
        return [
            f"no candidate comes {limits.floor_label}: the best is {pct(best.match_rate)} "
            f"({describe(best)}, p99 latency {fmt_duration(best.p99_latency_s)}); relaxing a budget cannot reach it"
        ]
    out = []
    lat_only, mem_only = Limits(latency_s=limits.latency_s), Limits(memory_bytes=limits.memory_bytes)
    if limits.latency_s is not None:
        opt = good[fits(good, mem_only)]
        if not opt.empty:
            c = _least(opt, "p99_latency_s", "memory_bytes")
            out.append(
                f"latency {fmt_duration(limits.latency_s)} fits nothing {limits.floor_label}; "
                f"{fmt_duration(_nice_up(c.p99_latency_s))} would (predicted {pct(c.match_rate)}, {describe(c)})"
            )
    if limits.memory_bytes is not None:
        opt = good[fits(good, lat_only)]
        if not opt.empty:
            c = _least(opt, "memory_bytes", "p99_latency_s")
            out.append(
                f"state memory {format_bytes(limits.memory_bytes)} fits nothing {limits.floor_label}; "
                f"{format_bytes(c.memory_bytes)} would (predicted {pct(c.match_rate)}, {describe(c)})"
            )
    if not out:
        c = _least(good, "p99_latency_s", "memory_bytes")
        out.append(
            f"neither budget alone fits anything {limits.floor_label}; relax both: latency to "
            f"{fmt_duration(_nice_up(c.p99_latency_s))} and state memory to {format_bytes(c.memory_bytes)} "
            f"(predicted {pct(c.match_rate)}, {describe(c)})"
        )
    return out


def percentile_relax(df: pd.DataFrame, limits: Limits, percentile: float) -> list[str]:
    """The paced engine's other knob when nothing fits: ``df`` the same windows run at the PT
    ``percentile`` (a higher one closes windows sooner; late corrections amend what it closes early);
    the best of them within the budgets and the floor, if any."""
    c = choose(at_floor(df, limits), limits)
    if c is None:
        return []
    return [
        f"streaming.paced.pt_percentile {percentile:g} would fit (predicted {pct(c.match_rate)}, first "
        f"answers {pct(c[FIRST_ANSWER_RATE])}, p99 latency {fmt_duration(c.p99_latency_s)}, {describe(c)})"
    ]


def knee(front: pd.DataFrame) -> pd.Series | None:
    """The frontier point farthest from the chord between its ends (normalised axes)."""
    if len(front) < 3:
        return front.iloc[-1] if len(front) else None
    x = front.p99_latency_s.to_numpy(float)
    y = front.match_rate.to_numpy(float)
    xs, ys = (x - x[0]) / max(x[-1] - x[0], 1e-9), (y - y[0]) / max(y[-1] - y[0], 1e-12)
    return front.iloc[int((ys - xs).argmax())]


def anchors(df: pd.DataFrame, limits: Limits) -> list[pd.Series]:
    """Where to refine: the frontier points either side of the latency budget (else the knee),
    and the choice."""
    front = pareto(df)
    out: list[pd.Series] = []
    if limits.latency_s is not None and len(front):
        below = front[front.p99_latency_s <= limits.latency_s]
        above = front[front.p99_latency_s > limits.latency_s]
        out += [below.iloc[-1]] if len(below) else []
        out += [above.iloc[0]] if len(above) else []
    else:
        k = knee(front)
        out += [k] if k is not None else []
    c = choose(df, limits)
    if c is not None:
        out.append(c)
    return out


def _between(axis: list[int], v: int) -> list[int]:
    """``v`` and the midpoints to its neighbours on ``axis`` (whole minutes when the gap allows)."""
    axis = sorted(set(axis))
    i = axis.index(v)
    out = {v}
    for j in (i - 1, i + 1):
        if 0 <= j < len(axis):
            mid = (axis[j] + v) / 2
            if abs(axis[j] - v) >= 240:
                mid = round(mid / 60) * 60
            out.add(int(round(mid)))
    return sorted(out)


def refinement(
    df: pd.DataFrame, axes: dict[str, list[int]], limits: Limits
) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Finer grids (windows, delay pairs) around each anchor: each coordinate and the midpoints to its
    neighbours on the coarse axes (``lower_s``, ``upper_s``, ``left_delay_s``, ``right_delay_s``)."""
    out = []
    for a in anchors(df, limits):
        near = {k: _between(axes[k], int(a[k])) if int(a[k]) in axes[k] else [int(a[k])] for k in KEY}
        windows = [(lo, up) for lo, up in itertools.product(near["lower_s"], near["upper_s"]) if lo <= up]
        delays = list(itertools.product(near["left_delay_s"], near["right_delay_s"]))
        out.append((windows, delays))
    return out


def explain(spec, cadence, obs, chosen, deployed, fits, within, limits, base_rate, ref, ref_source) -> list[str]:
    """The recommendation's reasons: what it was predicted from, the choice against the budgets, the
    baseline, the reference and the deployed settings."""
    budget = " and ".join(
        x
        for x in (
            f"p99 latency <= {fmt_duration(limits.latency_s)}" if limits.latency_s is not None else "",
            f"state memory <= {format_bytes(limits.memory_bytes)}" if limits.memory_bytes is not None else "",
        )
        if x
    )
    out = [f"predicted for {cadence.label()}, from {obs.left_events:,} left events over {len(obs.days)} ds"]
    if obs.sample_share < 1:
        out[0] += f" (a {pct(obs.sample_share, 1)} hash sample of them)"
    out[0] += f"; one left event is {100 / max(obs.left_events, 1):.4f} pp"
    if fits:
        out.append(
            f"{chosen.label()} with watermarks {chosen.watermarks()} has the best predicted match rate "
            f"({pct(chosen.match_rate)}) "
            + (f"within {budget}" if budget else "(no budgets in the spec)")
            + f": p99 latency {fmt_duration(chosen.p99_latency_s)}, state memory {format_bytes(chosen.memory_bytes)}"
        )
    else:
        out.append(
            f"no candidate fits {budget}; shown: the lowest-latency one, {chosen.label()} with watermarks "
            f"{chosen.watermarks()} ({pct(chosen.match_rate)}, p99 {fmt_duration(chosen.p99_latency_s)})"
        )
    if base_rate is not None:
        gap = 100 * (chosen.match_rate - base_rate)
        out.append(
            f"vs {spec.accuracy.baseline} ({pct(base_rate)}): {gap:+.2f} pp, "
            + ("within" if within else "outside")
            + f" the {spec.accuracy.tolerance_pp:g} pp tolerance"
        )
    else:
        out.append(f"{spec.accuracy.baseline} has not been computed for these days: run the batch and compare first")
    out.append(
        f"vs the reference ({pct(ref)}, {ref_source}): {100 * (chosen.match_rate - ref):+.2f} pp; "
        f"the chosen window loses {100 * (chosen.window_rate - chosen.match_rate):.2f} pp to "
        + ("records read after its windows closed" if chosen.paced else "its watermarks")
    )
    out.append(
        f"deployed {deployed.label()} with watermarks {deployed.watermarks()}: "
        f"predicted {pct(deployed.match_rate)}, "
        f"p99 latency {fmt_duration(deployed.p99_latency_s)}, state memory {format_bytes(deployed.memory_bytes)}"
    )
    return out

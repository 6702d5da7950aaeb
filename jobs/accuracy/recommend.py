"""Recommend a window and watermark delays within the spec's budgets, from the landed days.

Paper §6.5: users "find it hard to figure out a good setting for the join window, unless they
have an equivalent batch pipeline to experiment with". joinshift has the landed data, so every
candidate (window × left watermark × right watermark) is measured on it, not guessed
(:mod:`jobs.accuracy.tradeoff`): its match rate after the records the watermark would drop at
that cadence, its p99 event -> output latency and its state memory. The coarse grid is refined
around the frontier points nearest the latency budget (:mod:`jobs.accuracy.frontier`), then:

* the choice is the best match rate within ``budgets.output_latency`` and ``budgets.state_memory``
  (ties: lower latency, then memory), held to ``accuracy.tolerance_pp`` below the baseline and
  shown against the reference (a join with no daily cut-off: the ceiling of any streaming join);
* when nothing fits, it says which budget to relax and by how much;
* the watermark answer is the chosen delays; the lateness per stream and the report's PT method
  are evidence beside it, with the number of records each rests on.

Every prediction is for a cadence: live with the spec's trigger interval, or replay-as-live with
N-minute slices (what ``joinshift recommend --verify`` runs and compares with).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, timedelta
from typing import Any

import pandas as pd

from jobs.accuracy import frontier, paced_model
from jobs.accuracy.lateness import Cadence
from jobs.accuracy.state_model import memory_model
from jobs.accuracy.tradeoff import StreamLateness, evaluate, observe, per_ds_rates, stream_lateness
from jobs.spec import Engine, JoinSpec, fmt_duration, format_duration
from jobs.spec.shares import pct
from jobs.storage import fs
from jobs.storage.stream_runs import rate_label, read_runs

log = logging.getLogger("joinshift.recommend")

#: The coarse grid (seconds); the deployed values join it, and REFINE_ROUNDS passes add midpoints
#: around the frontier points nearest the latency budget (or the knee) and the choice.
DEFAULT_LOWERS = tuple(-60 * m for m in (0, 10, 30, 60, 180, 360))
DEFAULT_UPPERS = tuple(60 * m for m in (0, 10, 30, 60, 120, 180))
DEFAULT_LEFT_DELAYS = tuple(60 * m for m in (0, 1, 5, 10, 30, 60))
DEFAULT_RIGHT_DELAYS = tuple(60 * m for m in (0, 5, 20, 60, 120, 240, 480))
REFINE_ROUNDS = 3
#: The paced engine's PT percentile a relax hint tries when nothing fits at the spec's (a low one,
#: the paper's 5, trails clicks that arrive late by hours; 95 trails the freshest by seconds).
RELAX_PT_PERCENTILE = 95.0
#: Batches between the maxima and the late filter in a replay-as-live run (see default_cadence).
REPLAY_LATE_LAG = 2
#: Paper §6.5, the window-boundary rule on the p1 distance of matches to a bound, as a share of
#: the window's span: at most this close, matches crowd the bound (widen that side) ...
CROWDED_BOUND_SHARE = 0.01
#: ... at least this far, no match comes near it (that side can shrink). The report uses the same.
FAR_BOUND_SHARE = 0.25


def bound_advice(p1_s: float, span_s: float) -> str | None:
    """``"widen"``, ``"shrink"`` or None for one bound, from its p1 distance and the window span."""
    if p1_s <= CROWDED_BOUND_SHARE * span_s:
        return "widen"
    if p1_s >= FAR_BOUND_SHARE * span_s:
        return "shrink"
    return None


def boundary_reasons(spec: JoinSpec, deltas: dict) -> list[str]:
    """Paper §6.5: matches crowding a bound say widen it; a bound far from every match can shrink."""
    reasons = []
    span = max(spec.window.span_seconds, 1)
    for side, name in (("to_lower", "lower"), ("to_upper", "upper")):
        p1 = deltas.get(f"{side}_p1")
        if p1 is None:
            continue
        advice = bound_advice(p1, span)
        if advice == "widen":
            reasons.append(
                f"1% of matches lie within {format_duration(timedelta(seconds=round(p1)))} of the "
                f"{name} bound: matches crowd it, widening the {name} side would find more"
            )
        elif advice == "shrink":
            reasons.append(
                f"no match in the closest 1% comes nearer than {format_duration(timedelta(seconds=round(p1)))} "
                f"to the {name} bound: the {name} side can shrink by about that much"
            )
    return reasons


@dataclass
class Candidate:
    """One window × watermarks, as predicted for the recommendation's cadence."""

    lower_s: int
    upper_s: int
    left_delay_s: int
    right_delay_s: int
    match_rate: float
    window_rate: float  # the same window with nothing dropped late
    p99_latency_s: float
    memory_bytes: float
    recovery_s: float | None = None
    per_ds: dict[str, float] = field(default_factory=dict)
    #: the paced engine's (no watermark delays: it waits for PTs): its rows as first emitted
    paced: bool = False
    first_answer_rate: float | None = None

    @classmethod
    def of(cls, row: pd.Series, recovery_s: float | None = None) -> Candidate:
        """One row of a grid: :data:`jobs.accuracy.tradeoff.COLUMNS`, the paced engine's with its first answers."""
        first = row.get(paced_model.FIRST_ANSWER_RATE)
        return cls(
            int(row.lower_s),
            int(row.upper_s),
            int(row.left_delay_s),
            int(row.right_delay_s),
            float(row.match_rate),
            float(row.window_rate),
            float(row.p99_latency_s),
            float(row.memory_bytes),
            recovery_s,
            paced=first is not None,
            first_answer_rate=None if first is None else float(first),
        )

    def label(self) -> str:
        return (
            f"[{format_duration(timedelta(seconds=self.lower_s), True)}, "
            f"{format_duration(timedelta(seconds=self.upper_s), True)}]"
        )

    def watermarks(self) -> str:
        if self.paced:
            return "none (the paced engine waits for PTs)"
        return f"left {fmt_duration(self.left_delay_s)} / right {fmt_duration(self.right_delay_s)}"

    def key(self) -> tuple[int, int, int, int]:
        return (self.lower_s, self.upper_s, self.left_delay_s, self.right_delay_s)

    # the names the report, the demo and the recommendations table read
    @property
    def predicted_match_rate(self) -> float:
        return self.match_rate

    @property
    def predicted_memory_bytes(self) -> float:
        return self.memory_bytes

    @property
    def output_latency_s(self) -> float:
        return self.p99_latency_s

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "window": self.label(),
            "predicted_match_rate": self.match_rate,
            "predicted_memory_bytes": self.memory_bytes,
            "output_latency_s": self.p99_latency_s,
        }


@dataclass
class Recommendation:
    pipeline: str
    days: list[str]
    cadence: str  # "live, 1-minute trigger" / "replay-as-live with 30-minute slices"
    baseline: str
    baseline_match_rate: float | None
    reference_match_rate: float | None
    reference_source: str
    tolerance_pp: float
    budgets: dict[str, float | None]  # output_latency_s, state_memory_bytes
    chosen: Candidate
    deployed: Candidate
    fits_budgets: bool
    within_tolerance: bool | None
    frontier: list[Candidate]
    explanation: list[str]
    relax: list[str] = field(default_factory=list)
    lateness: dict[str, StreamLateness] = field(default_factory=dict)
    stream_match_rate: float | None = None  # what the deployed stream measured on these days
    inputs: dict = field(default_factory=dict)
    #: per window tried: its rate with nothing dropped late, and at the chosen watermarks when tried
    windows: list[dict] = field(default_factory=list)

    @property
    def left_watermark_s(self) -> int:
        return self.chosen.left_delay_s

    @property
    def right_watermark_s(self) -> int:
        return self.chosen.right_delay_s

    @property
    def reasons(self) -> list[str]:
        return [*self.explanation, *self.relax]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["chosen"], d["deployed"] = self.chosen.to_dict(), self.deployed.to_dict()
        d["frontier"] = [c.to_dict() for c in self.frontier]
        d.update(
            window=self.chosen.label(),
            deployed_window=self.deployed.label(),
            left_watermark_s=self.left_watermark_s,
            right_watermark_s=self.right_watermark_s,
            reasons=self.reasons,
        )
        return d


# ------------------------------------------------------------------------------ I/O shell


def _replay_rate(progress: list[dict]) -> float | None:
    rates = [p.get("processedRowsPerSecond") or 0 for p in progress if (p.get("numInputRows") or 0) > 1000]
    return float(max(rates)) if rates else None


def default_cadence(spec: JoinSpec, slice_minutes: float | None = None) -> Cadence:
    """Replay-as-live with ``slice_minutes`` slices, else live at the spec's trigger interval."""
    if slice_minutes:
        # one data batch per slice, no no-data batch between them: the late filter lags 2 batches
        # (a no-data batch after each slice would make it 1; `recommend --verify` prints what ran)
        return Cadence(int(round(slice_minutes * 60)), replay=True, late_lag=REPLAY_LATE_LAG)
    return Cadence(max(1, int(spec.streaming.trigger_interval.total_seconds())), replay=False)


def recommend(
    spark,
    spec: JoinSpec,
    days: list[date],
    *,
    s=None,
    cadence: Cadence | None = None,
    lowers=DEFAULT_LOWERS,
    uppers=DEFAULT_UPPERS,
    left_delays=DEFAULT_LEFT_DELAYS,
    right_delays=DEFAULT_RIGHT_DELAYS,
    refine: bool = True,
    on_window: Callable[[int, int], None] | None = None,
) -> Recommendation:
    """Measure every candidate on the landed days, refine around the frontier, choose within the budgets.
    ``on_window(done, total)``: progress of a paced spec's windows (each a run of its rules)."""
    from pyspark.sql import functions as F

    from jobs.storage import delta_io
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    if not days:
        raise ValueError("days: give at least one ds to learn from")
    cadence = cadence or default_cadence(spec)
    tables = Tables.of(spec, s)
    w, lw, rw = spec.window, spec.left.watermark_seconds, spec.right.watermark_seconds
    dep = (w.lower_seconds, w.upper_seconds, lw, rw)
    axes = {
        "lower_s": sorted({*lowers, dep[0]}),
        "upper_s": sorted({*uppers, dep[1]}),
        "left_delay_s": sorted({*left_delays, dep[2]}),
        "right_delay_s": sorted({*right_delays, dep[3]}),
    }
    widest = (axes["lower_s"][0], axes["upper_s"][-1])
    paced = spec.streaming.engine == Engine.paced
    obs, rec = observe(spark, spec, days, cadence, widest, s, keys=paced)
    if len(obs.pair_left) == 0:  # no left event has a partner in any candidate window: nothing to measure
        raise delta_io.MissingInput(
            f"ds {', '.join(map(str, days))}: {obs.left_events:,} left events and no right event within "
            f"[{format_duration(timedelta(seconds=widest[0]), True)}, "
            f"{format_duration(timedelta(seconds=widest[1]), True)}] on the same key; check the keys "
            "(and the sides' format) or recommend over more days"
        )

    progress = read_progress(tables.progress_log(JOIN_QUERY))
    memory = memory_model(progress, rec)
    bpr = memory.bytes_per_row
    windows = [(a, b) for a in axes["lower_s"] for b in axes["upper_s"] if a <= b]
    paced_per_ds: dict[tuple[int, int], dict[str, float]] = {}
    paced_batches: dict[tuple[int, int], int] = {}
    if paced:  # the window is the only knob: no delays, no refinement (each window is a run of the rules)
        axes["left_delay_s"] = axes["right_delay_s"] = [0]
        dep = (*dep[:2], 0, 0)
        grid, paced_per_ds, bpr, paced_batches = paced_model.paced_grid(
            spec, obs, rec, cadence, windows, progress, on_window
        )
    else:
        grid = evaluate(obs, windows, axes["left_delay_s"], axes["right_delay_s"], memory)
    coarse = len(grid)

    metrics = (
        spark.read.format("delta").load(tables.match_metrics).where(F.col("ds").isin(days)).toPandas()
        if delta_io.table_exists(spark, tables.match_metrics)
        else pd.DataFrame()
    )

    def mean_rate(variant: str) -> float | None:
        m = metrics[metrics.variant == variant] if len(metrics) else metrics
        return float(m.matched_left.sum() / m.left_events.sum()) if len(m) and m.left_events.sum() else None

    baseline, tol = spec.accuracy.baseline, spec.accuracy.tolerance_pp
    base_rate = mean_rate(baseline)
    budgets = {
        "output_latency_s": spec.budgets.output_latency.total_seconds() if spec.budgets.output_latency else None,
        "state_memory_bytes": float(spec.budgets.state_memory) if spec.budgets.state_memory is not None else None,
    }
    limits = frontier.Limits(
        budgets["output_latency_s"],
        budgets["state_memory_bytes"],
        None if base_rate is None else base_rate - tol / 100,
        f"within {tol:g} pp of {baseline}" + ("" if base_rate is None else f" ({pct(base_rate)})"),
    )
    for _ in range(REFINE_ROUNDS if refine and not paced else 0):
        for wins, combos in frontier.refinement(grid, axes, limits):
            grid = pd.concat([grid, evaluate(obs, wins, [], [], memory, combos=combos)], ignore_index=True)
        grid = grid.drop_duplicates(subset=frontier.KEY, ignore_index=True)
        axes = {k: sorted({int(v) for v in grid[k]}) for k in frontier.KEY}

    replay = _replay_rate(progress)

    def cand(row: pd.Series) -> Candidate:
        c = Candidate.of(row)
        rows_in_state = c.memory_bytes / bpr
        c.recovery_s = rows_in_state / replay if replay else None
        if paced:
            c.per_ds = paced_per_ds[(c.lower_s, c.upper_s)]
        else:
            c.per_ds = per_ds_rates(obs, (c.lower_s, c.upper_s), c.left_delay_s, c.right_delay_s)
        return c

    dep_row = grid[(grid[frontier.KEY] == pd.Series(dep, index=frontier.KEY)).all(axis=1)].iloc[0]
    deployed = cand(dep_row)
    chosen_row = frontier.choose(grid, limits)
    fits = chosen_row is not None
    if chosen_row is None:  # nothing fits the budgets: show the closest to them (lowest latency)
        chosen_row = frontier.pareto(grid).iloc[0]
    chosen = cand(chosen_row)
    front = [Candidate.of(r) for _, r in frontier.pareto(grid).iterrows()]
    tried = _windows(grid, chosen)
    ref = mean_rate("reference")
    ref_source = (
        "reference (match_metrics)"
        if ref is not None
        else "the deployed window over every right ds it reaches, no drops"
    )
    if ref is None:
        ref = deployed.window_rate
    within = None if base_rate is None else bool(frontier.reaches_floor(chosen.match_rate, limits))
    relax = frontier.relax(grid, limits) if (not fits or within is False) else []
    if paced and relax and spec.streaming.paced.pt_percentile < RELAX_PT_PERCENTILE:  # the frontier's windows
        wins = sorted({(c.lower_s, c.upper_s) for c in front} | {dep[:2]})
        faster = paced_model.paced_grid(_pt_percentile(spec, RELAX_PT_PERCENTILE), obs, rec, cadence, wins, progress)
        relax += frontier.percentile_relax(faster[0], limits, RELAX_PT_PERCENTILE)
    stream_rate = mean_rate("stream")
    lateness = {} if paced else stream_lateness(spec, rec, obs, chosen)  # the delays' drops: not the paced engine's

    explanation = frontier.explain(
        spec, cadence, obs, chosen, deployed, fits, within, limits, base_rate, ref, ref_source
    )
    explanation[:0] = paced_model.engine_note(spec)
    if paced and chosen.first_answer_rate is not None:  # right after the choice
        at = next(i for i, r in enumerate(explanation) if chosen.label() in r) + 1
        explanation.insert(
            at,
            f"{chosen.label()}: first answers {pct(chosen.first_answer_rate)}, final "
            f"{pct(chosen.match_rate)}; the operator holds at most {chosen.memory_bytes / bpr:,.0f} "
            f"events at {bpr:,.0f} bytes each",
        )
    explanation.append(
        f"{coarse:,} candidates on the coarse grid, {len(grid) - coarse:,} more around the frontier near the budget; "
        f"{len(front)} on the Pareto frontier (match rate vs p99 latency)"
    )
    if stream_rate is not None:
        runs = read_runs(spec, s)
        labels = sorted({rate_label(runs.get(str(d))) for d in days} - {""})
        explanation.append(
            f"the deployed stream measured {100 * stream_rate:.2f}% on these days"
            + (f" ({' / '.join(labels)})" if labels else "")
            + f"; predicted at the deployed settings {100 * deployed.match_rate:.2f}% ({cadence.label()}; "
            f"a run at another cadence differs)"
        )
    for side, lt in lateness.items():
        explanation.append(
            f"{spec.side(side).name}: {lt.records:,} records, lateness behind its own max p50 "
            f"{fmt_duration(lt.lateness_p50_s)}, p99 {fmt_duration(lt.lateness_p99_s)}, max "
            f"{fmt_duration(lt.lateness_max_s)}; the watermark drops {100 * lt.share_dropped_at_chosen:.2f}% chosen, "
            f"{100 * lt.share_dropped_at_deployed:.2f}% deployed" + (f" ({lt.note})" if lt.note else "")
        )
    explanation += boundary_reasons(spec, _stream_deltas(metrics))
    for d, wait in obs.waiting.items():  # the day-edge rule: say what is missing, never fail on it
        explanation.append(f"incomplete: right ds {', '.join(wait)} not landed; ds {d}'s rates are lower bounds")
    return Recommendation(
        pipeline=spec.pipeline,
        days=[str(d) for d in days],
        cadence=cadence.label(),
        baseline=baseline,
        baseline_match_rate=base_rate,
        reference_match_rate=ref,
        reference_source=ref_source,
        tolerance_pp=tol,
        budgets=budgets,
        chosen=chosen,
        deployed=deployed,
        fits_budgets=fits,
        within_tolerance=within,
        frontier=front,
        explanation=explanation,
        relax=relax,
        lateness=lateness,
        stream_match_rate=stream_rate,
        windows=tried,
        inputs={
            "bytes_per_row": bpr,
            "id_bytes_per_row": None if paced else memory.id_bytes_per_row,
            "state_rows": None
            if paced
            else memory.state_rows(chosen.lower_s, chosen.upper_s, chosen.left_delay_s, chosen.right_delay_s, cadence),
            "engine": spec.streaming.engine.value,
            "peak_rows_per_s": {"left": memory.left_rows_per_s, "right": memory.right_rows_per_s},
            "replay_rows_per_s": replay,
            "candidates": len(grid),
            "left_events": obs.left_events,
            "pairs": int(len(obs.pair_left)),
            "sample_share": obs.sample_share,
            "batches": paced_batches[(chosen.lower_s, chosen.upper_s)] if paced else int(len(obs.clock.end_ms)),
            "cadence_s": cadence.batch_s,
            "late_lag": cadence.late_lag,
            "incomplete": obs.waiting,
        },
    )


def _pt_percentile(spec: JoinSpec, percentile: float) -> JoinSpec:
    paced = spec.streaming.paced.model_copy(update={"pt_percentile": percentile})
    return spec.model_copy(update={"streaming": spec.streaming.model_copy(update={"paced": paced})})


def _windows(grid: pd.DataFrame, chosen: Candidate) -> list[dict]:
    at = grid[(grid.left_delay_s == chosen.left_delay_s) & (grid.right_delay_s == chosen.right_delay_s)]
    at = at.set_index(["lower_s", "upper_s"])
    out = []
    for (a, b), rate in grid.groupby(["lower_s", "upper_s"]).window_rate.first().items():
        w = {"lower_s": int(a), "upper_s": int(b), "window_rate": float(rate)}
        if (a, b) in at.index:
            r = at.loc[(a, b)]
            w.update(
                match_rate=float(r.match_rate), p99_latency_s=float(r.p99_latency_s), memory_bytes=float(r.memory_bytes)
            )
        out.append(w)
    return out


def _stream_deltas(metrics: pd.DataFrame) -> dict:
    sm = metrics[metrics.variant == "stream"] if len(metrics) else metrics
    return {c: float(sm[c].mean()) for c in sm.columns if c.startswith("to_") and sm[c].notna().any()}


def save(spark, spec: JoinSpec, rec: Recommendation, s=None) -> str:
    """Write the recommendation to the ``recommendations`` Delta table and as JSON."""
    from datetime import datetime

    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    as_of = max(rec.days)
    out = tables.settings.path("recommendations", spec.pipeline, f"{as_of}.json")
    fs.write_text(out, json.dumps(rec.to_dict(), indent=2, default=str))
    c, d = rec.chosen, rec.deployed
    row = spark.createDataFrame(
        [
            (
                date.fromisoformat(as_of),
                ",".join(rec.days),
                c.lower_s,
                c.upper_s,
                c.left_delay_s,
                c.right_delay_s,
                c.match_rate,
                rec.baseline,
                rec.baseline_match_rate,
                c.memory_bytes,
                c.p99_latency_s,
                c.recovery_s,
                d.lower_s,
                d.upper_s,
                d.match_rate,
                d.memory_bytes,
                json.dumps(rec.reasons),
                datetime.now(UTC),
            )
        ],
        "ds date, learned_from string, lower_s long, upper_s long, left_watermark_s long, right_watermark_s long, "
        "predicted_match_rate double, baseline string, baseline_match_rate double, predicted_memory_bytes double, "
        "output_latency_s double, recovery_s double, deployed_lower_s long, deployed_upper_s long, "
        "deployed_predicted_match_rate double, deployed_memory_bytes double, reasons string, computed_at timestamp",
    )
    delta_io.replace_partitions(row, tables.settings.table_path(spec.pipeline, "recommendations"), {"ds": [as_of]})
    return out


__all__: list[Any] = ["Candidate", "Recommendation", "StreamLateness", "bound_advice", "recommend", "save"]

"""Hold a recommendation to a run: replay the same days as live with the chosen settings, then put
the predicted match rate and p99 latency beside what that run measured.

The trial is a pipeline of its own, ``<pipeline>__verify`` (the user's spec with the chosen window
and watermark delays), replayed from the user's pipeline's history by replay-as-live, so it never
touches the deployed stream's tables, checkpoint or topics. Measured:

* match rate per ds = left events with a matched row in the trial's output ÷ left events landed
  for that ds by the user's pipeline (the same denominator as every other match rate);
* p99 latency = the p99 over output rows of ``emitted_at`` (the replay stamps the slice end in
  record time) minus the row's latest event time, as :mod:`jobs.accuracy.tradeoff` predicts it;
* the state at its peak (native engine): the most rows the trial's join and its event-id
  de-duplication held after a micro-batch, against the rows :mod:`jobs.accuracy.state_model`
  predicts (its bytes are those rows × the bytes per row the deployed stream measured).

Example::

    joinshift recommend --ds 2026-11-19 --to 2026-11-20 --verify --slice-minutes 30
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

import numpy as np

from jobs.accuracy.paced_model import paced_grid
from jobs.accuracy.recommend import Candidate, default_cadence
from jobs.accuracy.state_model import memory_model, peak_rows
from jobs.accuracy.tradeoff import evaluate, observe, p99, per_ds_rates
from jobs.spec import Engine, JoinSpec, WindowSpec
from jobs.storage import fs
from jobs.storage.progress import DEDUP_STATE, JOIN_QUERY, JOIN_STATE, read_progress

#: |predicted − measured| the product promises on the demo workload, percentage points.
PROMISE_PP = 0.05
#: The trial's replay-as-live slices when ``recommend --verify`` is not given ``--slice-minutes``.
VERIFY_SLICE_MINUTES = 30
VERIFY_SUFFIX = "__verify"
#: Left events the trial's prediction reads before it samples (10× the grid's: one candidate, and a
#: sample's error, ~0.04 pp at 400 k, would eat most of the promise).
TRIAL_MAX_LEFT_EVENTS = 4_000_000


def verify_spec(spec: JoinSpec, lower_s: int, upper_s: int, left_delay_s: int, right_delay_s: int) -> JoinSpec:
    """The user's spec as the trial pipeline: its own name, the chosen window and watermarks."""
    return spec.model_copy(
        update={
            "pipeline": f"{spec.pipeline}{VERIFY_SUFFIX}",
            "window": WindowSpec(lower=timedelta(seconds=lower_s), upper=timedelta(seconds=upper_s)),
            "left": spec.left.model_copy(update={"watermark_delay": timedelta(seconds=left_delay_s)}),
            "right": spec.right.model_copy(update={"watermark_delay": timedelta(seconds=right_delay_s)}),
        }
    )


@dataclass
class DayCheck:
    ds: str
    left_events: int
    predicted: float
    measured: float

    @property
    def diff_pp(self) -> float:
        return 100 * (self.measured - self.predicted)


@dataclass
class VerifyResult:
    pipeline: str
    cadence: str
    days: list[DayCheck]
    predicted: float
    measured: float
    predicted_p99_latency_s: float
    measured_p99_latency_s: float
    output_rows: int
    notes: list[str] = field(default_factory=list)
    #: per state operator (join, dedupe) its rows at their peak, predicted and measured (native engine)
    state_rows: dict[str, dict[str, float]] | None = None
    #: the share of left events the prediction was made on (1: all of them)
    sample_share: float = 1.0

    @property
    def diff_pp(self) -> float:
        return 100 * (self.measured - self.predicted)

    def state_lines(self) -> list[str]:
        """One line per state operator: its peak rows, predicted and measured."""
        names = {JOIN_STATE: "the join's window", DEDUP_STATE: "the event-id de-duplication"}
        return [
            f"state at its peak, {names[kind]}: predicted {r['predicted']:,.0f} rows, measured {r['measured']:,} "
            f"({r['measured'] / max(r['predicted'], 1):.2f}×)"
            for kind, r in (self.state_rows or {}).items()
        ]

    def within(self, pp: float = PROMISE_PP) -> bool:
        return abs(self.diff_pp) <= pp + 1e-9

    def to_dict(self) -> dict:
        d = asdict(self)
        for day, check in zip(d["days"], self.days, strict=True):
            day["diff_pp"] = check.diff_pp
        return {**d, "diff_pp": self.diff_pp, "promise_pp": PROMISE_PP, "within": self.within()}


def compare(
    predicted_per_ds: dict[str, float],
    predicted_overall: float,
    matched_per_ds: dict[str, int],
    left_per_ds: dict[str, int],
    predicted_p99_s: float,
    latencies_s: np.ndarray,
    *,
    pipeline: str,
    cadence: str,
) -> VerifyResult:
    """Predicted vs measured, per ds and overall (overall weighs each ds by its left events)."""
    days = [
        DayCheck(
            ds, left_per_ds.get(ds, 0), p, matched_per_ds.get(ds, 0) / left_per_ds[ds] if left_per_ds.get(ds) else 0.0
        )
        for ds, p in sorted(predicted_per_ds.items())
    ]
    n = sum(d.left_events for d in days)
    measured = sum(matched_per_ds.get(d.ds, 0) for d in days) / n if n else float("nan")
    notes = [] if n else ["no landed left events for these days"]
    return VerifyResult(
        pipeline, cadence, days, predicted_overall, measured, predicted_p99_s, p99(latencies_s), len(latencies_s), notes
    )


def measure(spark, trial: JoinSpec, source: JoinSpec, days: list[date], s=None) -> tuple[dict, dict, np.ndarray]:
    """(matched left events per ds, landed left events per ds, output-row latencies in s) of a trial run."""
    from pyspark.sql import functions as F

    from jobs.join.columns import col_name
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    out = delta_io.read_table(spark, Tables.of(trial, s).output("stream")).where(F.col("ds").isin(days))
    lid, rid = col_name("left", trial.left.id), col_name("right", trial.right.id)
    matched = {
        str(r["ds"]): int(r["n"])
        for r in out.where(F.col(rid).isNotNull()).groupBy("ds").agg(F.countDistinct(lid).alias("n")).collect()
    }
    landed = delta_io.read_table(spark, Tables.of(source, s).landed("left")).where(F.col("ds").isin(days))
    left = {str(r["ds"]): int(r["n"]) for r in landed.groupBy("ds").agg(F.count("*").alias("n")).collect()}
    return matched, left, first_answer_latencies(out, trial)


def first_answer_latencies(out: Any, spec: JoinSpec) -> np.ndarray:
    """Output-row latencies (s) of the first answers: the one row set whose p99
    (:func:`jobs.accuracy.tradeoff.p99`) is predicted, verified and held to the latency budget.
    The paced engine's corrections are later answers: its latency is the first answer's
    (:func:`jobs.join.columns.first_answers`)."""
    from jobs.join.columns import first_answers, output_latency_s

    lat: Any = first_answers(out, spec).select(output_latency_s(spec).alias("s")).toPandas()
    return lat.s.to_numpy(dtype=float)


def clear_trial(trial: JoinSpec, s=None) -> None:
    """A trial starts clean: its tables, checkpoints and progress log from an earlier trial go."""
    from jobs.settings import settings

    st = s or settings()
    if not trial.pipeline.endswith(VERIFY_SUFFIX):
        raise ValueError(f"{trial.pipeline} is not a trial pipeline; refusing to clear it")
    for kind in ("tables", "checkpoints", "progress"):
        fs.delete(st.path(kind, trial.pipeline))


@dataclass
class TrialPrediction:
    """One candidate predicted at a trial's cadence (what ``recommend --verify`` holds the trial to)."""

    cadence: str
    chosen: Candidate
    inputs: dict


def predict_trial(
    spark, spec: JoinSpec, days: list[date], chosen: Candidate, slice_minutes: float, s=None
) -> TrialPrediction:
    """``chosen`` (picked for the live cadence) predicted for a replay-as-live trial with
    ``slice_minutes`` slices: the same model at the trial's cadence, so the trial measures the
    model, and the model then speaks for the live stream."""
    from jobs.storage.tables import Tables

    cadence = default_cadence(spec, slice_minutes)
    window = (chosen.lower_s, chosen.upper_s)
    paced = spec.streaming.engine == Engine.paced
    obs, rec = observe(spark, spec, days, cadence, window, s, keys=paced, max_left_events=TRIAL_MAX_LEFT_EVENTS)
    progress = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if paced:
        grid, per_ds, _, runs = paced_grid(spec, obs, rec, cadence, [window], progress)
        at_trial = Candidate.of(grid.iloc[0])
        at_trial.per_ds, batches = per_ds[window], runs[window]
        state_rows = None  # the paced operator's state is its own (keys, not window rows)
    else:
        memory = memory_model(progress, rec)
        row = evaluate(obs, [window], [chosen.left_delay_s], [chosen.right_delay_s], memory)
        at_trial = Candidate.of(row.iloc[0])
        state_rows = memory.state_rows(*window, chosen.left_delay_s, chosen.right_delay_s, cadence)
        at_trial.per_ds = per_ds_rates(obs, window, chosen.left_delay_s, chosen.right_delay_s)
        batches = int(len(obs.clock.end_ms))
    inputs = {
        "batches": batches,
        "late_lag": cadence.late_lag,
        "cadence_s": cadence.batch_s,
        "engine": spec.streaming.engine.value,
        "state_rows": state_rows,
        "sample_share": obs.sample_share,
    }
    return TrialPrediction(cadence.label(), at_trial, inputs)


def verify(
    spark,
    spec: JoinSpec,
    rec: Any,
    days: list[date],
    *,
    bootstrap: str,
    slice_minutes: float,
    s=None,
    on_slice: Callable[..., None] | None = None,
    run: Callable[..., Any] | None = None,
) -> VerifyResult:
    """Replay ``days`` as live with ``rec.chosen``'s settings and compare with its prediction.

    ``rec`` must have been predicted for the same cadence (replay-as-live, ``slice_minutes``):
    anything else would compare unlike with unlike.
    """
    expected = default_cadence(spec, slice_minutes).label()
    if rec.cadence != expected:
        raise ValueError(f"the recommendation was predicted for {rec.cadence}, the trial runs {expected}")
    c = rec.chosen
    trial = verify_spec(spec, c.lower_s, c.upper_s, c.left_delay_s, c.right_delay_s)
    clear_trial(trial, s)
    from jobs.steps.replay_live import replay_as_live

    (run or replay_as_live)(
        spark, trial, bootstrap=bootstrap, days=days, source=spec, slice_minutes=slice_minutes, s=s, on_slice=on_slice
    )
    matched, left, lat = measure(spark, trial, spec, days, s)
    res = compare(
        c.per_ds, c.match_rate, matched, left, c.p99_latency_s, lat, pipeline=trial.pipeline, cadence=rec.cadence
    )
    from jobs.storage.tables import Tables

    progress = read_progress(Tables.of(trial, s).progress_log(JOIN_QUERY))
    res.notes.append(_batches_note(progress, rec))
    res.sample_share = float(rec.inputs.get("sample_share", 1.0))
    if res.sample_share < 1:
        res.notes.append(f"predicted on a hash sample of {res.sample_share:.0%} of the left events")
    if rec.inputs.get("state_rows"):  # per state operator: predicted at its peak, and the most the trial held
        predicted = rec.inputs["state_rows"]
        res.state_rows = {
            k: {"predicted": predicted[k], "measured": peak_rows(progress, k)} for k in (JOIN_STATE, DEDUP_STATE)
        }
    return res


def _batches_note(progress_log: list[dict], rec: Any) -> str:
    """How many micro-batches the trial ran against how many the prediction assumed: a slice read in
    two batches, or no-data batches between slices (which move the late filter one batch closer,
    ``Cadence.late_lag`` 1), would show here first."""
    progress = {p["batchId"]: p for p in progress_log}
    data = sum(1 for p in progress.values() if (p.get("numInputRows") or 0) > 0)
    assumed = (
        "one per non-empty slice, then the records held back, then the drain's"
        if rec.inputs.get("engine") == "paced"
        else f"one per non-empty slice, late lag {rec.inputs.get('late_lag')} batches"
    )
    return (
        f"the trial ran {len(progress)} micro-batches ({data} with data, {len(progress) - data} without); "
        f"the prediction assumed {rec.inputs.get('batches')} ({assumed})"
    )

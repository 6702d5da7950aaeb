"""Recommend a window and watermark delays, with predicted match rate, memory, latency, recovery.

Paper §6.5: users "find it hard to figure out a good setting for the join window, unless they
have an equivalent batch pipeline to experiment with". joinshift has that batch pipeline, so:

* **match rate per candidate window**: the one-pass sweep over the landed days
  (:mod:`jobs.window_sweep`), with the stream's cross-midnight semantics, minus the share of left
  events the stream loses to lateness at the recommended watermark (measured, not modelled);
* **watermark delay per stream**: Spark drops a row whose event time is behind (max event time
  seen − delay); so the delay that drops at most ``target_drop_rate`` of a stream is a quantile of
  each record's lateness behind the running max event time at its arrival;
* **state memory**: peak right rate × (window span + right delay) × bytes per buffered row, plus
  peak left rate × (upper bound + left delay) × bytes per buffered row (bytes per row measured
  from the streaming query's state store metrics when it ran, else estimated from payload size);
* **output latency** of left-outer rows: upper bound + watermark delay;
* **recovery by replay**: rows in the window ÷ measured replay rate (paper §6.1, §7.3).

The smallest window (by span) whose predicted match rate reaches ``target_share`` × the
baseline's match rate wins; boundary deltas say which side to widen or shrink.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jobs.accuracy.lateness import recommend_watermark_delay
from jobs.spec import JoinSpec, format_duration

log = logging.getLogger("joinshift.recommend")

DEFAULT_LOWERS = tuple(-3600 * h for h in (0, 0.5, 1, 1.5, 2, 3, 4, 5, 6))
DEFAULT_UPPERS = tuple(60 * m for m in (0, 10, 20, 30, 45, 60, 90, 120, 180, 360))
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


@dataclass
class StreamLateness:
    """How late one stream's records arrive behind its own running max event time."""

    records: int
    recommended_delay_s: int
    deployed_delay_s: int
    share_dropped_at_deployed: float
    share_dropped_at_recommended: float
    lateness_p50_s: float
    lateness_p99_s: float


def lateness_behind_max(arrival_ms: np.ndarray, event_ms: np.ndarray) -> np.ndarray:
    """Per record, in arrival order: (max event time seen before it) − its event time, ms (>= 0)."""
    order = np.argsort(arrival_ms, kind="stable")
    ev = event_ms[order].astype(np.int64)
    running = np.maximum.accumulate(ev)
    prev_max = np.concatenate([[ev[0] if len(ev) else 0], running[:-1]])
    late = np.maximum(prev_max - ev, 0)
    out = np.empty_like(late)
    out[order] = late
    return out


def watermark_delay_for(lateness_ms: np.ndarray, target_drop_rate: float) -> int:
    """Smallest delay (s) such that at most ``target_drop_rate`` of records are later than it."""
    if not 0 <= target_drop_rate < 1:
        raise ValueError("target_drop_rate must be in [0, 1)")
    # the upper empirical quantile of the lateness, in ms, rounded up to whole seconds
    return int(math.ceil(recommend_watermark_delay(lateness_ms, target_drop_rate) / 1000))


def stream_lateness(
    arrival_ms: np.ndarray, event_ms: np.ndarray, deployed_delay_s: int, target_drop_rate: float
) -> StreamLateness:
    late = lateness_behind_max(arrival_ms, event_ms)
    rec = watermark_delay_for(late, target_drop_rate)
    share = lambda d: float(np.mean(late > d * 1000)) if len(late) else 0.0  # noqa: E731
    return StreamLateness(
        int(len(late)),
        rec,
        deployed_delay_s,
        share(deployed_delay_s),
        share(rec),
        float(np.percentile(late, 50) / 1000) if len(late) else 0.0,
        float(np.percentile(late, 99) / 1000) if len(late) else 0.0,
    )


@dataclass
class Prediction:
    lower_s: int
    upper_s: int
    batch_match_rate: float
    predicted_match_rate: float
    predicted_memory_bytes: float
    output_latency_s: float
    recovery_s: float | None

    @property
    def span_s(self) -> int:
        return self.upper_s - self.lower_s

    def label(self) -> str:
        return (
            f"[{format_duration(timedelta(seconds=self.lower_s), True)}, "
            f"{format_duration(timedelta(seconds=self.upper_s), True)}]"
        )


@dataclass
class Recommendation:
    pipeline: str
    days: list[str]
    baseline: str
    baseline_match_rate: float
    target_share: float
    target_drop_rate: float
    chosen: Prediction
    deployed: Prediction
    left_watermark_s: int
    right_watermark_s: int
    reasons: list[str] = field(default_factory=list)
    candidates: list[Prediction] = field(default_factory=list)
    lateness: dict[str, StreamLateness] = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["window"] = self.chosen.label()
        d["deployed_window"] = self.deployed.label()
        return d


def predict(
    sweep: pd.DataFrame,
    *,
    late_loss: float,
    right_rate: float,
    left_rate: float,
    bytes_per_row: float,
    left_delay_s: int,
    right_delay_s: int,
    replay_rows_per_s: float | None,
) -> list[Prediction]:
    """Turn a sweep (one row per candidate, averaged over days) into predictions."""
    out = []
    for r in sweep.itertuples():
        span = r.upper_s - r.lower_s
        right_rows = right_rate * (span + right_delay_s)
        left_rows = left_rate * (max(r.upper_s, 0) + left_delay_s)
        memory = (right_rows + left_rows) * bytes_per_row
        recovery = (right_rows + left_rows) / replay_rows_per_s if replay_rows_per_s else None
        out.append(
            Prediction(
                int(r.lower_s),
                int(r.upper_s),
                float(r.match_rate),
                max(0.0, float(r.match_rate) - late_loss),
                memory,
                float(max(r.upper_s, 0) + right_delay_s),
                recovery,
            )
        )
    return out


def choose(predictions: list[Prediction], baseline_rate: float, target_share: float) -> Prediction:
    """The smallest span reaching the target; ties go to the higher predicted match rate."""
    target = target_share * baseline_rate
    ok = [p for p in predictions if p.predicted_match_rate >= target]
    pool = ok or predictions
    key = (lambda p: (p.span_s, -p.predicted_match_rate)) if ok else (lambda p: (-p.predicted_match_rate, p.span_s))
    return sorted(pool, key=key)[0]


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


# ------------------------------------------------------------------------------ I/O shell


def _measured_bytes_per_row(progress: list[dict]) -> float | None:
    vals = []
    for p in progress[-20:]:
        for op in p.get("stateOperators", []):
            if "join" not in str(op.get("operatorName", "")).lower():
                continue  # the event-id de-duplication's rows are not window rows
            rows, mem = op.get("numRowsTotal") or 0, op.get("memoryUsedBytes") or 0
            if rows > 100 and mem > 0:
                vals.append(mem / rows)
    return float(np.median(vals)) if vals else None


def _replay_rate(progress: list[dict]) -> float | None:
    rates = [p.get("processedRowsPerSecond") or 0 for p in progress if (p.get("numInputRows") or 0) > 1000]
    return float(max(rates)) if rates else None


def recommend(
    spark,
    spec: JoinSpec,
    days: list[date],
    *,
    s=None,
    target_share: float = 0.995,
    target_drop_rate: float = 0.001,
    lowers=DEFAULT_LOWERS,
    uppers=DEFAULT_UPPERS,
    replay_rows_per_s: float | None = None,
) -> Recommendation:
    """Sweep the landed days, measure lateness and state size, and pick a window."""
    from pyspark.sql import functions as F

    from jobs.accuracy.sweep import candidate_grid, sweep_ds
    from jobs.storage import delta_io
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    if not days:
        raise ValueError("days: give at least one ds to learn from")
    tables = Tables.of(spec, s)
    candidates = sorted(
        set(candidate_grid(list(lowers), list(uppers))) | {(spec.window.lower_seconds, spec.window.upper_seconds)}
    )
    sweep = sweep_ds(spark, spec, days, candidates, s=s, right_days="neighbours")
    per_candidate = sweep.groupby(["lower_s", "upper_s"], as_index=False).agg(
        left_events=("left_events", "sum"), matched_left=("matched_left", "sum")
    )
    per_candidate["match_rate"] = per_candidate.matched_left / per_candidate.left_events

    # lateness and rates from the landed tables (arrival = Kafka timestamp)
    lateness, peak_rate = {}, {}
    for side in ("left", "right"):
        st = spec.side(side)
        pdf: pd.DataFrame = (
            delta_io.read_table(spark, tables.landed(side))
            .where(F.col("ds").isin(days))
            .select(F.unix_millis(st.event_time).alias("e"), F.unix_millis("_arrival_time").alias("a"))
            .toPandas()
        )
        lateness[side] = stream_lateness(pdf.a.to_numpy(), pdf.e.to_numpy(), st.watermark_seconds, target_drop_rate)
        hourly = pd.Series(1, index=pd.to_datetime(pdf.a, unit="ms")).resample("1h").sum()
        peak_rate[side] = float(hourly.max() / 3600) if len(hourly) else 0.0

    metrics = (
        spark.read.format("delta").load(tables.match_metrics).where(F.col("ds").isin(days)).toPandas()
        if delta_io.table_exists(spark, tables.match_metrics)
        else pd.DataFrame()
    )
    baseline = spec.accuracy.baseline

    def mean_rate(variant: str) -> float | None:
        m = metrics[metrics.variant == variant] if len(metrics) else metrics
        return float(m.matched_left.sum() / m.left_events.sum()) if len(m) else None

    deployed_key = (spec.window.lower_seconds, spec.window.upper_seconds)
    dep_row = per_candidate[(per_candidate.lower_s == deployed_key[0]) & (per_candidate.upper_s == deployed_key[1])]
    stream_rate = mean_rate("stream")
    # what the stream lost to lateness at the deployed window, measured on the same days
    late_loss = max(0.0, float(dep_row.match_rate.iloc[0]) - stream_rate) if stream_rate is not None else 0.0
    baseline_rate = mean_rate(baseline)
    if baseline_rate is None:
        baseline_rate = float(dep_row.match_rate.iloc[0])

    progress = read_progress(tables.progress_log(JOIN_QUERY))
    bpr = _measured_bytes_per_row(progress)
    if bpr is None:
        bpr = 400.0  # no state metrics yet: ~200 B of payload, twice that once buffered in RocksDB
    replay = replay_rows_per_s or _replay_rate(progress)
    kw: dict[str, Any] = dict(  # the keyword arguments of predict(), shared by both calls
        late_loss=late_loss,
        right_rate=peak_rate["right"],
        left_rate=peak_rate["left"],
        bytes_per_row=bpr,
        left_delay_s=lateness["left"].recommended_delay_s,
        right_delay_s=lateness["right"].recommended_delay_s,
        replay_rows_per_s=replay,
    )
    preds = predict(per_candidate, **kw)
    chosen = choose(preds, baseline_rate, target_share)
    deployed = predict(
        dep_row, **{**kw, "left_delay_s": spec.left.watermark_seconds, "right_delay_s": spec.right.watermark_seconds}
    )[0]

    deltas = {}
    if len(metrics):
        sm = metrics[metrics.variant == "stream"]
        if len(sm):
            deltas = {c: float(sm[c].mean()) for c in sm.columns if c.startswith("to_") and sm[c].notna().any()}
    reasons = [
        f"{chosen.label()} is the smallest window whose predicted match rate "
        f"({100 * chosen.predicted_match_rate:.2f}%) reaches {100 * target_share:.1f}% of {baseline} "
        f"({100 * baseline_rate:.2f}%)"
        if chosen.predicted_match_rate >= target_share * baseline_rate
        else f"no candidate reaches {100 * target_share:.1f}% of {baseline} ({100 * baseline_rate:.2f}%); "
        f"{chosen.label()} comes closest",
        f"predicted state memory {chosen.predicted_memory_bytes / 1e6:.1f} MB vs "
        f"{deployed.predicted_memory_bytes / 1e6:.1f} MB "
        f"deployed (peak {peak_rate['right']:.1f} right rows/s, {bpr:.0f} B per buffered row)",
        f"the stream lost {100 * late_loss:.2f} pp to late arrivals at the deployed window (measured)",
    ]
    for side in ("left", "right"):
        lt = lateness[side]
        delay = format_duration(timedelta(seconds=lt.recommended_delay_s)) if lt.recommended_delay_s else "0s"
        reasons.append(
            f"{side} watermark {delay}"
            f" drops {100 * lt.share_dropped_at_recommended:.2f}% of {spec.side(side).name} "
            f"(deployed {format_duration(timedelta(seconds=lt.deployed_delay_s)) if lt.deployed_delay_s else '0s'}: "
            f"{100 * lt.share_dropped_at_deployed:.2f}%)"
        )
    reasons += boundary_reasons(spec, deltas)
    return Recommendation(
        pipeline=spec.pipeline,
        days=[str(d) for d in days],
        baseline=baseline,
        baseline_match_rate=baseline_rate,
        target_share=target_share,
        target_drop_rate=target_drop_rate,
        chosen=chosen,
        deployed=deployed,
        left_watermark_s=lateness["left"].recommended_delay_s,
        right_watermark_s=lateness["right"].recommended_delay_s,
        reasons=reasons,
        candidates=preds,
        lateness=lateness,
        inputs={
            "bytes_per_row": bpr,
            "peak_rows_per_s": peak_rate,
            "replay_rows_per_s": replay,
            "late_loss": late_loss,
            "candidates": len(preds),
        },
    )


def save(spark, spec: JoinSpec, rec: Recommendation, s=None) -> Path:
    """Write the recommendation to the ``recommendations`` Delta table and as JSON."""
    from datetime import datetime

    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    as_of = max(rec.days)
    out = Path(tables.settings.path("recommendations", spec.pipeline)) / f"{as_of}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec.to_dict(), indent=2, default=str))
    c, d = rec.chosen, rec.deployed
    row = spark.createDataFrame(
        [
            (
                date.fromisoformat(as_of),
                ",".join(rec.days),
                c.lower_s,
                c.upper_s,
                rec.left_watermark_s,
                rec.right_watermark_s,
                c.predicted_match_rate,
                rec.baseline,
                rec.baseline_match_rate,
                c.predicted_memory_bytes,
                c.output_latency_s,
                c.recovery_s,
                d.lower_s,
                d.upper_s,
                d.predicted_match_rate,
                d.predicted_memory_bytes,
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

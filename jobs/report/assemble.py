"""Assemble one ds's accuracy report from the pipeline's tables and publish it.

Reads what the other jobs wrote (match metrics, join outputs, landed tables, the stream's
progress log, quality-gate results), computes what only the report needs (boundary-delta
histograms, PT series, miss attribution, the recommendation), and builds the typed
:class:`jobs.report.model.ReportData` for the pure renderer :mod:`jobs.report.render`. Reports
land in ``Settings.local_path("reports")/<pipeline>/<ds>/`` (``<storage_root>/reports`` for a local root);
``joinshift report`` (jobs/cli.py) and the
``joinshift_report`` DAG call :func:`publish`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, date, datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.report.model import SECTION_TYPES, ReportData, Runbook, SpecSummary
from jobs.settings import PROJECT_ROOT, Settings
from jobs.spec import JoinSpec, format_duration

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("joinshift.report")

HIST_BINS = 30


def _spec_summary(spec: JoinSpec) -> dict:
    return {
        "window": spec.window.label(),
        "left_watermark": format_duration(spec.left.watermark_delay),
        "right_watermark": format_duration(spec.right.watermark_delay),
        "join_type": spec.join.type.value,
        "cardinality": spec.join.cardinality.value,
        "baseline": spec.accuracy.baseline,
        "tolerance_pp": spec.accuracy.tolerance_pp,
    }


def _boundary_deltas(spark: SparkSession, spec: JoinSpec, tables, ds: date) -> dict:
    from jobs.accuracy.compare import WINDOWED_VARIANTS, boundary_deltas
    from jobs.storage import delta_io

    span = max(spec.window.span_seconds, 1)
    width = span / HIST_BINS
    edges = [i * width for i in range(HIST_BINS + 1)]
    out = {}
    metrics = {}
    if delta_io.table_exists(spark, tables.match_metrics):
        metrics = {
            r["variant"]: r.asDict()
            for r in spark.read.format("delta").load(tables.match_metrics).where(F.col("ds") == F.lit(ds)).collect()
        }
    for variant in WINDOWED_VARIANTS:
        if not delta_io.table_exists(spark, tables.output(variant)):
            continue
        d = boundary_deltas(
            spark.read.format("delta").load(tables.output(variant)).where(F.col("ds") == F.lit(ds)), spec
        )
        entry = {k: v for k, v in metrics.get(variant, {}).items() if k.startswith("to_")}
        for col in ("to_lower", "to_upper"):
            b = F.least(F.greatest(F.floor(F.col(f"{col}_s") / width), F.lit(0)), F.lit(HIST_BINS - 1))
            counts: dict[int, int] = dict(d.groupBy(b.alias("b")).count().collect())
            entry[f"hist_{col}"] = {"edges": edges, "counts": [int(counts.get(i, 0)) for i in range(HIST_BINS)]}
        out[variant] = entry
    return out


def _pt(spark: SparkSession, spec: JoinSpec, tables, ds: date, batch_ms: int = 60_000) -> tuple[dict, dict]:
    """PT series per stream over the day's arrivals (paper §5.3, Fig. 12) and the share behind PT."""
    import numpy as np

    from jobs.accuracy.lateness import lateness_behind_pt, quantile_basis, recommend_watermark_delay, share_behind_pt
    from jobs.join.pt_estimator import pt_series
    from jobs.storage import delta_io

    series, advice = {}, {}
    for side in ("left", "right"):
        st = spec.side(side)
        pdf: pd.DataFrame = (
            delta_io.read_table(spark, tables.landed(side))
            .where(F.col("ds") == F.lit(ds))
            .select(F.unix_millis("_arrival_time").alias("a"), F.unix_millis(st.event_time).alias("e"))
            .toPandas()
        )
        if pdf.empty:
            continue
        a, e = pdf.a.to_numpy(np.int64), pdf.e.to_numpy(np.int64)
        s = pt_series(a, e, batch_ms)
        series[side] = [
            {
                "batch_end_ms": int(r.batch_end_ms),
                "pt_delay_ms": None if r.pt_delay_ms != r.pt_delay_ms else float(r.pt_delay_ms),
                "window_batches": int(r.window_batches),
                "accuracy": None if r.accuracy != r.accuracy else float(r.accuracy),
            }
            for r in s.itertuples()
        ]
        late = lateness_behind_pt(s, a, e)
        late = late[~np.isnan(late)]
        advice[side] = {
            "recommended_delay_s": recommend_watermark_delay(late, 0.001) / 1000 if len(late) else None,
            "share_behind_pt": share_behind_pt(late) if len(late) else None,
            "basis": "PT estimator (paper §5.3): lateness behind the estimated processing time"
            + (f"; {note}" if (note := quantile_basis(len(late), 0.001)) else ""),
        }
    return series, advice


def _gates(spark: SparkSession, tables, ds: date) -> list[dict]:
    from jobs.storage import delta_io

    path = tables._t("quality_gates")
    if not delta_io.table_exists(spark, path):
        return []
    return [
        {k: r[k] for k in ("suite", "success", "evaluated", "failed", "summary") if k in r}
        for r in (x.asDict() for x in spark.read.format("delta").load(path).where(F.col("ds") == F.lit(ds)).collect())
    ]


def _quarantine(spark: SparkSession, spec: JoinSpec, tables, ds: date) -> dict:
    from jobs.storage import delta_io

    if not delta_io.table_exists(spark, tables.quarantine):
        return {}
    q: dict[str, dict[str, int]] = {}
    counts = (
        spark.read.format("delta")
        .load(tables.quarantine)
        .where(F.col("ds") == F.lit(ds))
        .groupBy("stage", "stream", "reason")
        .count()
        .collect()
    )
    # landing's and the stream's are the same records (one parser): landing's when the day was
    # landed, else the stream's (a pipeline past its cut-over lands no more days)
    stage = "landing" if any(r["stage"] == "landing" for r in counts) else "stream"
    rows = [r for r in counts if r["stage"] == stage]
    names = {spec.left.name: "left", spec.right.name: "right"}
    for r in rows:
        q.setdefault(names.get(r["stream"], r["stream"]), {})[r["reason"]] = r["count"]
    return q


def runbooks() -> list[dict]:
    folder = PROJECT_ROOT / "include" / "runbooks"
    out = []
    for p in sorted(folder.glob("*.md")):
        title = next((ln.lstrip("# ").strip() for ln in p.read_text().splitlines() if ln.startswith("#")), p.stem)
        out.append({"title": title, "path": str(p.relative_to(PROJECT_ROOT))})
    return out


@cache
def _adapter(key: str):
    from pydantic import TypeAdapter

    annotation = SECTION_TYPES[key]
    assert annotation is not None  # every ReportData field is annotated
    return TypeAdapter(annotation)


def _recommendation(rec) -> tuple[list[dict], dict]:
    """The sweep and the recommendation sections of a :class:`jobs.accuracy.recommend.Recommendation`."""
    c, d = rec.chosen, rec.deployed
    sweep = [
        {
            "lower_s": w["lower_s"],
            "upper_s": w["upper_s"],
            "match_rate": w["window_rate"],  # every window alike: nothing dropped late (the frontier has the rest)
            "batch_match_rate": w["window_rate"],
            "predicted_memory_bytes": w.get("memory_bytes"),
            "output_latency_s": w.get("p99_latency_s"),
        }
        for w in rec.windows
    ]
    return sweep, {
        "window": c.label(),
        "lower_s": c.lower_s,
        "upper_s": c.upper_s,
        "left_watermark_s": c.left_delay_s,
        "right_watermark_s": c.right_delay_s,
        "predicted_match_rate": c.match_rate,
        "baseline_match_rate": rec.baseline_match_rate,
        "predicted_memory_bytes": c.memory_bytes,
        "output_latency_s": c.p99_latency_s,
        "recovery_s": c.recovery_s,
        "deployed": {
            "window": d.label(),
            "match_rate": d.match_rate,
            "memory_bytes": d.memory_bytes,
            "output_latency_s": d.p99_latency_s,
            "recovery_s": d.recovery_s,
            "left_watermark_s": d.left_delay_s,
            "right_watermark_s": d.right_delay_s,
            "first_answer_rate": d.first_answer_rate,
        },
        "inputs": {"engine": rec.inputs.get("engine")},
        "chosen": {"first_answer_rate": c.first_answer_rate},
        "reasons": rec.explanation,
        "lateness": {k: asdict(v) for k, v in rec.lateness.items()},
        "cadence": rec.cadence,
        "output_latency_budget_s": rec.budgets.get("output_latency_s"),
        "state_memory_budget_bytes": rec.budgets.get("state_memory_bytes"),
        "fits_budgets": rec.fits_budgets,
        "within_tolerance": rec.within_tolerance,
        "tolerance_pp": rec.tolerance_pp,
        "reference_match_rate": rec.reference_match_rate,
        "frontier": [
            {
                "lower_s": f.lower_s,
                "upper_s": f.upper_s,
                "left_watermark_s": f.left_delay_s,
                "right_watermark_s": f.right_delay_s,
                "match_rate": f.match_rate,
                "p99_latency_s": f.p99_latency_s,
                "memory_bytes": f.memory_bytes,
            }
            for f in rec.frontier
        ],
        "relax": rec.relax,
    }


def _attribution(att: dict) -> dict[str, Any]:
    """The miss causes and the account (against the spec's baseline) as two report sections."""
    att = dict(att)
    return {"account": att.pop("account"), "attribution": att}


def build_report(
    spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None, learn_days: list[date] | None = None
) -> tuple[ReportData, Any]:
    """Everything the renderer shows for one ds, typed, and the recommendation it came with
    (a :class:`jobs.accuracy.recommend.Recommendation`, None when it could not be made: the
    caller saves it). Each section is built and validated on its own: one that fails is left
    out with a warning, never costing the whole report."""
    from jobs.accuracy.attribution import attribute_misses
    from jobs.accuracy.recommend import recommend
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    sections: dict[str, Any] = {}
    rec = None

    def match_rates() -> list[dict] | None:
        from jobs.storage.stream_runs import rate_label, read_runs

        if not delta_io.table_exists(spark, tables.match_metrics):
            return None
        runs = read_runs(spec, s)
        return [
            {
                "ds": str(r["ds"]),
                "variant": r["variant"],
                "left_events": r["left_events"],
                "matched_left": r["matched_left"],
                "match_rate": r["match_rate"],
                **({"stream_run": rate_label(runs.get(str(r["ds"])))} if r["variant"] == "stream" else {}),
            }
            for r in spark.read.format("delta")
            .load(tables.match_metrics)
            .where(F.col("ds") <= F.lit(ds))
            .orderBy("ds", "variant")
            .collect()
        ]

    def match_rates_hourly() -> list[dict] | None:
        if not delta_io.table_exists(spark, tables.match_metrics_hourly):
            return None
        cols = ("hour", "variant", "left_events", "matched_left", "match_rate")
        rows = (
            spark.read.format("delta")
            .load(tables.match_metrics_hourly)
            .where(F.col("ds") == F.lit(ds))
            .orderBy("hour", "variant")
            .collect()
        )
        return [{c: r[c] for c in cols} for r in rows]

    def pt() -> dict:
        series, advice = _pt(spark, spec, tables, ds)
        return {"pt": series, "watermark_advice": advice}

    def recommendation() -> dict:
        nonlocal rec
        rec = recommend(spark, spec, learn_days or [ds], s=s)
        sweep, chosen = _recommendation(rec)
        return {"sweep": sweep, "recommendation": chosen}

    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "match_rates": lambda: {"match_rates": match_rates()},
        "match_rates_hourly": lambda: {"match_rates_hourly": match_rates_hourly()},
        "boundary_deltas": lambda: {"boundary_deltas": _boundary_deltas(spark, spec, tables, ds)},
        "attribution": lambda: _attribution(attribute_misses(spark, spec, ds, s=s)),
        "gates": lambda: {"gates": _gates(spark, tables, ds)},
        "quarantine": lambda: {"quarantine": _quarantine(spark, spec, tables, ds)},
        "PT": pt,
        "recommendation": recommendation,
    }
    for name, step in steps.items():
        try:
            built = {k: _adapter(k).validate_python(v) for k, v in step().items() if v is not None}
        except Exception as exc:  # one missing input must not cost the whole report
            log.warning("report %s: %s unavailable: %s", ds, name, exc)
            continue
        sections.update(built)
    data = ReportData(
        pipeline=spec.pipeline,
        ds=str(ds),
        spec=SpecSummary.model_validate(_spec_summary(spec)),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        **sections,
        runbooks=[Runbook.model_validate(r) for r in runbooks()],
    )
    return data, rec


def publish(
    spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None, learn_days: list[date] | None = None
):
    """Build, render and publish one ds's report; save the recommendation. Returns the files."""
    from jobs.accuracy.recommend import save
    from jobs.report.render import publish_report
    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    if not delta_io.table_exists(spark, tables.match_metrics) or not (
        spark.read.format("delta").load(tables.match_metrics).where(F.col("ds") == F.lit(ds)).limit(1).count()
    ):  # a report of nothing would look like one of a day where nothing happened
        raise delta_io.MissingInput(
            f"no comparison for ds {ds} of pipeline {spec.pipeline} yet: run `joinshift compare --ds {ds}` first"
        )
    data, rec = build_report(spark, spec, ds, s, learn_days)
    if rec is not None:
        save(spark, spec, rec, s)
    # reports are files for people, served by the Airflow UI from this machine's disk: local whatever
    # the storage root (the same <storage_root>/reports as before for a local root)
    files = publish_report(data, tables.settings.local_path("reports"))
    log.info("accuracy report for %s ds=%s: %s", spec.pipeline, ds, files.html)
    return files

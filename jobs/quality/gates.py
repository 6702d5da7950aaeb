"""Data-quality gates: Great Expectations 1.x suites over the landed streams, the join output and
the stream's accuracy, one ds at a time.

The suites themselves (built from the spec, written to and loaded from ``expectations/``) are
:mod:`jobs.quality.suites`; this module runs them and records the verdicts.

**Execution.** Validation runs in an *ephemeral* GX context (nothing is written anywhere: no
validation results store, no data docs, no checkpoints) with GX's Spark datasource
(``add_spark`` → dataframe asset → whole-dataframe batch) directly on the pyspark DataFrame.
Verified with pyspark 4.2.0 and great-expectations 1.24.1 for every expectation used here
(``expect_table_columns_to_match_set``, ``expect_column_values_to_be_of_type``,
``expect_column_values_to_not_be_null``, ``expect_column_values_to_be_null`` with a
``row_condition``, ``expect_column_values_to_be_unique``, ``expect_compound_columns_to_be_unique``,
``expect_column_values_to_be_between``, ``expect_column_pair_values_to_be_equal``): no pandas
fallback is needed. Type names in the suites are therefore Spark's (``StringType``, ...).
GX is installed without its ``[spark]`` extra: that extra only pins pyspark, which the project
already has. To stay fast, the ds slice is cached as one partition and validated in two passes:
``BOOLEAN_ONLY`` for every expectation, then ``BASIC`` (counts, a few unexpected values) only for
the ones that failed. Usage statistics are off (``GX_ANALYTICS_ENABLED=False``) and so are progress bars.

Usage::

    from jobs.quality.gates import run_gates, write_gate_results, assert_gates
    results = run_gates(spark, spec, date(2026, 11, 20))
    write_gate_results(spark, spec, date(2026, 11, 20), results)
    assert_gates(results)          # raises GateFailed with the readable summary

    joinshift quality write-suites --spec include/specs/search_sessions.yaml
    joinshift quality check-suites --spec include/specs/search_sessions.yaml
    joinshift quality run --spec include/specs/search_sessions.yaml --ds 2026-11-20
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.join.columns import ARRIVAL_TIME, EMITTED_AT
from jobs.quality.suites import (
    ACCURACY_DIFF,
    ARRIVAL_DS,
    EXPECTATIONS_DIR,
    KINDS,
    LATENESS,
    RAW_KINDS,
    _gx,
    load_suites,
    suites_out_of_sync,
)
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.spec.shares import gap_pp, pct

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuite
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("joinshift.quality")

GATES_TABLE = "quality_gates"
GATE_COLUMNS = (
    "ds date, pipeline string, suite string, success boolean, evaluated int, failed int, "
    "summary string, failures string, checked_at timestamp"
)
_EXAMPLES = 3


class GateFailed(RuntimeError):
    """A data-quality gate failed; the message is the failed suites' readable summaries."""


@dataclass
class GateResult:
    """One suite's verdict. ``success`` is None when the suite was skipped (nothing to check)."""

    suite: str
    success: bool | None
    evaluated: int
    failed: int
    summary: str
    failures: list[dict] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return self.success is None

    def to_dict(self) -> dict:
        """Everything, JSON-ready (an Airflow task's return value)."""
        return asdict(self)

    def as_report(self) -> dict:
        """The report's ``gates`` entry (see :mod:`jobs.report`)."""
        return {
            "suite": self.suite,
            "success": self.success,
            "evaluated": self.evaluated,
            "failed": self.failed,
            "summary": self.summary,
        }


# ---------------------------------------------------------------- frames and validation


def prepare_frame(df: DataFrame, spec: JoinSpec, kind: str) -> DataFrame:
    """The frame a suite validates: a landed table gets the derived columns; a batch variant's
    output a null ``emitted_at`` (only the stream stamps it); others as they are."""
    from pyspark.sql import functions as F

    if kind == "join_output" and EMITTED_AT not in df.columns:
        return df.withColumn(EMITTED_AT, F.lit(None).cast("timestamp"))
    if kind not in RAW_KINDS:
        return df

    from jobs.join.records import arrival_ds

    st = spec.side(RAW_KINDS[kind])
    arrival, et = F.col(ARRIVAL_TIME), F.col(st.event_time)
    lateness = arrival.cast("double") - et.cast("double")
    return df.withColumn(LATENESS, lateness).withColumn(ARRIVAL_DS, arrival_ds(arrival, spec.timezone))


def _column_label(kwargs: dict) -> str:
    if kwargs.get("column"):
        return str(kwargs["column"])
    if kwargs.get("column_list"):
        return ",".join(kwargs["column_list"])
    if kwargs.get("column_A"):
        return f"{kwargs['column_A']},{kwargs['column_B']}"
    return ""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v) if isinstance(v, str) else str(v)


def _observed(r) -> str:
    """What a failed expectation saw, in a few words."""
    info = r.exception_info or {}
    if not info.get("raised_exception"):  # GX 1.x may key exception info by metric
        info = next((v for v in info.values() if isinstance(v, dict) and v.get("raised_exception")), info)
    if info.get("raised_exception"):
        msg = str(info.get("exception_message") or "error").strip().splitlines()
        return "error: " + (msg[0] if msg else "error")
    res = r.result or {}
    if res.get("unexpected_count") is not None:
        text = f"{res['unexpected_count']} unexpected"
        examples = [x for x in (res.get("partial_unexpected_list") or []) if x is not None][:_EXAMPLES]
        if examples:
            examples = [", ".join(_fmt(y) for y in x.values()) if isinstance(x, dict) else _fmt(x) for x in examples]
            text += " (e.g. " + "; ".join(examples) + ")"
        return text
    mismatched = (res.get("details") or {}).get("mismatched")
    if isinstance(mismatched, dict):
        parts = [f"{k} {sorted(v)}" for k, v in mismatched.items() if v]
        if parts:
            return "; ".join(parts)
    if "observed_value" in res:
        return f"observed {res['observed_value']}"
    return "failed"


def _key(config) -> str:
    """An expectation configuration's identity across validation runs (GX adds ``batch_id``)."""
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    return config.type + json.dumps(kwargs, sort_keys=True, default=str)


def _context():
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def validate_frame(df: DataFrame, suite: ExpectationSuite, label: str, context=None, note: str = "") -> GateResult:
    """Validate a (prepared) pyspark DataFrame against a suite with GX's Spark datasource."""
    context = context or _context()
    ds_name = "joinshift_spark"
    try:
        source = context.data_sources.get(ds_name)
    except Exception:  # noqa: BLE001 (GX raises a lookup error of its own)
        source = context.data_sources.add_spark(name=ds_name)
    asset_name = f"{label}_{len(source.assets)}"
    batch = (
        source.add_dataframe_asset(name=asset_name)
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": df})
    )
    # Pass 1 answers pass/fail only (a few Spark jobs); pass 2 re-runs just the failed
    # expectations for counts and examples, so a clean day pays for no detail it does not show.
    res = batch.validate(suite, result_format="BOOLEAN_ONLY")
    failed = [r.expectation_config for r in res.results if not r.success]
    detail = {}
    if failed:
        gx = _gx()
        again = gx.ExpectationSuite(name=f"{suite.name}.failed", expectations=[c.to_domain_obj() for c in failed])
        detail = {
            _key(r.expectation_config): r
            for r in batch.validate(
                again, result_format={"result_format": "BASIC", "partial_unexpected_count": 10}
            ).results
        }
    order = {_key(e.configuration): i for i, e in enumerate(suite.expectations)}
    failures = []
    for c in sorted(failed, key=lambda c: order.get(_key(c), len(order))):
        r = detail.get(_key(c))
        failures.append(
            {
                "expectation": c.type,
                "column": _column_label(c.kwargs),
                "observed": _observed(r) if r is not None and not r.success else "failed",
            }
        )
    evaluated = len(res.results)
    summary = f"{label}: {evaluated - len(failures)}/{evaluated} passed"
    if note:
        summary += f" ({note})"
    for f in failures:
        col = f"({f['column']})" if f["column"] else ""
        summary += f"; FAILED {f['expectation']}{col}: {f['observed']}"
    return GateResult(label, not failures, evaluated, len(failures), summary, failures)


def _skipped(kind: str, why: str) -> GateResult:
    return GateResult(kind, None, 0, 0, f"{kind}: skipped: {why}")


def accuracy_frame(
    spark: SparkSession, spec: JoinSpec, ds: date, metrics: Sequence[dict]
) -> tuple[DataFrame | None, str]:
    """The accuracy gate's one-row frame from the metrics rows of ``ds``, or (None, why not)."""
    base = spec.accuracy.baseline
    rows = {m["variant"]: m for m in metrics if m["ds"] == ds}
    missing = [v for v in ("stream", base) if v not in rows]
    if missing:
        return None, f"no {' or '.join(missing)} metrics for ds {ds} in match_metrics"
    s, b = rows["stream"]["match_rate"], rows[base]["match_rate"]
    if s is None or b is None:
        return None, f"no left events on ds {ds}: match rates undefined"
    diff = gap_pp(s, b)  # its expectation: >= -tolerance, as jobs.spec.shares.within_tolerance
    df = spark.createDataFrame(
        [(ds, float(s), float(b), diff)],
        f"ds date, stream_match_rate double, baseline_match_rate double, {ACCURACY_DIFF} double",
    )
    return df, f"stream {pct(s)} vs {base} {pct(b)}"


def run_gates(
    spark: SparkSession,
    spec: JoinSpec,
    ds: date,
    s: Settings | None = None,
    *,
    kinds: Sequence[str] = KINDS,
    suites: dict[str, ExpectationSuite] | None = None,
    suites_dir: str | Path | None = None,
    output_variant: str = "stream",
) -> list[GateResult]:
    """Validate the ds partition of the landed tables, the join output and the accuracy.

    Suites come from the file context (``suites_dir``, default ``expectations/``) unless given.
    A suite whose table is missing is skipped (``success`` None), not an error. ``kinds`` picks
    gates, e.g. ``("raw_left", "raw_right")`` right after landing.
    """
    from pyspark.sql import functions as F

    from jobs.storage import delta_io
    from jobs.storage.tables import Tables

    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown gate kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    tables = Tables.of(spec, s)
    from_files = suites is None
    suites = suites if suites is not None else load_suites(spec, suites_dir or EXPECTATIONS_DIR, kinds)
    context = _context()
    results = []
    for kind in kinds:
        if kind == "accuracy":
            if not delta_io.table_exists(spark, tables.match_metrics):
                results.append(_skipped(kind, f"table missing ({tables.match_metrics})"))
                continue
            metrics = [
                r.asDict()
                for r in spark.read.format("delta").load(tables.match_metrics).where(F.col("ds") == F.lit(ds)).collect()
            ]
            df, note = accuracy_frame(spark, spec, ds, metrics)
            if df is None:
                results.append(_skipped(kind, note))
                continue
            results.append(validate_frame(df, suites[kind], kind, context, note))
            continue
        path = tables.landed(RAW_KINDS[kind]) if kind in RAW_KINDS else tables.output(output_variant)
        if not delta_io.table_exists(spark, path):
            results.append(_skipped(kind, f"table missing ({path})"))
            continue
        df = prepare_frame(spark.read.format("delta").load(path).where(F.col("ds") == F.lit(ds)), spec, kind)
        # GX runs a Spark job or two per metric over the same slice: one cached partition
        # keeps each of them a single task (a ds partition is small; gates run once a day).
        df = df.coalesce(1).persist()
        try:
            n = df.count()
            label = kind if kind != "join_output" or output_variant == "stream" else f"{kind}[{output_variant}]"
            results.append(validate_frame(df, suites[kind], label, context, f"{n} rows"))
        finally:
            df.unpersist()
    if from_files:
        results = _with_drift_hint(results, spec, suites_dir or EXPECTATIONS_DIR)
    for r in results:
        (log.info if r.success is not False else log.warning)("%s", r.summary)
    return results


def _with_drift_hint(results: list[GateResult], spec: JoinSpec, root: str | Path) -> list[GateResult]:
    """A failed gate whose suite file no longer matches the spec (a changed schema, corrections
    turned on) says so: the fix is regenerating the suite, not the data."""
    if not any(r.success is False for r in results):
        return results
    drift = set(suites_out_of_sync(spec, root))
    hint = "; its suite differs from the spec: `joinshift quality write-suites --spec <spec>` regenerates it"
    return [
        replace(r, summary=r.summary + hint) if r.success is False and r.suite.split("[")[0] in drift else r
        for r in results
    ]


def gates_path(spec: JoinSpec, s: Settings | None = None) -> str:
    """The gate results table, beside ``match_metrics``."""
    from jobs.storage.tables import Tables

    return Tables.of(spec, s)._t(GATES_TABLE)


def write_gate_results(
    spark: SparkSession, spec: JoinSpec, ds: date, results: Sequence[GateResult], s: Settings | None = None
) -> str:
    """Replace the ds partition of the gate results table with one row per suite; returns its path."""
    from jobs.storage import delta_io

    now = datetime.now(UTC)
    rows = [
        (ds, spec.pipeline, r.suite, r.success, r.evaluated, r.failed, r.summary, json.dumps(r.failures), now)
        for r in results
    ]
    path = gates_path(spec, s)
    delta_io.replace_partitions(spark.createDataFrame(rows, GATE_COLUMNS), path, {"ds": [ds]})
    return path


def assert_gates(results: Sequence[GateResult], *, allow_skipped: bool = True) -> None:
    """Raise :class:`GateFailed` (what fails an Airflow task) if a gate failed (or was skipped
    and ``allow_skipped`` is False); the message is the summaries of those gates."""
    bad = [r for r in results if r.success is False or (r.skipped and not allow_skipped)]
    if bad:
        raise GateFailed(
            f"{len(bad)} of {len(results)} data quality gate"
            f"{'s' if len(results) != 1 else ''} failed:\n" + "\n".join(r.summary for r in bad)
        )


# ---------------------------------------------------------------- CLI


__all__ = [
    "GateFailed",
    "GateResult",
    "accuracy_frame",
    "assert_gates",
    "gates_path",
    "prepare_frame",
    "run_gates",
    "validate_frame",
    "write_gate_results",
]

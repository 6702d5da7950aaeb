"""Compare the outputs per ds: match rates (per day and per hour) and window-boundary deltas.

The outputs: the three batch baselines, the cut-off-free ``reference`` (the ceiling a streaming
join can reach) and the stream. *Match rate* = matched left events ÷ all landed left events of
the ds (paper §7.1; a batch table of the job's own is the batch variants' left events, the landed
ones stay the stream's); per hour, of the left events whose event time falls in that hour of the
spec's time zone (the hours of a ds add up to its day).
*Window-boundary deltas* (paper §6.5), per matched pair: how far the right event time is from
the window's lower bound (``r.t − (l.t + lower)``) and from its upper bound
(``(l.t + upper) − r.t``), in seconds; a p1 within 1 % of the window's span on one side says
"widen that side", one beyond a quarter of it says "this side can shrink"
(:func:`jobs.accuracy.recommend.bound_advice`, the one rule the report uses too).

Run one ds (``--hourly`` also prints the per-hour rates)::

    joinshift compare --ds 2026-11-20 [--hourly]
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.columns import REVISION, col_name, first_answers
from jobs.join.variants import FIRST_ANSWER, REFERENCE, VARIANTS, WINDOWED_VARIANTS
from jobs.settings import Settings
from jobs.spec import JoinSpec
from jobs.spec.shares import pct
from jobs.storage import batch_input, delta_io
from jobs.storage.tables import Tables

PERCENTILES = (0.01, 0.5, 0.99)
METRIC_COLUMNS = (
    "ds",
    "variant",
    "left_events",
    "matched_left",
    "match_rate",
    "pairs",
    "to_lower_p1",
    "to_lower_p50",
    "to_lower_p99",
    "to_upper_p1",
    "to_upper_p50",
    "to_upper_p99",
)


def boundary_deltas(pairs: DataFrame, spec: JoinSpec, *keep: str) -> DataFrame:
    """Matched pairs -> (ds, ``keep``..., to_lower_s, to_upper_s): seconds from each window bound."""
    lt = F.col(col_name("left", spec.left.event_time)).cast("double")
    rt = F.col(col_name("right", spec.right.event_time)).cast("double")
    return pairs.where(F.col(col_name("right", spec.right.id)).isNotNull()).select(
        "ds",
        *keep,
        (rt - (lt + spec.window.lower_seconds)).alias("to_lower_s"),
        ((lt + spec.window.upper_seconds) - rt).alias("to_upper_s"),
    )


def matched_pairs(outputs: dict[str, DataFrame], spec: JoinSpec) -> DataFrame:
    """Pure core: the matched pairs of every variant's output, one union: (variant, ds, hour of
    the left event time in the spec's zone, left id, to_lower_s, to_upper_s)."""
    left_id = col_name("left", spec.left.id)
    frames = [
        boundary_deltas(
            out.withColumn("hour", left_hour(spec, col_name("left", spec.left.event_time))), spec, "hour", left_id
        ).select(
            F.lit(variant).alias("variant"), "ds", "hour", F.col(left_id).alias("left_id"), "to_lower_s", "to_upper_s"
        )
        for variant, out in outputs.items()
    ]
    pairs = frames[0]
    for f in frames[1:]:
        pairs = pairs.unionByName(f)
    return pairs


def ds_metrics(
    left_events: DataFrame,
    pairs: DataFrame,
    variants: list[str],
    spec: JoinSpec,
    stream_left_events: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Pure core: (per day, per hour) metric rows of ``variants`` from the left events and their
    :func:`matched_pairs`: a row per variant and ds (and hour) of the left events, 0 matched where
    a variant matched none. Boundary-delta percentiles for the windowed variants only.

    Each variant's rate is over the left events it joined: ``left_events`` (the batch input), and
    for the stream's outputs ``stream_left_events`` when given (what landed from Kafka, when the
    batch side reads a table of the batch job's own, which may hold other events).

    Hours without left events have no row; the hours of a ds sum to its day."""
    spark = left_events.sparkSession
    hour = left_hour(spec, spec.left.event_time).alias("hour")

    def population(events: DataFrame, names: list[str]) -> DataFrame:
        named = spark.createDataFrame([(v,) for v in names], "variant string")
        return events.groupBy("ds", hour).agg(F.count("*").alias("left_events")).crossJoin(named)

    own = [v for v in variants if v in STREAM_OUTPUTS] if stream_left_events is not None else []
    per_hour = population(left_events, [v for v in variants if v not in own])
    if own:
        per_hour = per_hour.unionByName(population(stream_left_events, own))  # type: ignore[arg-type]
    hourly = (
        per_hour.join(
            pairs.groupBy("variant", "ds", "hour").agg(F.countDistinct("left_id").alias("matched_left")),
            ["variant", "ds", "hour"],
            "left",
        )
        .fillna(0, ["matched_left"])
        .select(
            "ds",
            "hour",
            "variant",
            "left_events",
            "matched_left",
            (F.col("matched_left") / F.col("left_events")).alias("match_rate"),
        )
    )
    # the percentiles in one aggregate per column and apart from the distinct count: together,
    # Spark expands every pair once per distinct aggregate (3 s against 0.8 s at 20 k left events)
    windowed = F.col("variant").isin(*WINDOWED_VARIANTS)
    at = F.array(*[F.lit(p) for p in PERCENTILES])
    spread = pairs.groupBy("variant", "ds").agg(
        *[F.percentile(F.when(windowed, F.col(f"{side}_s")), at).alias(side) for side in ("to_lower", "to_upper")]
    )
    matched = (
        pairs.groupBy("variant", "ds")
        .agg(F.countDistinct("left_id").alias("matched_left"), F.count("*").alias("pairs"))
        .join(spread, ["variant", "ds"])
        .select(
            "variant",
            "ds",
            "matched_left",
            "pairs",
            *[
                F.col(side)[i].alias(f"{side}_p{int(p * 100)}")
                for side in ("to_lower", "to_upper")
                for i, p in enumerate(PERCENTILES)
            ],
        )
    )
    daily = (
        per_hour.groupBy("variant", "ds")
        .agg(F.sum("left_events").alias("left_events"))
        .join(matched, ["variant", "ds"], "left")
        .fillna(0, ["matched_left", "pairs"])
        .select(
            "ds",
            "variant",
            "left_events",
            "matched_left",
            (F.col("matched_left") / F.col("left_events")).alias("match_rate"),
            "pairs",
            *METRIC_COLUMNS[6:],
        )
    )
    return daily, hourly


HOURLY_COLUMNS = ("ds", "hour", "variant", "left_events", "matched_left", "match_rate")
#: The outputs the stream wrote: their left events are what it read from Kafka.
STREAM_OUTPUTS = ("stream", FIRST_ANSWER)


def left_hour(spec: JoinSpec, column: str) -> F.Column:
    """Hour (0-23) of a left event-time column in the spec's time zone."""
    return F.hour(F.from_utc_timestamp(F.col(column), spec.timezone))


def compare_ds(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> list[dict]:
    """I/O shell: metrics for every variant whose output exists, written to the metrics table
    (per day) and the hourly metrics table (per hour); returns the day's rows.

    A daily variant still waiting for right days (the day-edge rule) gets no row for ``ds``:
    its partition is not there yet, which is not a 0 % match rate.

    The outputs are read once, into their matched pairs; both tables' rows are computed from
    those and written from the driver (a few dozen rows): one scan per output, not one per
    variant and table."""
    from jobs.steps.batch import waiting_variants

    tables = Tables.of(spec, s)
    left = batch_input.read_side(spark, tables, "left", [ds], made_by=f"joinshift land --ds {ds}")
    waiting = waiting_variants(spark, spec, ds, s)
    outputs = {
        variant: spark.read.format("delta").load(tables.output(variant)).where(F.col("ds") == F.lit(ds))
        for variant in VARIANTS
        if variant not in waiting and delta_io.table_exists(spark, tables.output(variant))
    }
    if "stream" in outputs and REVISION in outputs["stream"].columns:  # late corrections: the first answers too
        outputs[FIRST_ANSWER] = first_answers(outputs["stream"], spec)
    if not outputs:
        raise delta_io.MissingInput(
            f"no join output for pipeline {spec.pipeline} on ds {ds} yet: run joinshift batch --ds {ds} "
            "(and the stream) first"
        )
    stream_left = None
    if (
        spec.left.batch_table is not None
        and "stream" in outputs
        and delta_io.table_exists(spark, tables.landed("left"))
    ):
        stream_left = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == F.lit(ds))
        stream_left = None if stream_left.isEmpty() else stream_left  # not landed: the table (no rate at all else)
    if spec.left.batch_table is not None and stream_left is None:  # the stream rated over the table: its events only
        table_ids = F.broadcast(left.select(F.col(spec.left.id).alias(col_name("left", spec.left.id))))
        for v in set(STREAM_OUTPUTS) & set(outputs):
            outputs[v] = outputs[v].join(table_ids, col_name("left", spec.left.id), "left_semi")
    pairs = matched_pairs(outputs, spec).persist()
    try:
        daily, hourly = ds_metrics(left, pairs, list(outputs), spec, stream_left)
        computed_at = F.current_timestamp().alias("computed_at")
        day_rows, hour_rows = daily.select("*", computed_at).collect(), hourly.select("*", computed_at).collect()
    finally:
        pairs.unpersist()
    for rows, frame, path in (
        (hour_rows, hourly, tables.match_metrics_hourly),
        (day_rows, daily, tables.match_metrics),
    ):
        schema = frame.select("*", F.current_timestamp().alias("computed_at")).schema
        delta_io.replace_partitions(spark.createDataFrame(rows, schema), path, {"ds": [ds]})
    return sorted((r.asDict() for r in day_rows), key=lambda r: r["variant"])


def read_hourly(spark: SparkSession, spec: JoinSpec, ds_list: list[date], s: Settings | None = None) -> list[dict]:
    """The hourly metrics rows of some ds (what ``joinshift compare --hourly`` prints)."""
    path = Tables.of(spec, s).match_metrics_hourly
    if not delta_io.table_exists(spark, path):
        return []
    rows = delta_io.read_table(spark, path).where(F.col("ds").isin(ds_list)).orderBy("ds", "hour", "variant")
    return [r.asDict() for r in rows.collect()]


def summary_rows(metrics: list[dict], baseline: str = "batch_1d_windowed") -> list[dict]:
    """One row per ds: every variant's match rate; the stream's gap in pp to the windowed
    baseline, to ``baseline`` (the spec's) and to the reference; the p99 deltas of windowed variants."""
    by_ds: dict[date, dict] = {}
    for m in metrics:
        row = by_ds.setdefault(m["ds"], {"ds": m["ds"]})
        row[m["variant"]] = m["match_rate"]
        if m["variant"] in WINDOWED_VARIANTS:
            row[f"{m['variant']}_to_lower_p99"] = m["to_lower_p99"]
            row[f"{m['variant']}_to_upper_p99"] = m["to_upper_p99"]
    for row in by_ds.values():
        for name, other in (("windowed", "batch_1d_windowed"), ("baseline", baseline), ("reference", REFERENCE)):
            if row.get("stream") is not None and row.get(other) is not None:
                row[f"stream_minus_{name}_pp"] = 100 * (row["stream"] - row[other])
    return [by_ds[d] for d in sorted(by_ds)]


def _dur(v: float | None) -> str:
    if v is None:
        return "—"
    v = float(v)
    return f"{v / 60:.1f}m" if abs(v) >= 60 else f"{v:.0f}s"


def _pp(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}"


def render_table(metrics: list[dict], baseline: str = "batch_1d_windowed", runs: dict[str, dict] | None = None):
    """The comparison as a rich Table (what the demo and ``joinshift compare`` print): the stream's
    gap to the spec's baseline and to the reference (the ceiling with no daily cut-off).

    ``runs`` (``jobs.storage.stream_runs.read_runs``): how each ds's stream output was produced;
    its label (a backlog run's rate is an upper bound) is the caption's when every ds has the same,
    else a column.
    """
    from rich.table import Table

    days = [str(r["ds"]) for r in summary_rows(metrics, baseline)]
    labels = {d: _run_label(runs.get(d)) for d in days} if runs is not None else {}
    one_label = len(set(labels.values())) == 1
    caption = [f"stream − {baseline} (the spec's baseline) and stream − reference, in percentage points"]
    if runs is not None and one_label:
        caption.append(f"stream run: {next(iter(labels.values()))}")
    t = Table(
        title="match rate per ds (matched left ÷ left) and the stream's window-boundary deltas",
        caption="; ".join(caption),
    )
    # the stream's first answers beside its final ones, where late corrections amended some
    shown = [*VARIANTS, *([FIRST_ANSWER] if any(m["variant"] == FIRST_ANSWER for m in metrics) else [])]
    heads = [v if v != FIRST_ANSWER else "stream\nfirst\nanswer" for v in shown]
    # two-line headers keep the table inside a terminal's width
    for h in ("ds", *heads, "vs\nbaseline\n(pp)", "vs\nreference\n(pp)", "p99 to\nlower", "p99 to\nupper"):
        t.add_column(h, justify="right")
    if runs is not None and not one_label:
        t.add_column("stream run", justify="left")
    for r in summary_rows(metrics, baseline):
        cells = [
            str(r["ds"]),
            *(pct(r.get(v)) for v in shown),
            _pp(r.get("stream_minus_baseline_pp")),
            _pp(r.get("stream_minus_reference_pp")),
            _dur(r.get("stream_to_lower_p99")),
            _dur(r.get("stream_to_upper_p99")),
        ]
        if runs is not None and not one_label:
            cells.append(labels[str(r["ds"])])
        t.add_row(*cells)
    return t


def _run_label(run: dict | None) -> str:
    from jobs.storage.stream_runs import rate_label

    return rate_label(run) or (run or {}).get("kind", "unknown")


def render_hourly_table(rows: list[dict]):
    """Per-hour match rates as a rich Table: one row per ds and hour, one column per variant."""
    from rich.table import Table

    t = Table(title="match rate per hour of the left event time (matched left ÷ left)")
    present = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    for h in ("ds", "hour", "left events", *present):
        t.add_column(h, justify="right")
    by_hour: dict[tuple, dict] = {}
    for r in rows:
        by_hour.setdefault((r["ds"], r["hour"]), {})[r["variant"]] = r
    for (ds, hour), vs in sorted(by_hour.items()):
        n = next(iter(vs.values()))["left_events"]
        t.add_row(str(ds), f"{hour:02d}", str(n), *(pct(vs[v]["match_rate"]) if v in vs else "—" for v in present))
    return t

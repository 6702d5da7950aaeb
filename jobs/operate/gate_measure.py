"""The cut-over gate's measurements of one ds, from the tables the pipeline already writes.

* match rates: the ``match_metrics`` table (``joinshift compare`` / ``joinshift_compare``);
* unexplained misses: the miss account (:func:`unexplained_misses`, the one place it is read);
* lost rows: landed left events of the ds that are in neither the stream's output nor a count
  (rows the stream's watermark dropped are counted: progress log, miss account). Bad records never
  land (they are in the quarantine table), so every landed left event must be accounted for. For
  an inner join only left events the stream's window finds a right event for (among the right
  events it did not drop as late) are expected in the output;
* p99 latency: ``emitted_at`` - the row's latest event time over the day's first answers
  (:func:`jobs.join.columns.output_latency_s`), by the p99 rule the recommendation predicts and
  verifies with, when the stream's output has an ``emitted_at`` column (a paced replay writes
  it); otherwise "not measured";
* restarts: the supervisor's health samples of the day whose state made it restart (``exited``,
  ``stalled``); no samples: the stream is not supervised, "not measured".
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from zoneinfo import ZoneInfo

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.columns import EMITTED_AT, col_name
from jobs.operate.gate import Measurements
from jobs.operate.health import health_log
from jobs.settings import Settings
from jobs.spec import JoinSpec, JoinType
from jobs.storage import delta_io
from jobs.storage.stream_runs import run_of
from jobs.storage.tables import Tables

#: Health states after which the supervisor restarts the stream.
RESTART_STATES = ("exited", "stalled")
#: The stream output's column with the time a row was written (added by the paced replay).


def unexplained_misses(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> int:
    """Left events the baseline matched and the stream did not, for no reason the account names.

    The one place the gate reads the miss account: its ``unexplained`` misses (a baseline match
    whose left event did not land on the ds included) and its ``not_yet_processed`` ones (the
    compare DAG runs once the stream is done with the day, so unread is unexplained).
    """
    from jobs.accuracy.attribution import attribute_misses

    account = attribute_misses(spark, spec, ds, s=s, samples=0)["account"]
    return int(account["unexplained"]) + int(account["not_yet_processed"])


def match_rates(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> dict[str, tuple]:
    """variant -> (left events, match rate) of the ds from ``match_metrics``."""
    path = Tables.of(spec, s).match_metrics
    if not delta_io.table_exists(spark, path):
        return {}
    rows = delta_io.read_table(spark, path).where(F.col("ds") == F.lit(ds)).collect()
    return {r.variant: (r.left_events, r.match_rate) for r in rows}


def lost_left_events(
    spark: SparkSession, spec: JoinSpec, ds: date, output: DataFrame, s: Settings | None = None
) -> tuple[int, int]:
    """(lost, dropped by the watermark) among the ds's landed left events."""
    from jobs.accuracy.attribution import reach_days, stream_view
    from jobs.join.conditions import match_condition
    from jobs.storage.progress import JOIN_QUERY, read_progress

    tables = Tables.of(spec, s)
    progress = read_progress(tables.progress_log(JOIN_QUERY))
    landed_l = delta_io.read_table(spark, tables.landed("left")).where(F.col("ds") == F.lit(ds))
    first, last = reach_days(spec, ds)  # a window over a day reaches further than ds ± 1
    landed_r = delta_io.read_table(spark, tables.landed("right")).where(F.col("ds").between(F.lit(first), F.lit(last)))
    left, right = stream_view(spark, spec, landed_l, landed_r, progress)
    lid = spec.left.id
    emitted = output.select(F.col(col_name("left", lid)).alias(lid)).distinct()
    expected = left.where(~F.col("_dropped_late"))
    if spec.join.type == JoinType.inner:
        lcols = [F.col(c).alias(col_name("left", c)) for c in spec.left.schema_]
        rcols = [F.col(c).alias(col_name("right", c)) for c in spec.right.schema_]
        findable = (
            expected.select(*lcols)
            .join(right.where(~F.col("_dropped_late")).select(*rcols), match_condition(spec))
            .select(F.col(col_name("left", lid)).alias(lid))
            .distinct()
        )
        expected = expected.join(findable, lid, "left_semi")
    lost = expected.select(lid).distinct().join(emitted, lid, "left_anti").count()
    late = left.where(F.col("_dropped_late")).count()
    return int(lost), int(late)


def latency_p99_s(output: DataFrame, spec: JoinSpec) -> float | None:
    """p99 output latency (s) of the day's first answers, by the rule the recommendation predicts
    and verifies with (:func:`jobs.accuracy.tradeoff.p99`); None without the column or rows."""
    from jobs.accuracy.tradeoff import p99
    from jobs.accuracy.verify import first_answer_latencies

    if EMITTED_AT not in output.columns:
        return None
    v = p99(first_answer_latencies(output, spec))
    return None if math.isnan(v) else v


def restarts_of_day(spec: JoinSpec, ds: date, s: Settings | None = None) -> int | None:
    """Health samples of the ds (in the spec's zone) that triggered a restart; None if none at all."""
    p = health_log(spec, s)
    if not p.exists():
        return None
    tz = ZoneInfo(spec.timezone)
    n, seen = 0, False
    for line in p.read_text().splitlines():
        try:
            row = json.loads(line)
            at = datetime.fromisoformat(str(row["sampled_at"]).replace("Z", "+00:00")).astimezone(tz)
        except (ValueError, KeyError, TypeError):
            continue
        if at.date() != ds:
            continue
        seen = True
        n += row.get("state") in RESTART_STATES
    return n if seen else None


def measure_day(spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None) -> Measurements:
    """Everything the SLO needs for one ds; what cannot be measured is None with a note why."""
    tables = Tables.of(spec, s)
    notes: dict[str, str] = {}
    rates = match_rates(spark, spec, ds, s)
    baseline = spec.accuracy.baseline
    left_events = (rates.get("stream") or rates.get(baseline) or (None, None))[0]
    if "stream" not in rates or baseline not in rates:
        missing = [v for v in ("stream", baseline) if v not in rates]
        notes["match_rate"] = f"no match metrics for {', '.join(missing)} on {ds} (joinshift compare --ds {ds})"
    out_path = tables.output("stream")
    if not delta_io.table_exists(spark, out_path) or not delta_io.table_exists(spark, tables.landed("left")):
        for c in ("unexplained_misses", "lost_rows", "latency_p99"):
            notes[c] = f"no stream output or landed left events for {ds}"
        return Measurements(ds, left_events, restarts=restarts_of_day(spec, ds, s), notes=notes)
    output = delta_io.read_table(spark, out_path).where(F.col("ds") == F.lit(ds))
    lost, late = lost_left_events(spark, spec, ds, output, s)
    unexplained: int | None = None
    try:
        unexplained = unexplained_misses(spark, spec, ds, s)
    except (delta_io.MissingInput, ValueError) as e:  # the baseline's output is missing (batch retired or not run)
        notes["unexplained_misses"] = f"miss account unavailable: {e}"
    latency = latency_p99_s(output, spec)
    if latency is None:
        notes["latency_p99"] = f"not measured: the stream output has no {EMITTED_AT} column"
    return Measurements(
        ds=ds,
        left_events=left_events,
        stream_rate=(rates.get("stream") or (None, None))[1],
        baseline_rate=(rates.get(baseline) or (None, None))[1],
        unexplained=unexplained,
        lost=lost,
        late_dropped=late,
        latency_p99_s=latency,
        restarts=restarts_of_day(spec, ds, s),
        stream_run=(run_of(spec, ds, s) or {}).get("kind"),
        notes=notes,
    )

"""Why the stream missed what the batch found: which records the watermark dropped, and when.

Spark's stream-stream join drops an input row whose event time is at or behind the watermark in
force for the micro-batch that reads it (``numRowsDroppedByWatermark``). The progress log
(``ProgressRecorder``) has, per micro-batch, the watermark and the Kafka offset range read from
every partition. Joined with the landed tables (which carry each record's partition and offset),
that tells for every record the micro-batch that read it and whether the watermark dropped it.

The paced engine (``streaming.engine: paced``) judges by the right stream's PT its micro-batch ran
with (the ``@paced`` entry of its end offset) instead: a left event is late when that PT had passed
its window's end when it was read (closed at once with what was buffered: ``left_late_closed``),
and a right event is late for a left event when it was read after that left event's window closed
(``right_late_dropped``, or too late to be its match).

On top of that, the *account* of a ds against a baseline: with N landed left events, S the left
events the stream matched and B those the baseline matched, ``stream − baseline = (|S∖B| − |B∖S|) / N``
exactly, split into terms that add up to it::

    stream − baseline = cut-off gain − left-late loss − right-late loss − other

Run one ds::

    joinshift attribute --ds 2026-11-20 --baseline batch_1d_1d
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date, timedelta

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, col_name
from jobs.join.conditions import match_condition
from jobs.join.records import arrival_ds
from jobs.join.variants import VARIANTS, right_days, shortest_day_s
from jobs.spec import Engine, JoinSpec
from jobs.steps.replay_live import ARRIVALS_KEY  # a replay-as-live batch's record-time range
from jobs.storage.checkpoints import kafka_offsets
from jobs.storage.progress import batch_watermark_ms


def latest_batches(progress: list[dict]) -> dict[tuple[int, int], dict]:
    """Each micro-batch's last report, keyed by (checkpoint, batch id): the checkpoint is the order
    its query id first appears in the log. A replay's fresh checkpoint numbers its batches from 0
    again, so a batch id alone named two batches, and the later one hid the earlier one's offsets.
    A re-run micro-batch (after a crash: the same query id) reads the same offsets with the same
    watermark, so its last report wins."""
    order: dict[str | None, int] = {}
    latest: dict[tuple[int, int], dict] = {}
    for p in progress:
        latest[(order.setdefault(p.get("id"), len(order)), int(p["batchId"]))] = p
    return latest


def batch_offset_ranges(batches: dict[tuple[int, int], dict]) -> list[tuple[int, int, str, int, int, int, int]]:
    """(checkpoint, batch_id, topic, partition, start_offset, end_offset, watermark_ms) per
    micro-batch of :func:`latest_batches`."""
    rows = []
    for (run, batch_id), p in sorted(batches.items()):
        wm = batch_clock(p)
        for src in p.get("sources", []):
            end = kafka_offsets(src.get("endOffset"))
            start = kafka_offsets(src.get("startOffset"))
            for topic, parts in end.items():
                for part, end_off in parts.items():
                    start_off = start.get(topic, {}).get(part, 0)
                    if end_off > start_off:
                        rows.append((run, batch_id, topic, int(part), int(start_off), int(end_off), wm))
    return rows


def batch_clock(p: dict) -> int:
    """What a micro-batch judged lateness by (epoch ms, 0 before there is one): Spark's watermark,
    or for the paced engine the right stream's PT it ran with."""
    return batch_watermark_ms(p) or 0


def _with_slice_watermark(
    spark: SparkSession, landed: DataFrame, progress: list[dict], event_time: str, policy: str, late_after: int | None
) -> DataFrame:
    """:func:`with_processing_watermark` for a replay-as-live run: a record's micro-batch is the
    one whose slice of record time holds its arrival time."""
    latest = {p["batchId"]: p for p in progress}
    wm_of = {b: batch_clock(p) for b, p in latest.items()}
    rows = [
        (
            b,
            p[ARRIVALS_KEY]["start_ms"],
            p[ARRIVALS_KEY]["end_ms"],
            wm_of[b] if policy == "current" else wm_of.get(b - 1, 0),
        )
        for b, p in sorted(latest.items())
        if ARRIVALS_KEY in p
    ]
    rdf = spark.createDataFrame(rows, "_batch_id long, _start long, _end long, _watermark_ms long")
    arrival = F.unix_millis(F.col(ARRIVAL_TIME))
    out = landed.join(F.broadcast(rdf), (arrival >= F.col("_start")) & (arrival < F.col("_end")), "left")
    return _annotated(out, landed, event_time, late_after)


def _annotated(joined: DataFrame, landed: DataFrame, event_time: str, late_after: int | None) -> DataFrame:
    """Landed rows joined to their micro-batch (``_batch_id``, ``_watermark_ms``) -> the annotated
    view: the batch, its watermark (``_watermark_ms`` kept), and whether it made the row late: its
    event time plus ``late_after`` ms at or behind it (None: lateness is per pair, decided in
    :func:`classify_misses`: the paced engine's right rows)."""
    et_ms = F.unix_millis(F.col(event_time))
    late = (
        F.lit(False)
        if late_after is None
        else F.coalesce((F.col("_watermark_ms") > 0) & (et_ms + late_after <= F.col("_watermark_ms")), F.lit(False))
    )
    return joined.select(
        *landed.columns,
        "_batch_id",
        F.timestamp_millis("_watermark_ms").alias("_watermark"),
        "_watermark_ms",
        late.alias("_dropped_late"),
    )


#: Which watermark filters late rows in a micro-batch: the one the batch reports ("current"), or
#: the previous batch's ("previous": Spark's watermark for late events when stateful operators
#: are chained, as the native join chains its de-duplication and its join). The native engine's
#: attribution, the gate's lost rows and the lateness model use "previous" (the end-to-end test
#: holds the stream's output to it, and "current" does not explain it).
WATERMARK_POLICIES = ("current", "previous")
SPARK_POLICY = "previous"


def with_processing_watermark(
    spark: SparkSession,
    landed: DataFrame,
    topic: str,
    progress: list[dict],
    event_time: str,
    policy: str = SPARK_POLICY,
    late_after: int | None = 0,
) -> DataFrame:
    """Landed rows of ``topic`` + ``_batch_id``, ``_watermark`` and ``_dropped_late`` (see
    :func:`_annotated` for ``late_after``).

    Rows the stream has not read yet get null ``_batch_id`` and ``_dropped_late`` false.
    """
    if policy not in WATERMARK_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(WATERMARK_POLICIES)}, not {policy!r}")
    if any(ARRIVALS_KEY in p for p in progress):
        return _with_slice_watermark(spark, landed, progress, event_time, policy, late_after)
    batches = latest_batches(progress)
    ranges = [r for r in batch_offset_ranges(batches) if r[2] == topic]
    if policy == "previous":
        before = {(q, b + 1): batch_clock(p) for (q, b), p in batches.items()}  # each batch's previous one's
        ranges = [(q, b, t, part, st, en, before.get((q, b), 0)) for q, b, t, part, st, en, _ in ranges]
    schema = "_run int, _batch_id long, _topic string, _p int, _start long, _end long, _watermark_ms long"
    rdf = spark.createDataFrame(ranges, schema)
    cond = (F.col(PARTITION) == F.col("_p")) & (F.col(OFFSET) >= F.col("_start")) & (F.col(OFFSET) < F.col("_end"))
    out = landed.join(F.broadcast(rdf), cond, "left")
    if len({r[0] for r in ranges}) > 1:
        # a record two checkpoints read (an old run's, then a replay's): the latest one's batch, the
        # state the stream goes on from (an old run's decision on a left event it owned is not told apart)
        latest = Window.partitionBy(PARTITION, OFFSET).orderBy(F.col("_run").desc_nulls_last())
        out = out.withColumn("_nth", F.row_number().over(latest)).where(F.col("_nth") == 1)
    return _annotated(out, landed, event_time, late_after)


def stream_view(
    spark: SparkSession,
    spec: JoinSpec,
    left: DataFrame,
    right: DataFrame,
    progress: list[dict],
    policy: str = SPARK_POLICY,
) -> tuple[DataFrame, DataFrame]:
    """Both sides' landed rows annotated with what the streaming join did with them (the paced
    engine: by the right PT each micro-batch ran with, its own current one)."""
    if spec.streaming.engine == Engine.paced:
        upper = spec.window.upper_seconds * 1000
        own = "current"  # each micro-batch is judged by the PTs it ran with: its own
        return (
            with_processing_watermark(spark, left, spec.left.topic, progress, spec.left.event_time, own, upper),
            with_processing_watermark(spark, right, spec.right.topic, progress, spec.right.event_time, own, None),
        )
    return (
        with_processing_watermark(spark, left, spec.left.topic, progress, spec.left.event_time, policy),
        with_processing_watermark(spark, right, spec.right.topic, progress, spec.right.event_time, policy),
    )


#: The variants the stream can be held to (any but itself).
BASELINES = tuple(v for v in VARIANTS if v != "stream")

#: Why a left event the baseline matched has no stream match, checked in this order.
CAUSES = ("left_late", "late_right", "outside_window", "not_yet_processed", "other")


@dataclass(frozen=True)
class Account:
    """Stream − baseline for one ds, in left events (``pp`` turns a count into points of N).

    ``cutoff_gain − left_late − right_late − other == stream_matched − baseline_matched`` always:
    every left event in S∖B is a cut-off gain or an other gain, every one in B∖S is a loss of
    exactly one cause.
    """

    ds: str
    baseline: str
    left_events: int  # N: landed left events of the ds
    stream_matched: int  # |S|
    baseline_matched: int  # |B|
    cutoff_gain: int  # in S∖B through a right event that landed on a day the baseline does not read
    left_late: int  # in B∖S: the left event was behind the watermark
    right_late: int  # in B∖S: every window partner arrived behind the watermark
    outside_window: int  # in B∖S: the baseline's partners lie outside the stream's window
    not_yet_processed: int  # in B∖S: the stream has not read the partners yet
    unexplained: int  # in B∖S: no cause applies
    other_gain: int  # in S∖B for another reason than the cut-off; counts against "other"
    samples: dict[str, list[str]] = field(default_factory=dict)  # cutoff_gain / other_gain -> left ids

    @property
    def other(self) -> int:
        """Everything the three named terms do not cover (losses minus non-cut-off gains)."""
        return self.outside_window + self.not_yet_processed + self.unexplained - self.other_gain

    @property
    def difference(self) -> int:
        return self.stream_matched - self.baseline_matched

    def terms(self) -> list[tuple[str, int]]:
        """The signed terms in waterfall order; they sum to :attr:`difference`."""
        return [
            ("cutoff_gain", self.cutoff_gain),
            ("left_late", -self.left_late),
            ("right_late", -self.right_late),
            ("other", -self.other),
        ]

    def pp(self, n: int) -> float:
        """``n`` left events in percentage points of the ds's left events."""
        return 100 * n / self.left_events if self.left_events else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "other": self.other, "difference": self.difference}


@dataclass(frozen=True)
class Attribution:
    """The account of a ds and the miss causes behind its losses."""

    account: Account
    counts: dict[str, int]  # miss cause -> left events (CAUSES; gains are not causes)
    by_hour: list[dict[str, int]]  # {"hour": 0, cause: n, ...}, hour of the left event in the ds zone
    samples: dict[str, list[str]]  # miss cause -> a few left event ids

    def to_dict(self) -> dict:
        a = self.account
        return {
            "ds": a.ds,
            "baseline": a.baseline,
            "missed_by_stream": a.left_late + a.right_late + a.outside_window + a.not_yet_processed + a.unexplained,
            "counts": self.counts,
            "by_hour": self.by_hour,
            "samples": self.samples,
            "account": a.to_dict(),
        }


def check_baseline(name: str) -> str:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}: use one of {', '.join(BASELINES)}")
    return name


def matched_left_ids(output: DataFrame, spec: JoinSpec) -> DataFrame:
    """Distinct left ids (``_lid``) an output matched: the match-rate numerator of compare."""
    return (
        output.where(F.col(col_name("right", spec.right.id)).isNotNull())
        .select(F.col(col_name("left", spec.left.id)).alias("_lid"))
        .distinct()
    )


def behind_cutoff(spec: JoinSpec, baseline: str, ds: date):
    """On output rows: the right event landed on a day the baseline does not read for ``ds``
    (its daily cut-off); None for a baseline that reads every day the window reaches."""
    try:
        days = right_days(spec, baseline, ds)
    except ValueError:
        return None
    return ~arrival_ds(F.col(col_name("right", ARRIVAL_TIME)), spec.timezone).isin(*[F.lit(d) for d in days])


def classify_misses(spec: JoinSpec, missed_left: DataFrame, right: DataFrame) -> DataFrame:
    """Pure core: annotated left rows the stream missed (see :func:`stream_view`) and the annotated
    right rows -> one row per left event: ``event_id``, ``cause`` (one of CAUSES), ``hour``.

    Causes: ``left_late`` (the left event itself was behind the watermark), ``late_right`` (every
    right event in its window arrived after the watermark passed it), ``outside_window`` (the
    baseline's matches all lie outside the stream's window), ``not_yet_processed`` (the stream has
    not read the left event, or a partner in its window, yet), ``other``.
    """
    left_id, right_id = col_name("left", spec.left.id), col_name("right", spec.right.id)
    lcols = [F.col(c).alias(col_name("left", c)) for c in [*spec.left.schema_, "_dropped_late", "_batch_id"]]
    paced = spec.streaming.engine == Engine.paced
    kept = [*spec.right.schema_, "_batch_id", "_dropped_late", *(["_watermark_ms"] if paced else [])]
    rcols = [F.col(c).alias(col_name("right", c)) for c in kept]
    cand = missed_left.select(*lcols).join(right.select(*rcols), match_condition(spec), "left")
    late = F.col("right_dropped_late")
    if paced:  # read after the left event's window had closed (the right PT of its batch past the end)
        closes = F.unix_millis(F.col(col_name("left", spec.left.event_time))) + spec.window.upper_seconds * 1000
        late = late | F.coalesce(F.col(col_name("right", "_watermark_ms")) >= closes, F.lit(False))
    unread_left = F.col(col_name("left", "_batch_id")).isNull()  # the stream has not read the left event itself
    per_left = cand.groupBy(
        left_id, col_name("left", spec.left.event_time), "left_dropped_late", unread_left.alias("lu")
    ).agg(
        F.count(right_id).alias("n"),
        F.sum(F.when(late, 1).otherwise(0)).alias("n_late"),
        F.sum(F.when(F.col("right_batch_id").isNull() & F.col(right_id).isNotNull(), 1).otherwise(0)).alias("n_unread"),
    )
    cause = (
        F.when(F.col("left_dropped_late"), "left_late")
        .when(F.col("lu"), "not_yet_processed")
        .when(F.col("n") == 0, "outside_window")
        .when(F.col("n_late") == F.col("n"), "late_right")
        .when(F.col("n_unread") > 0, "not_yet_processed")
        .otherwise("other")
    )
    hour = F.hour(F.from_utc_timestamp(F.col(col_name("left", spec.left.event_time)), spec.timezone))
    return per_left.select(F.col(left_id).alias("event_id"), cause.alias("cause"), hour.alias("hour"))


def account_ds(
    spec: JoinSpec,
    ds: date,
    baseline: str,
    left: DataFrame,
    right: DataFrame,
    stream_out: DataFrame,
    baseline_out: DataFrame,
    samples: int = 10,
) -> Attribution:
    """Pure core: the account of ``ds`` against ``baseline`` and the causes of its losses.

    ``left``: the ds's landed left events, ``right``: landed right events of the days the window
    reaches, both annotated by :func:`stream_view`; ``stream_out`` / ``baseline_out``: the two
    outputs' rows of the ds.
    """
    left_id = col_name("left", spec.left.id)
    s_ids, b_ids = matched_left_ids(stream_out, spec), matched_left_ids(baseline_out, spec)
    missed = b_ids.join(s_ids, "_lid", "left_anti")
    missed_left = left.join(missed, left[spec.left.id] == missed["_lid"]).drop("_lid")
    rows = classify_misses(spec, missed_left, right).collect()

    cut = behind_cutoff(spec, baseline, ds)
    # S (with whether a match crossed the baseline's cut-off) beside B: |S|, |B|, |B∖S| and the
    # rows of S∖B in one job, not four
    by_left = (
        stream_out.where(F.col(col_name("right", spec.right.id)).isNotNull())
        .groupBy(F.col(left_id).alias("_lid"))
        .agg((F.max(cut) if cut is not None else F.lit(False)).alias("_cut"))
    )
    sides = by_left.withColumn("_s", F.lit(True)).join(b_ids.withColumn("_b", F.lit(True)), "_lid", "full_outer")
    tally = sides.agg(
        F.count("_s").alias("n_s"),
        F.count("_b").alias("n_b"),
        F.count(F.when(F.col("_s").isNull(), True)).alias("n_missed"),
        F.collect_list(F.when(F.col("_b").isNull(), F.struct("_lid", "_cut"))).alias("gains"),
    ).collect()[0]  # a global aggregation: one row
    gains = tally["gains"]
    n_s, n_b, n_missed = tally["n_s"], tally["n_b"], tally["n_missed"]
    n_left = left.select(spec.left.id).distinct().count()  # landed ids are unique: compare's N

    counts = {c: 0 for c in CAUSES}
    by_hour = {h: {c: 0 for c in CAUSES} for h in range(24)}
    sample_ids: dict[str, list[str]] = {c: [] for c in CAUSES}
    for r in rows:
        counts[r.cause] += 1
        by_hour[r.hour][r.cause] += 1
        if len(sample_ids[r.cause]) < samples:
            sample_ids[r.cause].append(r.event_id)
    cut_ids = sorted(str(r._lid) for r in gains if r._cut)
    other_ids = sorted(str(r._lid) for r in gains if not r._cut)
    account = Account(
        ds=str(ds),
        baseline=baseline,
        left_events=n_left,
        stream_matched=n_s,
        baseline_matched=n_b,
        cutoff_gain=len(cut_ids),
        left_late=counts["left_late"],
        right_late=counts["late_right"],
        outside_window=counts["outside_window"],
        not_yet_processed=counts["not_yet_processed"],
        # a baseline match whose left event is not among the landed ones cannot be classified
        unexplained=counts["other"] + n_missed - len(rows),
        other_gain=len(other_ids),
        samples={k: ids[:samples] for k, ids in (("cutoff_gain", cut_ids), ("other_gain", other_ids)) if ids},
    )
    # those unclassified misses are "other" too: the causes add up to every miss (B∖S)
    counts["other"] = account.unexplained
    return Attribution(
        account=account,
        counts=counts,
        by_hour=[{"hour": h, **by_hour[h]} for h in range(24)],
        samples={c: ids for c, ids in sample_ids.items() if ids},
    )


def reach_days(spec: JoinSpec, ds: date) -> tuple[date, date]:
    """First and last arrival day of right events that can sit in the window of a left of ``ds``
    (a day of 23 h in a zone with daylight saving: :func:`jobs.join.variants.shortest_day_s`)."""
    day = shortest_day_s(spec.timezone)
    before = max(1, -(-max(0, -spec.window.lower_seconds) // day))
    after = max(1, -(-max(0, spec.window.upper_seconds) // day))
    return ds - timedelta(days=int(before)), ds + timedelta(days=int(after))


def attribute_misses(
    spark: SparkSession, spec: JoinSpec, ds: date, *, baseline: str | None = None, s=None, samples: int = 10
) -> dict:
    """I/O shell: :func:`account_ds` over the tables, plus the ds's quarantined records (missed
    by batch and stream alike, counted apart). Raises ValueError for an unknown baseline or one
    whose output does not exist yet."""
    from jobs.storage import delta_io
    from jobs.storage.progress import JOIN_QUERY, read_progress
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    baseline = check_baseline(baseline or spec.accuracy.baseline)
    for variant in ("stream", baseline):
        if not delta_io.table_exists(spark, tables.output(variant)):
            made_by = "joinshift stream" if variant == "stream" else f"joinshift batch --ds {ds} --variant {variant}"
            raise delta_io.MissingInput(f"no {variant} output for pipeline {spec.pipeline} yet: run {made_by} first")
    progress = read_progress(tables.progress_log(JOIN_QUERY))
    first, last = reach_days(spec, ds)
    land = f"joinshift land --ds {ds}"
    landed_l = delta_io.read_table(spark, tables.landed("left"), made_by=land).where(F.col("ds") == F.lit(ds))
    landed_r = delta_io.read_table(spark, tables.landed("right"), made_by=land).where(
        F.col("ds").between(F.lit(first), F.lit(last))
    )
    left, right = stream_view(spark, spec, landed_l, landed_r, progress)

    def output(variant: str) -> DataFrame:
        return delta_io.read_table(spark, tables.output(variant)).where(F.col("ds") == F.lit(ds))

    left = left.cache()
    try:
        result = account_ds(spec, ds, baseline, left, right, output("stream"), output(baseline), samples)
    finally:
        left.unpersist()
    quarantined = {}
    if delta_io.table_exists(spark, tables.quarantine):
        quarantined = {
            r["stream"]: r["n"]
            for r in spark.read.format("delta")
            .load(tables.quarantine)
            .where((F.col("ds") == F.lit(ds)) & (F.col("stage") == "landing"))
            .groupBy("stream")
            .agg(F.count("*").alias("n"))
            .collect()
        }
    return {**result.to_dict(), "quarantined": quarantined}

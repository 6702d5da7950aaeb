"""The streaming replacement: a Spark Structured Streaming event-time interval join from Kafka.

``l.key = r.key AND r.t BETWEEN l.t + lower AND l.t + upper`` with each side's watermark from the
spec, inner or left outer, into a Delta table partitioned by the left event's *arrival* ds (what
the landing job assigns), so stream and batch are compared on the same left population.

Exactly-once into Delta, by the cheapest guard each case needs:

* a micro-batch re-run after a crash: each batch's commit is stamped with (the checkpoint's query
  id, batch id), and a restarted process skips a batch already committed;
* a record its producer re-sent: each side drops repeated event ids within its watermark
  before the join (Spark's ``dropDuplicatesWithinWatermark``), counted in the progress log;
* a replay from a fresh checkpoint, and 1-to-1 output (first-arrived match per left event):
  an insert-only MERGE keyed by the output rows (left id, right id; left id for 1-to-1).

Two run modes from the same code::

    joinshift stream --available-now   # one increment: what Kafka holds now
    joinshift stream                   # continuous
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.join.columns import AMENDED_AT, EMITTED_AT, REVISION, col_name
from jobs.join.conditions import Handover, join_streams, output_keys, select_batch_rows
from jobs.join.paced_operator import STATE_LAYOUT, STATE_LAYOUTS, paced_join, split_counters
from jobs.join.paced_state import FolderDictionaries
from jobs.join.records import good_events, parse_records, quarantine_rows
from jobs.settings import Settings, settings
from jobs.spec import Cardinality, Engine, JoinSpec, parse_duration, recorded_spec
from jobs.spec.plan import plan
from jobs.steps.batch_gate import BatchGate
from jobs.storage import aligned_source, delta_io, fs, kafka
from jobs.storage.checkpoints import (
    PACED_LAYOUT_RECORD,
    SPEC_RECORD,
    STATE_STORE_PROVIDER,
    STATE_STORE_PROVIDERS,
    CheckpointError,
    batch_ids,
    checkpoint_query_id,
)
from jobs.storage.hold import CheckpointBusy, current_hold, describe_hold, stream_owner
from jobs.storage.progress import (
    JOIN_QUERY,
    QUARANTINE_QUERY,
    end_offsets_read,
    ensure_recorder,
    note_batch,
    query_name,
    read_progress,
    settle_log,
    watermark_ms,
)
from jobs.storage.spark import conf_for
from jobs.storage.stream_runs import BACKLOG, LIVE, LIVE_BACKLOG_INTERVALS, record_run
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.stream")

# ---------------------------------------------------------------- I/O shell


class JoinSink:
    """``foreachBatch`` writer of the join output, exactly once.

    1-to-n output from its own checkpoint is appended with Delta transaction ids (checkpoint's
    query id, batch id): a batch re-run after a crash is skipped. 1-to-1 output (the
    first-arrived match per left event, across micro-batches) and a replay's output (``owned_from``:
    rows the old run may already have written) need the table's keys, so they go through an
    insert-only MERGE keyed by the output rows, reading only the ds partitions the batch touches.

    Every row is stamped ``emitted_at``: ``clock()`` when given (replay-as-live: the end of the
    slice, the simulated now), else the micro-batch's wall time.
    """

    def __init__(
        self,
        spec: JoinSpec,
        tables: Tables,
        *,
        owned_from: Handover | None = None,
        on_batch: Callable[[int], None] | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        self.spec, self.tables, self.on_batch = spec, tables, on_batch
        self.clock = clock or (lambda: datetime.now(UTC))
        self.owned_from = owned_from  # a replay writes only the rows of the left events it owns
        self.path, self.keys = tables.output("stream"), output_keys(spec)
        self.paced = spec.streaming.engine == Engine.paced
        self.amends = spec.corrections.horizon is not None  # late corrections (paced engine only)
        # the paced operator emits one row per 1-to-1 left event: no table key needed for it
        one_to_one = spec.join.cardinality == Cardinality.one_to_one and not self.paced
        self.merge = owned_from is not None or one_to_one
        self.append = delta_io.BatchAppender(self.path, _query_id_of(tables.checkpoint(JOIN_QUERY)))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if not (self.paced or self.merge):
            # One action: Delta records no commit for an empty blind append (BASE_CONF), so a
            # batch with no rows needs no check first, nor a cache to compute it once for both
            # (BENCHMARKS, "Each micro-batch written in one action": 0.92x the time and CPU)
            self._append(self._stamped(select_batch_rows(batch, self.spec)), batch_id)
        else:
            self._write_checked(batch, batch_id)
        if self.on_batch:
            self.on_batch(batch_id)

    def _append(self, rows: DataFrame, batch_id: int) -> None:
        if not self.append(rows, batch_id):
            log.info("micro-batch %d was committed before a restart: skipped", batch_id)

    def _stamped(self, rows: DataFrame) -> DataFrame:
        return rows.withColumn(EMITTED_AT, F.lit(self.clock()).cast("timestamp"))

    def _write_checked(self, batch: DataFrame, batch_id: int) -> None:
        """The paced engine's rows (split from its counters), a MERGE, late corrections: more than
        one action on the batch, so it is computed once into Spark's cache."""
        if self.paced:  # its rows and its counters: the batch is computed once for both
            batch = batch.persist()
            rows, counts = split_counters(batch)
            note_batch(query_name(self.spec.pipeline, JOIN_QUERY), batch_id, {"paced": counts})
            if not self.amends:
                rows = rows.drop(REVISION)
        else:
            rows = select_batch_rows(batch, self.spec)
        rows = self._stamped(rows)
        if self.amends:  # a correction is stamped with when it was made
            rows = rows.withColumn(AMENDED_AT, F.when(F.col(REVISION) > 0, F.col(EMITTED_AT)))
        if self.owned_from is not None:  # the paced engine's guard; the native join leaves them out already
            rows = rows.where(self.owned_from.owns(self.spec))
        several = self.merge or self.amends  # more than one action on the rows: computed once
        if several:
            rows = rows.persist()
        try:
            first = rows.where(F.col(REVISION) == 0) if self.amends else rows
            if not self.merge:
                self._append(first, batch_id)  # no rows, no commit (BASE_CONF): no check needed
            elif not first.isEmpty():  # no MERGE, and no table made, from no rows
                delta_io.insert_new(first, self.path, self.keys)
            fixes = rows.where(F.col(REVISION) > 0) if self.amends else None
            if fixes is not None and not fixes.isEmpty():
                left_id, right_id = col_name("left", self.spec.left.id), col_name("right", self.spec.right.id)
                # the replaced non-match's emitted_at stays (when its left event was first answered),
                # and a re-run leaves a correction's amended_at as it was
                delta_io.amend(fixes, self.path, left_id, right_id, REVISION, keep=[EMITTED_AT, AMENDED_AT])
        finally:
            if several:
                rows.unpersist()
            if self.paced:
                batch.unpersist()


def _query_id_of(checkpoint: str) -> Callable[[], str]:
    """Read lazily: the metadata file exists once the query has started."""
    return functools.cache(lambda: checkpoint_query_id(checkpoint))


def _ensure_recorder(spark: SparkSession, spec: JoinSpec, tables: Tables) -> None:
    ensure_recorder(
        spark, {query_name(spec.pipeline, q): tables.progress_log(q) for q in (JOIN_QUERY, QUARANTINE_QUERY)}
    )


class CheckpointSpecMismatch(CheckpointError):
    """The spec changed in a way its checkpoint cannot continue (``joinshift plan`` says replay):
    the user's to fix, printed in one line."""


def guard_checkpoint_spec(spec: JoinSpec, checkpoint: str) -> None:
    """Refuse to run ``spec`` on a checkpoint built for a join it cannot continue (window, keys,
    join type, schema: the fields ``jobs.plan`` marks fresh-checkpoint-and-replay), instead of
    letting Spark silently mix the old state with the new join; else record ``spec`` as the one
    the checkpoint continues with."""
    cp, record = checkpoint, fs.join(checkpoint, SPEC_RECORD)
    if fs.exists(record) and batch_ids(fs.join(cp, "commits")):  # a checkpoint with no committed batch holds no state
        text = fs.read_text(record)
        built = recorded_spec(text)
        if built.streaming.engine == Engine.paced:
            layout = _paced_layout(cp, json.loads(text).get("streaming", {}).get("paced", {}))
            if layout != STATE_LAYOUT:
                raise CheckpointSpecMismatch(
                    f"checkpoint {cp} holds the paced operator's state as an earlier version kept it "
                    f"({STATE_LAYOUTS.get(layout, f'layout {layout}')}): rebuild the window with this version: "
                    f"joinshift replay --spec <this spec> --cutover <instant> (runbook change_the_window)"
                )
        blocking = plan(built, spec).blocking
        if blocking:
            fields = "; ".join(f"{c.field}: {c.old} -> {c.new}" for c in blocking)
            raise CheckpointSpecMismatch(
                f"checkpoint {cp} was built for a join this spec cannot continue ({fields}). Run the spec it "
                f"was built with, or rebuild the window for this one: joinshift replay --spec <this spec> "
                f"--cutover <instant> (runbook change_the_window)"
            )
    fs.write_text(record, spec.model_dump_json(by_alias=True))
    if spec.streaming.engine == Engine.paced:
        fs.write_text(fs.join(cp, PACED_LAYOUT_RECORD), str(STATE_LAYOUT))


def _paced_layout(checkpoint: str, recorded_paced: dict) -> int:
    """The paced state layout a checkpoint was written in (recorded since layout 3; before, told
    apart by whether its spec had shards)."""
    record = fs.join(checkpoint, PACED_LAYOUT_RECORD)
    if fs.exists(record):
        return int(fs.read_text(record).strip())
    return 2 if "shards" in recorded_paced else 1


def start_streaming_join(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    bootstrap: str,
    s: Settings | None = None,
    available_now: bool = False,
    trigger_interval: str | None = None,
    quarantine: bool = True,
    starting_offsets: dict[str, dict[str, int]] | None = None,
    owned_from: Handover | None = None,
    on_batch: Callable[[int], None] | None = None,
    clock: Callable[[], datetime] | None = None,
    drain: bool = False,
    gate: BatchGate | None = None,
) -> tuple[StreamingQuery, ...]:
    """Start the join query (and the quarantine query) from their checkpoints; return them.

    ``drain`` (the paced engine, a bounded run): once both topics are read, close every open window
    with what was read (:func:`jobs.storage.aligned_source.request_drain`)."""
    tables = Tables.of(spec, s)
    held = current_hold(spec, s)
    if held is not None and (held.get("failed") or held["pid"] != os.getpid()):
        raise CheckpointBusy(f"{spec.pipeline} is {describe_hold(held)}: start the stream when the hold ends")
    guard_checkpoint_spec(spec, tables.checkpoint(JOIN_QUERY))
    _ensure_recorder(spark, spec, tables)
    limit = spec.streaming.max_offsets_per_trigger

    def start_of(topic: str) -> str:
        if starting_offsets and topic in starting_offsets:
            return json.dumps({topic: starting_offsets[topic]})
        return "earliest"

    if spec.streaming.engine == Engine.paced:
        joined = _paced_stream(spark, spec, bootstrap, s, starting_offsets, drain)
    else:
        parsed = {
            side: parse_records(
                kafka.read_stream(spark, bootstrap, spec.side(side).topic, limit, start_of(spec.side(side).topic)),
                spec.side(side),
                spec,
            )
            for side in ("left", "right")
        }
        joined = join_streams(
            good_events(parsed["left"], spec.left), good_events(parsed["right"], spec.right), spec, left_from=owned_from
        )
    sink = JoinSink(spec, tables, owned_from=owned_from, on_batch=on_batch, clock=clock)

    # the state's partitions and store, the spec's whatever the user's conf: a query copies the
    # session's conf as it starts, so the process's own (its batch jobs') is back right after
    state_conf = {
        "spark.sql.shuffle.partitions": str(spec.streaming.shuffle_partitions),
        STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS[spec.streaming.state_store],
    }
    with conf_for(spark, state_conf):
        queries = [
            _with_trigger(
                joined.writeStream.queryName(query_name(spec.pipeline, JOIN_QUERY))
                .outputMode("append")
                .option("checkpointLocation", tables.checkpoint(JOIN_QUERY))
                .foreachBatch(gate.wrap(query_name(spec.pipeline, JOIN_QUERY), sink) if gate else sink),
                spec,
                available_now,
                trigger_interval,
            ).start()
        ]
    if quarantine:
        queries.append(
            start_quarantine(
                spark,
                spec,
                bootstrap=bootstrap,
                s=s,
                available_now=available_now,
                trigger_interval=trigger_interval,
                gate=gate,
            )
        )
    log.info(
        "streaming join %s started (%s), window %s, checkpoint %s",
        spec.pipeline,
        "availableNow" if available_now else "continuous",
        spec.window.label(),
        tables.checkpoint(JOIN_QUERY),
    )
    return tuple(queries)


PACED_SOURCE, DICTIONARIES = "paced_source", "dictionaries"


def paced_source_dir(spec: JoinSpec, s: Settings | None = None) -> str:
    """Where the paced engine's source keeps its estimators' snapshots and a drain request: beside
    the join's checkpoint on a local storage root, else on this machine (``local_root``)."""
    local = fs.local(Tables.of(spec, s).checkpoint(JOIN_QUERY))
    if local is not None:
        return str(local / PACED_SOURCE)
    return str((s or settings()).local_path(PACED_SOURCE, spec.pipeline))


def dictionaries_of(checkpoint: str) -> str | None:
    """The folder of the paced operator's compression dictionaries: beside a local checkpoint,
    where every executor reads them; None on an object store (its state is plain zstandard)."""
    local = fs.local(checkpoint)
    return str(local / PACED_SOURCE / DICTIONARIES) if local is not None else None


def _paced_stream(
    spark: SparkSession,
    spec: JoinSpec,
    bootstrap: str,
    s: Settings | None,
    starting_offsets: dict[str, dict[str, int]] | None,
    drain: bool,
) -> DataFrame:
    """The paced engine: both topics through the aligned source, the paper's operator per key."""
    state_dir = paced_source_dir(spec, s)
    if drain:
        aligned_source.request_drain(state_dir)
    else:
        aligned_source.clear_drain(state_dir)
    pacing = aligned_source.Pacing(
        bootstrap=bootstrap,
        spec_json=spec.model_dump_json(by_alias=True),
        state_dir=state_dir,
        starting={t: {str(p): int(o) for p, o in parts.items()} for t, parts in (starting_offsets or {}).items()},
    )
    aligned_source.register(spark)
    raw = spark.readStream.format(aligned_source.NAME).option("pacing", pacing.option()).load()
    dictionaries = dictionaries_of(Tables.of(spec, s).checkpoint(JOIN_QUERY))
    return paced_join(raw, spec, FolderDictionaries(dictionaries) if dictionaries else None)


def start_quarantine(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    bootstrap: str,
    s: Settings | None = None,
    available_now: bool = False,
    trigger_interval: str | None = None,
    gate: BatchGate | None = None,
) -> StreamingQuery:
    """The stream's bad records (both topics) to the quarantine table, keyed by Kafka position."""
    tables = Tables.of(spec, s)
    _ensure_recorder(spark, spec, tables)
    limit = spec.streaming.max_offsets_per_trigger
    left, right = (
        quarantine_rows(parse_records(kafka.read_stream(spark, bootstrap, st.topic, limit), st, spec), st, "stream")
        for st in (spec.left, spec.right)
    )
    bad = left.unionByName(right)

    # one Kafka position per row and no replay of this query: per-batch idempotence suffices
    append = delta_io.BatchAppender(tables.quarantine, _query_id_of(tables.checkpoint(QUARANTINE_QUERY)))

    def write_quarantine_batch(batch: DataFrame, batch_id: int) -> None:
        append(batch, batch_id)  # one action: a batch with no bad record commits nothing (BASE_CONF)

    name = query_name(spec.pipeline, QUARANTINE_QUERY)
    w = (
        bad.writeStream.queryName(name)
        .outputMode("append")
        .option("checkpointLocation", tables.checkpoint(QUARANTINE_QUERY))
        .foreachBatch(gate.wrap(name, write_quarantine_batch) if gate else write_quarantine_batch)
    )
    return _with_trigger(w, spec, available_now, trigger_interval).start()


def _with_trigger(writer, spec: JoinSpec, available_now: bool, interval: str | None):
    if available_now:
        return writer.trigger(availableNow=True)
    every = parse_duration(interval) if interval else spec.streaming.trigger_interval  # one duration grammar
    return writer.trigger(processingTime=f"{round(every.total_seconds() * 1000)} milliseconds")


def stream_watermark(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """The join query's latest event-time watermark (epoch ms), from its progress log."""
    return watermark_ms(read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY)))


def stream_lag(spec: JoinSpec, bootstrap: str, s: Settings | None = None) -> int | None:
    """Records in Kafka the join query has not read yet (None before its first micro-batch)."""
    progress = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if not progress:
        return None
    done = end_offsets_read(progress[-1])
    return kafka.lag(done, kafka.end_offsets(bootstrap, sorted(done)))


def run_increment(spark: SparkSession, spec: JoinSpec, *, bootstrap: str, s: Settings | None = None) -> dict:
    """One ``availableNow`` increment (what Airflow schedules every few minutes); skipped while a
    replay holds the pipeline."""
    held = current_hold(spec, s)
    if held is not None:
        log.info("%s is %s: increment skipped", spec.pipeline, describe_hold(held))
        return {"batches": 0, "last_batch": None, "skipped": describe_hold(held)}
    tables = Tables.of(spec, s)
    kind, days = _increment_kind(spec, bootstrap, tables)
    with stream_owner(spec, s, role="increment"):  # never beside the continuous process
        queries = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True)
        for q, query in zip(queries, (JOIN_QUERY, QUARANTINE_QUERY)):  # the order start_streaming_join returns
            q.awaitTermination()
            # the log of the query ("stream_join"), not of its running name ("<pipeline>.stream_join"),
            # which has none: waiting on that one cost every increment its 15 s timeout twice
            settle_log(tables.progress_log(query), q)
    progress = read_progress(tables.progress_log(JOIN_QUERY))
    if days:
        record_run(spec, days, kind, s=s)
    return {
        "batches": len(progress),
        "last_batch": progress[-1]["batchId"] if progress else None,
        "run": kind if days else None,
    }


def _increment_kind(spec: JoinSpec, bootstrap: str, tables: Tables) -> tuple[str, list]:
    """``live`` or ``backlog`` (stream_runs): backlog when the oldest record waiting arrived more
    than LIVE_BACKLOG_INTERVALS trigger intervals ago, so the increment's micro-batches each cover
    more arrival time than a live stream's would; and the arrival days it reads (spec timezone)."""
    from zoneinfo import ZoneInfo

    progress = read_progress(tables.progress_log(JOIN_QUERY))
    topics = [spec.left.topic, spec.right.topic]
    read = end_offsets_read(progress[-1]) if progress else {}
    oldest = kafka.oldest_unread(bootstrap, read, kafka.end_offsets(bootstrap, topics))
    if not oldest:
        return LIVE, []
    now = datetime.now(UTC)
    first = datetime.fromtimestamp(min(oldest.values()) / 1000, UTC)
    waiting = (now - first).total_seconds()
    kind = BACKLOG if waiting > LIVE_BACKLOG_INTERVALS * spec.streaming.trigger_interval.total_seconds() else LIVE
    tz = ZoneInfo(spec.timezone)
    d0, d1 = first.astimezone(tz).date(), now.astimezone(tz).date()
    return kind, [d0.fromordinal(o) for o in range(d0.toordinal(), d1.toordinal() + 1)]


def run_continuous(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    bootstrap: str,
    trigger_interval: str | None = None,
    s: Settings | None = None,
    stop: threading.Event | None = None,
) -> bool:
    """Run the join (and quarantine) queries until one ends, or until ``stop`` is set: then each
    query ends between its micro-batches (:class:`BatchGate`); True if stopped so. A failed query
    raises with its error.

    A start over records that waited longer than a live stream's micro-batches would cover marks
    the days it catches up on as ``backlog`` (their rate is an upper bound), else ``live``."""
    try:
        kind, days = _increment_kind(spec, bootstrap, Tables.of(spec, s))
    except Exception as exc:  # a label must never stop the stream (Kafka down: the query waits for it)
        log.warning("cannot tell whether %s starts over a backlog (%s): its run is not labelled", spec.pipeline, exc)
        kind, days = LIVE, []
    with stream_owner(spec, s, role="continuous"):
        if days:
            record_run(spec, days, kind, s=s)
        gate = BatchGate(stop) if stop is not None else None
        queries = start_streaming_join(
            spark, spec, bootstrap=bootstrap, s=s, trigger_interval=trigger_interval, gate=gate
        )
        stopped = False
        if gate is None:
            spark.streams.awaitAnyTermination()
        else:
            while not spark.streams.awaitAnyTermination(1) and not gate.requested.is_set():
                pass
            stopped = gate.requested.is_set()
            for q in queries if stopped else ():
                gate.stop(q)
    for q in queries:
        if q.exception():
            raise RuntimeError(f"streaming query {q.name} failed: {q.exception()}")
    return stopped

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

    python -m jobs.stream_join --spec include/specs/search_sessions.yaml --available-now   # increments
    python -m jobs.stream_join --spec include/specs/search_sessions.yaml                   # continuous
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from jobs import delta_io
from jobs.batch_join import col_name, first_arrived, key_condition, output_columns, prefixed, window_condition
from jobs.records import ARRIVAL_TIME, good_events, parse_records, quarantine_rows
from jobs.settings import Settings
from jobs.spec import Cardinality, JoinSpec, JoinType, format_duration, load_spec
from jobs.tables import Tables

log = logging.getLogger("joinshift.stream")

JOIN_QUERY, QUARANTINE_QUERY = "stream_join", "stream_quarantine"


# ---------------------------------------------------------------- pure core

def join_streams(left: DataFrame, right: DataFrame, spec: JoinSpec) -> DataFrame:
    """Typed left/right event streams -> output rows (same columns as the batch variants).

    Works on batch DataFrames too (the watermark is then a no-op), which is how tests pin it down.
    """
    lt, rt = col_name("left", spec.left.event_time), col_name("right", spec.right.event_time)
    lw = (prefixed(left, spec, "left").withWatermark(lt, f"{spec.left.watermark_seconds} seconds")
          .dropDuplicatesWithinWatermark([col_name("left", spec.left.id)]))
    rw = (prefixed(right, spec, "right").withWatermark(rt, f"{spec.right.watermark_seconds} seconds")
          .dropDuplicatesWithinWatermark([col_name("right", spec.right.id)]))
    how = "left_outer" if spec.join.type == JoinType.left_outer else "inner"
    return lw.join(rw, key_condition(spec) & window_condition(spec), how).select(*output_columns(spec))


def output_keys(spec: JoinSpec) -> list[str]:
    """What makes an output row unique: the pair, or the left event alone for 1-to-1."""
    left_id = col_name("left", spec.left.id)
    if spec.join.cardinality == Cardinality.one_to_one:
        return [left_id]
    return [left_id, col_name("right", spec.right.id)]


def select_batch_rows(batch: DataFrame, spec: JoinSpec) -> DataFrame:
    """Within one micro-batch, 1-to-1 keeps each left event's first-arrived match."""
    if spec.join.cardinality == Cardinality.one_to_one:
        return first_arrived(batch, spec)
    return batch


# ---------------------------------------------------------------- I/O shell

class JoinSink:
    """``foreachBatch`` writer of the join output, exactly once.

    1-to-n output from its own checkpoint is appended with Delta transaction ids (checkpoint's
    query id, batch id): a batch re-run after a crash is skipped. 1-to-1 output (the
    first-arrived match per left event, across micro-batches) and a replay's output (``owned_from``:
    rows the old run may already have written) need the table's keys, so they go through an
    insert-only MERGE keyed by the output rows, reading only the ds partitions the batch touches.
    """

    def __init__(self, spec: JoinSpec, tables: Tables, *, owned_from=None,
                 on_batch: Callable[[int], None] | None = None):
        self.spec, self.tables, self.on_batch = spec, tables, on_batch
        self.owned_from = owned_from  # a replay writes only left events that arrived from here on
        self.path, self.keys = tables.output("stream"), output_keys(spec)
        self.merge = owned_from is not None or spec.join.cardinality == Cardinality.one_to_one
        self.append = delta_io.BatchAppender(self.path, _query_id_of(tables.checkpoint(JOIN_QUERY)))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = select_batch_rows(batch, self.spec)
        if self.owned_from is not None:
            rows = rows.where(F.col(col_name("left", ARRIVAL_TIME)) >= F.lit(self.owned_from))
        rows = rows.persist()
        try:
            if rows.isEmpty():  # no empty Delta commit per no-data batch
                pass
            elif self.merge:
                delta_io.insert_new(rows, self.path, self.keys)
            elif not self.append(rows, batch_id):
                log.info("micro-batch %d was committed before a restart: skipped", batch_id)
        finally:
            rows.unpersist()
        if self.on_batch:
            self.on_batch(batch_id)


def checkpoint_query_id(checkpoint: str) -> str:
    """The streaming query's id, which Spark writes to ``<checkpoint>/metadata`` when it starts
    and keeps across restarts; a fresh checkpoint gets a new one."""
    return json.loads((Path(checkpoint) / "metadata").read_text().splitlines()[0])["id"]


def _query_id_of(checkpoint: str) -> Callable[[], str]:
    """Read lazily: the metadata file exists once the query has started."""
    return functools.cache(lambda: checkpoint_query_id(checkpoint))


def read_kafka_stream(spark: SparkSession, bootstrap: str, topic: str,
                      max_offsets_per_trigger: int | None = None,
                      starting_offsets: str = "earliest") -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


class ProgressRecorder(StreamingQueryListener):
    """Appends every micro-batch's progress (rates, state rows and memory, watermark, rows dropped
    by the watermark, source offsets) as a JSON line, the record restart tooling and reports read."""

    def __init__(self, paths: dict[str, str]):
        self._paths = paths  # query name -> jsonl path
        self._lock = threading.Lock()
        for p in paths.values():
            Path(p).parent.mkdir(parents=True, exist_ok=True)

    def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's callback names)
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        p = event.progress
        path = self._paths.get(p.name or "")
        if path:
            with self._lock, open(path, "a") as f:
                f.write(p.json.replace("\n", " ") + "\n")

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        if event.exception:
            log.error("streaming query %s failed: %s", event.id, event.exception)


_RECORDERS: dict[tuple[int, str], ProgressRecorder] = {}


def _ensure_recorder(spark: SparkSession, tables: Tables) -> None:
    """One listener per session and pipeline, however often queries are (re)started."""
    key = (id(spark), tables.progress_log(JOIN_QUERY))
    if key not in _RECORDERS:
        _RECORDERS[key] = ProgressRecorder({JOIN_QUERY: tables.progress_log(JOIN_QUERY),
                                            QUARANTINE_QUERY: tables.progress_log(QUARANTINE_QUERY)})
        spark.streams.addListener(_RECORDERS[key])


def read_progress(path: str) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


#: The spec a checkpoint was built with, kept inside it (so a backup carries it along).
SPEC_RECORD = "joinshift_spec.json"


class CheckpointSpecMismatch(RuntimeError):
    """The spec changed in a way its checkpoint cannot continue (``joinshift plan`` says replay)."""


def guard_checkpoint_spec(spec: JoinSpec, checkpoint: str) -> None:
    """Refuse to run ``spec`` on a checkpoint built for a join it cannot continue (window, keys,
    join type, schema: the fields ``jobs.plan`` marks fresh-checkpoint-and-replay), instead of
    letting Spark silently mix the old state with the new join; else record ``spec`` as the one
    the checkpoint continues with."""
    from jobs.checkpoint import CheckpointError, batch_ids, local_path
    from jobs.plan import plan

    try:
        cp = local_path(checkpoint)
    except CheckpointError:
        return  # remote storage: the guard needs a local folder
    record = cp / SPEC_RECORD
    if record.exists() and batch_ids(cp / "commits"):  # a checkpoint with no committed batch holds no state
        built = JoinSpec.model_validate_json(record.read_text())
        blocking = plan(built, spec).blocking
        if blocking:
            fields = "; ".join(f"{c.field}: {c.old} -> {c.new}" for c in blocking)
            raise CheckpointSpecMismatch(
                f"checkpoint {cp} was built for a join this spec cannot continue ({fields}). Run the spec it "
                f"was built with, or rebuild the window for this one: joinshift replay --spec <this spec> "
                f"--cutover <instant> (runbook change_the_window)")
    cp.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(spec.model_dump_json(by_alias=True))
    tmp.replace(record)


def start_streaming_join(spark: SparkSession, spec: JoinSpec, *, bootstrap: str,
                         s: Settings | None = None, available_now: bool = False,
                         trigger_interval: str | None = None, quarantine: bool = True,
                         starting_offsets: dict[str, dict[str, int]] | None = None,
                         owned_from=None,
                         on_batch: Callable[[int], None] | None = None) -> tuple[StreamingQuery, ...]:
    """Start the join query (and the quarantine query) from their checkpoints; return them."""
    from jobs.supervisor import current_hold

    tables = Tables.of(spec, s)
    held = current_hold(spec, s)
    if held is not None and held["pid"] != os.getpid():
        raise RuntimeError(f"{spec.pipeline} is held by pid {held['pid']} since {held.get('since')} "
                           f"({held.get('reason')}): its checkpoint is in use; start the stream when that ends")
    guard_checkpoint_spec(spec, tables.checkpoint(JOIN_QUERY))
    _ensure_recorder(spark, tables)
    spark.conf.set("spark.sql.shuffle.partitions", str(spec.streaming.shuffle_partitions))
    limit = spec.streaming.max_offsets_per_trigger

    def start_of(topic: str) -> str:
        if starting_offsets and topic in starting_offsets:
            return json.dumps({topic: starting_offsets[topic]})
        return "earliest"

    parsed = {side: parse_records(read_kafka_stream(spark, bootstrap, spec.side(side).topic, limit,
                                                    start_of(spec.side(side).topic)),
                                  spec.side(side), spec) for side in ("left", "right")}
    joined = join_streams(good_events(parsed["left"], spec.left), good_events(parsed["right"], spec.right), spec)
    sink = JoinSink(spec, tables, owned_from=owned_from, on_batch=on_batch)

    queries = [_with_trigger(
        joined.writeStream.queryName(JOIN_QUERY).outputMode("append")
        .option("checkpointLocation", tables.checkpoint(JOIN_QUERY))
        .foreachBatch(sink), spec, available_now, trigger_interval
    ).start()]
    if quarantine:
        queries.append(start_quarantine(spark, spec, bootstrap=bootstrap, s=s, available_now=available_now,
                                        trigger_interval=trigger_interval))
    log.info("streaming join %s started (%s), window %s, checkpoint %s", spec.pipeline,
             "availableNow" if available_now else "continuous", spec.window.label(), tables.checkpoint(JOIN_QUERY))
    return tuple(queries)


def start_quarantine(spark: SparkSession, spec: JoinSpec, *, bootstrap: str, s: Settings | None = None,
                     available_now: bool = False, trigger_interval: str | None = None) -> StreamingQuery:
    """The stream's bad records (both topics) to the quarantine table, keyed by Kafka position."""
    tables = Tables.of(spec, s)
    _ensure_recorder(spark, tables)
    limit = spec.streaming.max_offsets_per_trigger
    bad = None
    for side in ("left", "right"):
        stream = spec.side(side)
        rows = quarantine_rows(parse_records(read_kafka_stream(spark, bootstrap, stream.topic, limit), stream, spec),
                               stream, "stream")
        bad = rows if bad is None else bad.unionByName(rows)

    # one Kafka position per row and no replay of this query: per-batch idempotence suffices
    append = delta_io.BatchAppender(tables.quarantine, _query_id_of(tables.checkpoint(QUARANTINE_QUERY)))

    def write_quarantine_batch(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()  # two actions: do not read and parse Kafka twice
        try:
            if not batch.isEmpty():
                append(batch, batch_id)
        finally:
            batch.unpersist()

    w = (bad.writeStream.queryName(QUARANTINE_QUERY).outputMode("append")
         .option("checkpointLocation", tables.checkpoint(QUARANTINE_QUERY)).foreachBatch(write_quarantine_batch))
    return _with_trigger(w, spec, available_now, trigger_interval).start()


def _with_trigger(writer, spec: JoinSpec, available_now: bool, interval: str | None):
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=interval or f"{int(spec.streaming.trigger_interval.total_seconds())} seconds")


def stream_watermark(spec: JoinSpec, s: Settings | None = None) -> int | None:
    """The join query's latest event-time watermark (epoch ms), from its progress log."""
    from datetime import datetime

    for p in reversed(read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))):
        wm = (p.get("eventTime") or {}).get("watermark")
        if wm:
            return int(datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() * 1000)
    return None


def stream_lag(spec: JoinSpec, bootstrap: str, s: Settings | None = None) -> int | None:
    """Records in Kafka the join query has not read yet (None before its first micro-batch)."""
    from kafka import KafkaConsumer, TopicPartition

    progress = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if not progress:
        return None
    done: dict[tuple[str, int], int] = {}
    for src in progress[-1].get("sources", []):
        end = src.get("endOffset") or {}
        end = json.loads(end) if isinstance(end, str) else end
        for topic, parts in end.items():
            for part, off in parts.items():
                done[(topic, int(part))] = int(off)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(t, p) for t, p in done]
        latest = consumer.end_offsets(tps)
    finally:
        consumer.close()
    return sum(max(0, latest[tp] - done[(tp.topic, tp.partition)]) for tp in tps)


def run_increment(spark: SparkSession, spec: JoinSpec, *, bootstrap: str, s: Settings | None = None) -> dict:
    """One ``availableNow`` increment (what Airflow schedules every few minutes); skipped while a
    replay holds the pipeline."""
    from jobs.supervisor import current_hold

    held = current_hold(spec, s)
    if held is not None:
        log.info("%s is held by pid %s (%s): increment skipped", spec.pipeline, held["pid"], held.get("reason"))
        return {"batches": 0, "last_batch": None, "skipped": f"held: {held.get('reason')}"}
    queries = start_streaming_join(spark, spec, bootstrap=bootstrap, s=s, available_now=True)
    for q in queries:
        q.awaitTermination()
    progress = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    return {"batches": len(progress), "last_batch": progress[-1]["batchId"] if progress else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.stream_join", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="join spec YAML")
    p.add_argument("--available-now", action="store_true",
                   help="process what is in Kafka now, then stop (an increment); default: run continuously")
    p.add_argument("--trigger-interval", help="continuous mode micro-batch interval, e.g. 30s (default: spec)")
    args = p.parse_args(argv)
    from jobs.kafka_broker import bootstrap_servers
    from jobs.spark_session import get_spark

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = load_spec(args.spec)
    spark = get_spark("joinshift-stream-join")
    bootstrap = bootstrap_servers()
    if args.available_now:
        print(json.dumps(run_increment(spark, spec, bootstrap=bootstrap)))
        return 0
    queries = start_streaming_join(spark, spec, bootstrap=bootstrap, trigger_interval=args.trigger_interval)
    spark.streams.awaitAnyTermination()
    for q in queries:
        if q.exception():
            raise SystemExit(f"streaming query {q.name} failed: {q.exception()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

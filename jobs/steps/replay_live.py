"""``joinshift replay-as-live``: a faithful, reproducible trial run of the stream over history.

A stream's accuracy depends on how arrivals are cut into micro-batches. An availableNow run over
topics that hold days reads hours of arrivals per micro-batch, so the watermark almost never
fires and the rate is an upper bound; ``maxOffsetsPerTrigger`` cuts by offsets per partition, so
a partition whose records come first runs hours ahead and its watermark drops on-time rows of
the others. Replay-as-live admits records as a live stream would have seen them:

1. read the source topics' records (all partitions, both topics) for the arrival days asked,
   arrival time = the Kafka record timestamp, ordered by (timestamp, topic, partition, offset);
2. cut them into slices of record time (multiples of ``slice_minutes`` since the epoch);
3. per slice: publish it into the pipeline's replay topics (same keys, values, headers and
   timestamps; :data:`REPLAY_PARTITIONS` partition each, so the topic order is arrival order)
   and flush, then run exactly one micro-batch over exactly it: one running query (no extra
   no-data batch, no ``maxOffsetsPerTrigger``) whose sink holds after each batch until the next
   slice is fully published, so it never plans a batch over part of a slice. Two runs cut
   identical micro-batches and give identical output tables (``emitted_at`` = the slice's end in
   record time: the simulated now).

Days and the tail: the arrivals of the requested days (spec timezone) are replayed, plus the
whole following day when the topics hold it, so the last day's left events see the right events
that arrive after its midnight and the watermark passes them; only the requested days are
claimed (stream provenance). The first day starts cold, like a stream started at its midnight.

A trial: the pipeline's stream checkpoints, output table, progress logs and stream-stage
quarantine rows are replaced (pass a ``spec`` with its own pipeline name and ``source=`` the
production spec to keep them); refused while the pipeline is held or its supervised stream runs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pandas as pd
from pyspark.sql import SparkSession

from jobs.settings import Settings
from jobs.spec import Engine, JoinSpec
from jobs.storage import aligned_source, delta_io, fs, kafka
from jobs.storage.hold import current_hold, describe_hold, hold, supervised_stream_pid
from jobs.storage.progress import JOIN_QUERY, QUARANTINE_QUERY, read_progress, settle_log
from jobs.storage.spark import NO_DATA_BATCHES, conf_for, release_state_stores
from jobs.storage.stream_runs import REPLAY_AS_LIVE, record_run, replay_topics
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.replay_as_live")

#: Partitions of each replay topic: one, so a topic's offset order is its arrival order and a
#: slice's duplicates resolve the same way every run (throughput is not the point of a trial).
REPLAY_PARTITIONS = 1
#: Key of the progress-log annotation naming the record-time range a micro-batch read.
ARRIVALS_KEY = "joinshift_arrivals"


class ReplayRefused(RuntimeError):
    """The pipeline is busy (held, or its supervised stream runs): a one-line reason."""


@dataclass
class ReplayAsLiveResult:
    pipeline: str
    source_pipeline: str
    days: list[str]  # the arrival days claimed
    slice_minutes: float
    slices: int  # slices of record time, empty ones included
    batches: int  # micro-batches run: one per slice that held records
    records: int
    published: dict[str, int] = field(default_factory=dict)
    replay_topics: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _reading(spec: JoinSpec, topics: dict[str, str]) -> JoinSpec:
    """``spec`` reading ``topics`` with no per-trigger offset cap (one micro-batch per slice)."""
    return spec.model_copy(
        update={
            "left": spec.left.model_copy(update={"topic": topics["left"]}),
            "right": spec.right.model_copy(update={"topic": topics["right"]}),
            "streaming": spec.streaming.model_copy(update={"max_offsets_per_trigger": None}),
        }
    )


def refuse_if_busy(spec: JoinSpec, s: Settings | None = None) -> None:
    held = current_hold(spec, s)
    if held is not None and not held.get("failed"):  # a failed job's hold: a trial starts from nothing
        raise ReplayRefused(f"{spec.pipeline} is {describe_hold(held)}: run replay-as-live when the hold ends")
    pid = supervised_stream_pid(spec, s)
    if pid is not None:
        raise ReplayRefused(
            f"{spec.pipeline}'s supervised stream runs (pid {pid}): a trial would replace its checkpoint and output; "
            "stop it first, or run the trial under another pipeline name (--as)"
        )


def _fresh_start(spark: SparkSession, spec: JoinSpec, bootstrap: str, s: Settings | None) -> None:
    """A trial starts from nothing: stream checkpoints, output, progress logs, stream-stage
    quarantine rows and the replay topics."""
    tables = Tables.of(spec, s)
    release_state_stores(spark)  # an earlier trial's store may still upload into the checkpoint
    for query in (JOIN_QUERY, QUARANTINE_QUERY):
        fs.delete(tables.checkpoint(query))
        fs.delete(tables.progress_log(query))
    fs.delete(tables.output("stream"))
    delta_io.delete_where(spark, tables.quarantine, "stage = 'stream'")
    topics = list(replay_topics(spec).values())
    kafka.delete_topics(bootstrap, topics)
    for topic in topics:
        kafka.create_topic(bootstrap, topic, partitions=REPLAY_PARTITIONS)


def _midnight_ms(d: date, tz: str) -> int:
    return int(datetime.combine(d, datetime.min.time(), ZoneInfo(tz)).timestamp() * 1000)


def replay_span_ms(days: list[date], tz: str) -> tuple[int, int]:
    """The arrival times a replay of ``days`` reads (epoch ms, end exclusive): from the first day's
    midnight to the end of the day after the last (its tail: the records late into the next day)."""
    return _midnight_ms(min(days), tz), _midnight_ms(max(days) + timedelta(days=2), tz)


def held_days(bootstrap: str, topics: list[str], tz: str) -> list[date]:
    """Every arrival day (``tz``) from the topics' earliest to their latest record."""
    span = kafka.time_span(bootstrap, topics)
    if span is None:
        return []
    first, last = (datetime.fromtimestamp(ms / 1000, ZoneInfo(tz)).date() for ms in span)
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _chunk_edges(start_ms: int, end_ms: int, step: int, tz: str) -> list[int]:
    """Read history a day at a time (bounded memory); edges on the slice grid, so no slice is cut."""
    edges, d = [start_ms], datetime.fromtimestamp(start_ms / 1000, ZoneInfo(tz)).date()
    while True:
        d += timedelta(days=1)
        edge = _midnight_ms(d, tz) // step * step
        if edge >= end_ms:
            break
        if edge > edges[-1]:
            edges.append(edge)
    return [*edges, end_ms]


class _Gate:
    """Holds the running query between micro-batches while the next slice is published.

    The join's sink calls :meth:`hold` after writing a batch: the query cannot plan its next
    batch until :meth:`release`, so it never sees part of a slice (two topics' offsets are read
    one after the other; a slice being published could be cut between them, or between two
    produce requests). The next batch then reads exactly the next slice, however long publishing
    takes: one micro-batch per slice, every run alike.
    """

    def __init__(self) -> None:
        self._arrived, self._go = threading.Event(), threading.Event()
        self._open = False

    def hold(self, batch_id: int) -> None:  # the query's thread
        if self._open:
            return
        self._arrived.set()
        while not self._go.wait(1.0):
            if self._open:
                break
        self._go.clear()

    def wait_arrival(self, query) -> None:  # the driver's thread: the last batch is written
        while not self._arrived.wait(1.0):
            if not query.isActive:
                raise RuntimeError(f"the streaming join stopped during replay-as-live: {query.exception()}")
        self._arrived.clear()

    def release(self) -> None:
        self._go.set()

    def open(self) -> None:
        self._open = True
        self._go.set()


def run_paced(
    spark: SparkSession,
    spec: JoinSpec,
    slices: Iterable[tuple[int, pd.DataFrame]],
    *,
    total: int,
    slice_minutes: float,
    bootstrap: str,
    s: Settings | None = None,
    on_slice: Callable[[int, int, int], None] | None = None,
) -> tuple[int, int, dict[str, int]]:
    """Per slice ``(slice_end_ms, records)``: publish the records (columns ``topic``, ``key``,
    ``value``, ``arrival_ms``, optional ``headers``) and flush, then one micro-batch of ``spec``'s
    running join over exactly them (:class:`_Gate`). Returns (slices, micro-batches, records
    published per topic).

    Every slice brings data, so its batch applies the watermark the previous one computed; the
    extra no-data batch per slice is switched off (it would double the batches, and a no-data
    batch would emit rows at a watermark no live stream reaches between slices).
    """
    from jobs.steps.stream import paced_source_dir, start_quarantine, start_streaming_join
    from jobs.workload.publisher import publish

    step = int(round(slice_minutes * 60_000))
    now: list[datetime] = [datetime.now(UTC)]
    reading: list[dict[str, int]] = [{}]
    published: dict[str, int] = {}
    arrivals: dict[int, dict[str, int]] = {}
    gate = _Gate()

    def on_batch(batch_id: int) -> None:
        arrivals[batch_id] = reading[0]
        gate.hold(batch_id)

    n, query = 0, None
    # slices are gated micro-batch by micro-batch: none may run without data (the session's
    # own setting comes back after)
    with conf_for(spark, {NO_DATA_BATCHES: "false"}):
        producer = kafka.producer(bootstrap)
        try:
            for n, (slice_end_ms, chunk) in enumerate(slices, 1):
                if len(chunk):
                    if query is not None:
                        gate.wait_arrival(query)  # the previous slice is written; its query waits
                    for topic, c in publish(chunk, bootstrap, producer=producer).items():  # flushed on return
                        published[topic] = published.get(topic, 0) + c
                    now[0] = datetime.fromtimestamp(slice_end_ms / 1000, UTC)
                    reading[0] = {"start_ms": slice_end_ms - step, "end_ms": slice_end_ms}
                    if query is None:
                        (query,) = start_streaming_join(
                            spark,
                            spec,
                            bootstrap=bootstrap,
                            s=s,
                            trigger_interval="0",  # no wait between micro-batches
                            quarantine=False,
                            on_batch=on_batch,
                            clock=lambda: now[0],
                        )
                    else:
                        gate.release()
                if on_slice:
                    on_slice(n, total, slice_end_ms)
            if query is not None:
                gate.wait_arrival(query)
                if spec.streaming.engine == Engine.paced:  # a bounded trial: its last windows close too
                    aligned_source.request_drain(paced_source_dir(spec, s))
                gate.open()
                query.processAllAvailable()  # the last batch commits before the query stops
        finally:
            gate.open()
            producer.close()
            if query is not None:
                query.stop()
                settle_log(Tables.of(spec, s).progress_log(JOIN_QUERY), query)
    _annotate_progress(Tables.of(spec, s).progress_log(JOIN_QUERY), arrivals)
    # quarantine does not change accuracy: it catches up once at the end, not per slice
    start_quarantine(spark, spec, bootstrap=bootstrap, s=s, available_now=True).awaitTermination()
    return n, len(arrivals), published


def _annotate_progress(path: str, arrivals: dict[int, dict[str, int]]) -> None:
    """Add to each micro-batch's progress the record-time range it read, so attribution can tell
    the batch of a landed record by its arrival time (the replay topics' offsets are not the
    source's)."""
    progress = read_progress(path)
    if not progress or not arrivals:
        return
    for p in progress:
        if p.get("batchId") in arrivals:
            p[ARRIVALS_KEY] = arrivals[p["batchId"]]
    fs.write_text(path, "".join(json.dumps(p) + "\n" for p in progress))


#: A slice of record time: a positive duration up to a day.
MAX_SLICE_MINUTES = 1440


def check_slice(minutes: float) -> float:
    """``minutes`` when it is a slice (:data:`MAX_SLICE_MINUTES`); else ValueError saying what to give."""
    if not 0 < minutes <= MAX_SLICE_MINUTES:
        raise ValueError("use a positive duration up to a day, e.g. 15m, 30m, 1h")
    return minutes


def replay_as_live(
    spark: SparkSession,
    spec: JoinSpec,
    *,
    bootstrap: str,
    days: list[date] | None = None,
    source: JoinSpec | None = None,
    slice_minutes: float = 30,
    s: Settings | None = None,
    on_slice: Callable[[int, int, int], None] | None = None,
) -> ReplayAsLiveResult:
    """Run ``spec``'s stream over the history in ``source``'s topics (default: ``spec``'s), slice
    by slice of record time (module docstring). ``days``: the arrival days to claim (default:
    every day the topics hold). ``on_slice(done, total, slice_end_ms)`` after each slice.
    Raises :class:`ReplayRefused` while the pipeline is busy, ``ValueError`` on a bad argument.
    """
    source = source or spec
    check_slice(slice_minutes)
    refuse_if_busy(spec, s)
    src = [source.left.topic, source.right.topic]
    days = sorted(days) if days else held_days(bootstrap, src, source.timezone)
    if not days:
        raise ValueError(f"topics {', '.join(src)} hold no records to replay")
    start_ms, end_ms = replay_span_ms(days, source.timezone)
    step = int(round(slice_minutes * 60_000))
    total = (end_ms - 1) // step - start_ms // step + 1
    topics = replay_topics(spec)
    to_replay = {source.left.topic: topics["left"], source.right.topic: topics["right"]}
    started = time.monotonic()
    read = [0]

    def slices() -> Iterator[tuple[int, pd.DataFrame]]:
        from jobs.workload.publisher import iter_slices

        edges = _chunk_edges(start_ms, end_ms, step, source.timezone)
        for c0, c1 in zip(edges, edges[1:]):
            recs = kafka.read_by_time(bootstrap, src, c0, c1)
            read[0] += len(recs)
            frame = pd.DataFrame(
                {
                    "arrival_ms": [r[0] for r in recs],
                    "topic": [to_replay[r[1]] for r in recs],
                    "key": [r[4] for r in recs],
                    "value": [r[5] for r in recs],
                    "headers": [r[6] for r in recs],
                }
            )
            yield from iter_slices(frame, slice_minutes, start_ms=c0, end_ms=c1)

    run_spec = _reading(spec, topics)
    with hold(spec, s, reason="replay-as-live trial"):
        _fresh_start(spark, spec, bootstrap, s)
        n, batches, published = run_paced(
            spark,
            run_spec,
            slices(),
            total=total,
            slice_minutes=slice_minutes,
            bootstrap=bootstrap,
            s=s,
            on_slice=on_slice,
        )
    record_run(spec, days, REPLAY_AS_LIVE, slices=n, slice_minutes=slice_minutes, replace=True, s=s)
    result = ReplayAsLiveResult(
        pipeline=spec.pipeline,
        source_pipeline=source.pipeline,
        days=[str(d) for d in days],
        slice_minutes=slice_minutes,
        slices=n,
        batches=batches,
        records=read[0],
        published=published,
        replay_topics=topics,
        seconds=time.monotonic() - started,
    )
    log.info(
        "replay-as-live %s: %d slices of %g min, %d micro-batches, %d records in %.0fs",
        spec.pipeline,
        n,
        slice_minutes,
        batches,
        read[0],
        result.seconds,
    )
    return result

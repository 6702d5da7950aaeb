"""The paced engine's source: both topics of a join as one Spark stream, admitted so that the two
streams' processing times stay synchronized (paper §5.2, ``left_PT + upper = right_PT``).

A Python streaming data source with admission control (PySpark 4.2 ``DataSourceStreamReader``,
``latestOffset(start, limit)``). Before each micro-batch the driver side reads ahead of what was
admitted (its own consumer, event times read in Python: :mod:`jobs.join.event_times`) and decides
how far each topic's partitions go:

* each stream's **PT** (§5.3) comes from :class:`jobs.join.pt_estimator.PTEstimator` fed with the
  event times of what it admitted, one pacing step at a time (a micro-batch runs as many steps as
  the PTs allow, :func:`jobs.join.pacing.pace_steps`); a record whose event time is outside
  ``timestamp_validity`` of its record timestamp (§6.7) is admitted (parsing quarantines it) but
  kept out of PT, counted;
* the stream that runs ahead (``left_PT + upper`` more than ``paced.max_drift`` past ``right_PT``,
  or the other way round) is **paused**; the other one is admitted in arrival order only as far as
  the batch's PT statistic stays within ``max_drift`` of the synchronization point, so a stream
  lagging hours behind (a consumer outage, a backfill) catches up without the other filling the
  join's state meanwhile;
* a stream with nothing to read is **idle** and bounds nothing (the other is never starved), and
  when both are bounded to nothing the lagging one is admitted anyway;
* at most ``paced.max_records_per_batch`` records per stream and micro-batch.

The micro-batch's end offset is ``{topic: {partition: offset}}`` for both topics, as Spark's Kafka
source writes it, plus ``"@paced"`` (no Kafka topic can be named so): the PTs the batch runs with,
what was paused, idle and kept out of PT. Spark logs it before the batch runs, so a batch re-run
after a crash reads the same records with the same PTs; the estimators' state is kept beside the
checkpoint per batch (a local storage root; on an object store a restarted source starts its
estimators afresh from the logged PTs). Executors read the ranges in parallel, a task per
partition index (:class:`KafkaTask`);
every row carries its side and the batch's two PTs (epoch ms, -1 while unknown), and every micro-batch
has one row of side :data:`TICK` that carries only them.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import pickle
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from jobs.join.event_times import event_time_reader
from jobs.join.pacing import DRAIN_PT, SIDES, TICK, ReadAhead, pace_steps
from jobs.join.pt_estimator import PTEstimator
from jobs.spec import JoinSpec, recorded_spec

log = logging.getLogger("joinshift.aligned_source")

NAME = "joinshift_aligned_kafka"
SCHEMA = (
    "side string, key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, left_pt long, right_pt long"
)
#: The end offset's own entry (``@`` is not allowed in a Kafka topic's name).
PACED = "@paced"
#: Snapshots of the estimators kept beside the checkpoint (a restart needs the last one only).
_KEEP_SNAPSHOTS = 3
#: A bounded run's request to drain (both PTs to :data:`~jobs.join.pacing.DRAIN_PT`): every window closes.
_DRAIN_FILE = "drain"


def request_drain(state_dir: str) -> None:
    """End a bounded run (a replay-as-live trial, a benchmark): once both topics are read to their
    end, the source moves both PTs past every event, so every open window closes with what was read
    (Flink's end-of-input watermark). A live stream never drains."""
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    (Path(state_dir) / _DRAIN_FILE).touch()


def clear_drain(state_dir: str) -> None:
    """A run that starts is not drained (a request an earlier run left behind is dropped)."""
    (Path(state_dir) / _DRAIN_FILE).unlink(missing_ok=True)


@dataclass(frozen=True)
class Pacing:
    """What the source needs, passed as one option (picklable: executors get it too)."""

    bootstrap: str
    spec_json: str
    state_dir: str | None = None
    starting: dict[str, dict[str, int]] | None = None

    @classmethod
    def of(cls, options) -> Pacing:
        return cls(**json.loads(options["pacing"]))

    def option(self) -> str:
        return json.dumps(self.__dict__)

    @property
    def spec(self) -> JoinSpec:
        return recorded_spec(self.spec_json)


class AlignedKafkaSource(DataSource):
    """``spark.readStream.format("joinshift_aligned_kafka").option("pacing", Pacing(...).option())``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: N802 (PySpark's names)
        return AlignedReader(Pacing.of(self.options))


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's records of a micro-batch."""

    side: str
    topic: str
    partition: int
    start: int
    end: int
    left_pt: int
    right_pt: int


@dataclass(frozen=True)
class KafkaTask(InputPartition):
    """The ranges one task reads: the partitions of one index, of both topics (a task per
    partition index, as many as the bigger topic's partitions: each task costs a Python worker's
    round trip, ~0.1-0.2 s, and a small micro-batch paid it for every partition of both topics)."""

    ranges: tuple[KafkaRange, ...]


@dataclass
class _Driver:
    """The driver side's state between micro-batches (never pickled to executors)."""

    seq: int
    frontier: dict[tuple[str, int], int]
    estimators: dict[str, PTEstimator]
    pt: dict[str, int | None]
    peeked: dict[tuple[str, int], deque[ReadAhead]] = field(default_factory=dict)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    consumer: Any = None

    def next_offset(self, tp: tuple[str, int]) -> int:
        """The partition's first offset not read ahead yet."""
        return self.peeked[tp][-1].offset + 1 if self.peeked[tp] else self.frontier[tp]


class AlignedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, pacing: Pacing):
        self.pacing = pacing
        self._driver: _Driver | None = None
        self._target: dict[tuple[str, int], int] | None = None  # availableNow: read up to here

    def __getstate__(self) -> dict:
        return {"pacing": self.pacing, "_driver": None, "_target": None}

    # ------------------------------------------------------------------ spec-derived

    def _spec(self) -> JoinSpec:
        if not hasattr(self, "_spec_cache"):
            self._spec_cache = self.pacing.spec
        return self._spec_cache

    def _topic(self, side: str) -> str:
        return self._spec().side(side).topic

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:  # noqa: N802 (PySpark's names)
        from jobs.storage import kafka

        ends: dict[str, dict[str, int]] = {}
        with kafka.consumer(self.pacing.bootstrap) as c:
            for side in SIDES:
                topic = self._topic(side)
                tps = kafka.partitions(c, topic)
                if not tps:
                    raise RuntimeError(f"topic {topic!r} does not exist on {self.pacing.bootstrap}")
                begins = c.beginning_offsets(tps)
                given = (self.pacing.starting or {}).get(topic, {})
                ends[topic] = {str(tp.partition): int(given.get(str(tp.partition), begins[tp])) for tp in tps}
        return {**ends, PACED: {"seq": 0, "left_pt": -1, "right_pt": -1}}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (PySpark's names)
        from jobs.storage import kafka

        ends = kafka.end_offsets(self.pacing.bootstrap, [self._topic(s) for s in SIDES])
        self._target = {(t, p): off for t, parts in ends.items() for p, off in parts.items()}

    def latestOffset(self, start: dict, limit) -> dict:  # noqa: N802 (PySpark's names)
        spec = self._spec()
        d = self._restore(start)
        cap = spec.streaming.paced.max_records_per_batch
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, int(limit.max_rows))
        self._peek(d, cap)
        candidates = {side: self._in_arrival_order(d, side, cap) for side in SIDES}
        idle = [s for s in SIDES if not candidates[s]]
        if len(idle) == 2:
            return self._drained(d, start)
        opts = spec.streaming.paced
        read_to_end = [side for side in SIDES if len(candidates[side]) < cap and self._read_to_end(d, side)]
        admitted, paused, steps = pace_steps(
            candidates,
            d.pt,
            d.estimators,
            upper=int(spec.window.upper.total_seconds() * 1000),
            drift=int(opts.max_drift.total_seconds() * 1000),
            q=opts.pt_percentile,
            read_to_end=read_to_end,
        )
        stats: dict[str, Any] = {"paused": paused, "idle": idle, "steps": steps}
        for side in SIDES:
            recs = admitted[side]
            for tp, p in recs:
                d.frontier[tp] = p.offset + 1
                d.peeked[tp].popleft()
            stats[f"{side}_admitted"] = len(recs)
            stats[f"{side}_outside_validity"] = sum(1 for _, p in recs if not p.valid)
        d.seq += 1
        self._save(d)
        return self._offsets(d, stats)

    def _drained(self, d: _Driver, start: dict) -> dict:
        """Nothing to read: ``start`` again (no micro-batch), or, when a drain was asked for, one
        micro-batch of its tick alone at :data:`DRAIN_PT` (every shard steps by it: every window closes)."""
        drained = int(start.get(PACED, {}).get("drained", 0))
        asked = self.pacing.state_dir is not None and (Path(self.pacing.state_dir) / _DRAIN_FILE).exists()
        if not asked or drained >= 1:
            return start
        d.seq += 1
        d.pt = {side: DRAIN_PT for side in SIDES}
        self._save(d)
        return self._offsets(d, {"paused": [], "idle": list(SIDES), "drained": drained + 1})

    def _offsets(self, d: _Driver, stats: dict[str, Any]) -> dict:
        out: dict[str, Any] = {}
        for (topic, part), off in sorted(d.frontier.items()):
            out.setdefault(topic, {})[str(part)] = off
        out[PACED] = {
            "seq": d.seq,
            "left_pt": -1 if d.pt["left"] is None else d.pt["left"],
            "right_pt": -1 if d.pt["right"] is None else d.pt["right"],
            **stats,
        }
        return out

    # ------------------------------------------------------------------ driver state

    def _restore(self, start: dict) -> _Driver:
        """The driver state for ``start``: as it is when ``start`` is the last end offset this
        process returned, else rebuilt (a restart): the estimators from their snapshot for that
        micro-batch, or afresh with the logged PTs as their floor."""
        from jobs.storage import kafka

        paced = start.get(PACED, {})
        seq = int(paced.get("seq", 0))
        frontier = {(t, int(p)): int(off) for t, parts in start.items() if t != PACED for p, off in parts.items()}
        d = self._driver
        if d is not None and d.seq == seq and d.frontier == frontier:
            return d
        if d is not None and d.consumer is not None:
            d.consumer.close()
        spec = self._spec()
        estimators = self._load(seq) or {s: _estimator(spec) for s in SIDES}
        pt: dict[str, int | None] = {}
        for side in SIDES:
            logged = int(paced.get(f"{side}_pt", -1))
            est = estimators[side]
            if logged >= 0 and (est.pt is None or est.pt < logged):
                est._pt = float(logged)  # PT never moves back, across a restart neither
            pt[side] = None if est.pt is None else int(est.pt)
        consumer = kafka.KafkaConsumerFor(self.pacing.bootstrap, client_id="joinshift-aligned-source")
        d = _Driver(seq=seq, frontier=frontier, estimators=estimators, pt=pt, consumer=consumer)
        consumer.assign_at(frontier)
        d.peeked = {tp: deque() for tp in frontier}
        self._driver = d
        return d

    def _peek(self, d: _Driver, cap: int) -> None:
        """Read ahead until each partition has ``cap`` records beyond what was admitted, or none left."""
        from jobs.storage import kafka

        spec = self._spec()
        read_time = {s: event_time_reader(spec.side(s)) for s in SIDES}
        side_of = {spec.side(s).topic: s for s in SIDES}
        validity = spec.timestamp_validity
        past, future = validity.max_past.total_seconds() * 1000, validity.max_future.total_seconds() * 1000
        ends = d.consumer.ends()
        if self._target is not None:
            ends = {tp: min(end, self._target.get(tp, end)) for tp, end in ends.items()}

        d.ends = ends

        def wanted(tp) -> bool:
            return len(d.peeked[tp]) < cap and d.next_offset(tp) < ends.get(tp, 0)

        # the records up to ``ends`` exist: an empty poll is a slow fetch, not the end (a broker that
        # does not answer within the request timeout leaves the batch with what was read)
        deadline = time.monotonic() + kafka.REQUEST_TIMEOUT_MS / 1000
        while any(wanted(tp) for tp in d.peeked) and time.monotonic() < deadline:
            got = d.consumer.poll(max_records=20_000)
            if not got:
                continue
            for tp, records in got.items():
                side = side_of[tp[0]]
                for off, ts, value, _key in records:
                    if off >= ends.get(tp, 0):
                        break
                    et = read_time[side](value)
                    valid = et is not None and ts - past <= et <= ts + future
                    d.peeked[tp].append(ReadAhead(off, ts, et, valid))

    def _read_to_end(self, d: _Driver, side: str) -> bool:
        """Whether a bounded run (availableNow) has read ahead all it will read of the side's topic:
        that stream is idle for good, so the other need not wait a micro-batch for it. A live stream
        with nothing to read now waits that micro-batch (its records may come: the other running
        ahead meanwhile would close its windows, a first answer missed: -0.12 pp on the demo)."""
        if self._target is None:
            return False
        topic = self._topic(side)  # d.ends: this read's ends, already within the run's target
        return all(d.next_offset(tp) >= d.ends.get(tp, 0) for tp in d.peeked if tp[0] == topic)

    def _in_arrival_order(self, d: _Driver, side: str, cap: int) -> list[tuple[tuple[str, int], ReadAhead]]:
        """Up to ``cap`` of a stream's read-ahead records in arrival (record timestamp) order,
        each partition's in offset order, so what is admitted is a prefix of every partition; and
        none later than what a partition with more to read has been read up to (its next record
        may have arrived earlier)."""
        topic = self._topic(side)
        tps = [tp for tp in sorted(d.peeked) if tp[0] == topic]
        unread = [tp for tp in tps if d.next_offset(tp) < d.ends.get(tp, 0)]
        horizon = min((d.peeked[tp][-1].timestamp if d.peeked[tp] else -1 for tp in unread), default=None)
        lanes = [[(tp, p) for p in d.peeked[tp]] for tp in tps]
        merged = heapq.merge(*lanes, key=lambda r: (r[1].timestamp, r[0][1], r[1].offset))
        out: list[tuple[tuple[str, int], ReadAhead]] = []
        for r in merged:
            if len(out) >= cap or (horizon is not None and r[1].timestamp > horizon):
                break
            out.append(r)
        return out

    # ------------------------------------------------------------------ estimator snapshots

    def _snapshot(self, seq: int) -> Path | None:
        return None if self.pacing.state_dir is None else Path(self.pacing.state_dir) / f"{seq}.pt"

    def _save(self, d: _Driver) -> None:
        path = self._snapshot(d.seq)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(d.estimators))
        os.replace(tmp, path)

    def _load(self, seq: int) -> dict[str, PTEstimator] | None:
        path = self._snapshot(seq)
        if path is None or not path.exists():
            return None
        try:
            return pickle.loads(path.read_bytes())
        except Exception:  # a snapshot of another version: start the estimators afresh
            log.info("estimator snapshot %s unreadable: PT estimation restarts from the logged PTs", path)
            return None

    def commit(self, end: dict) -> None:
        seq = int(end.get(PACED, {}).get("seq", 0))
        if self.pacing.state_dir is None or not Path(self.pacing.state_dir).is_dir():
            return
        for f in Path(self.pacing.state_dir).glob("*.pt"):
            if f.stem.isdigit() and int(f.stem) <= seq - _KEEP_SNAPSHOTS:
                f.unlink(missing_ok=True)

    def stop(self) -> None:
        if self._driver is not None and self._driver.consumer is not None:
            self._driver.consumer.close()
            self._driver = None

    # ------------------------------------------------------------------ executors

    def partitions(self, start: dict, end: dict) -> list[KafkaTask]:
        """A task per partition index, the first one also reading the micro-batch's tick (its PTs
        alone: a task of its own would cost a Python worker's round trip)."""
        paced = end.get(PACED, {})
        lpt, rpt = int(paced.get("left_pt", -1)), int(paced.get("right_pt", -1))
        side_of = {self._topic(s): s for s in SIDES}
        by_index: dict[int, list[KafkaRange]] = {}
        for topic, parts in end.items():
            if topic == PACED:
                continue
            for part, stop in parts.items():
                first = int(start.get(topic, {}).get(part, stop))
                if first < int(stop):
                    by_index.setdefault(int(part), []).append(
                        KafkaRange(side_of[topic], topic, int(part), first, int(stop), lpt, rpt)
                    )
        tasks = [list(ranges) for _, ranges in sorted(by_index.items())] or [[]]
        tasks[0].insert(0, KafkaRange(TICK, "", -1, 0, 0, lpt, rpt))
        return [KafkaTask(tuple(ranges)) for ranges in tasks]

    def read(self, partition) -> Iterator[Any]:
        """The task's records as Arrow record batches (PySpark takes them as they are: a tuple
        per record went through a Python converter per column, and its timestamp through a datetime)."""
        task: KafkaTask = partition
        for r in task.ranges:
            yield from self._read_range(r)

    def _read_range(self, r: KafkaRange) -> Iterator[Any]:
        from jobs.storage import kafka

        if r.side == TICK:  # no record: the PTs alone
            yield _batch([(-1, int(time.time() * 1000), None, None)], r)
            return
        c = _task_consumers.pop(self.pacing.bootstrap, None) or kafka.KafkaConsumerFor(
            self.pacing.bootstrap, client_id="joinshift-aligned-source-task"
        )
        try:
            c.assign_at({(r.topic, r.partition): r.start})
            position = r.start
            while position < r.end:
                got = c.poll(max_records=20_000, timeout_ms=kafka.REQUEST_TIMEOUT_MS).get((r.topic, r.partition), [])
                if not got:
                    raise RuntimeError(
                        f"no records from {r.topic}[{r.partition}] at offset {position} (up to {r.end}) within "
                        f"{kafka.REQUEST_TIMEOUT_MS} ms: the broker is down or the records were deleted"
                    )
                polled = [rec for rec in got if rec[0] >= position]  # none of an earlier range's fetch
                records = [rec for rec in polled if rec[0] < r.end]
                if records:
                    yield _batch(records, r)
                    position = records[-1][0] + 1
                if len(records) < len(polled):  # past the range's end
                    break
        except BaseException:  # a failed read, or a task stopped while reading: not kept
            c.close()
            raise
        _task_consumers[self.pacing.bootstrap] = c


#: The tasks' consumer, kept by a Python worker from one task to the next (Spark reuses its
#: workers): a new consumer takes ~110-210 ms to its first records (connecting, measured), and a
#: micro-batch runs a task per partition index. Taken out while a task reads; one whose read failed
#: or was stopped is closed, not put back.
_task_consumers: dict[str, Any] = {}


def _batch(records: list, r: KafkaRange) -> Any:
    """(offset, timestamp ms, value, key) records of ``r`` -> one record batch of :data:`SCHEMA`."""
    import pyarrow as pa

    n = len(records)
    offsets, stamps, values, keys = zip(*records, strict=True) if n else ((), (), (), ())
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.side] * n, pa.string()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([r.topic] * n, pa.string()),
            pa.array([r.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([ts * 1000 for ts in stamps], pa.timestamp("us", tz="UTC")),
            pa.array([r.left_pt] * n, pa.int64()),
            pa.array([r.right_pt] * n, pa.int64()),
        ],
        names=_COLUMNS,
    )


_COLUMNS = [c.split()[0] for c in SCHEMA.split(", ")]


def _estimator(spec: JoinSpec) -> PTEstimator:
    p = spec.streaming.paced
    return PTEstimator(sequence_length=p.pt_windows, statistic=p.pt_percentile)


def register(spark) -> None:
    """Make the source known to this session (once per session)."""
    spark.dataSource.register(AlignedKafkaSource)

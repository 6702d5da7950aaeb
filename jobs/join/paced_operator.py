"""The paced engine's join on Spark: both sides' typed events as one tagged stream, keyed by the
join key, through :mod:`jobs.join.paced` in ``transformWithState`` (RocksDB state).

The aligned source (:mod:`jobs.storage.aligned_source`) stamps every row with its micro-batch's
two PTs. The right PT is the query's event-time watermark (no delay): a key's timer
(the next window to close, the next right event to let go) fires when it passes. Each key keeps
one state value, its buffers compressed (:mod:`jobs.join.paced_state`), so a key costs one state
read and one write per call.

Output: the join's columns (:func:`jobs.join.columns.output_columns`) and ``revision`` (late
corrections), plus ``paced_metric`` and ``paced_count`` on the rows that carry the operator's
counters (:data:`jobs.join.paced.METRICS`, a sample of the state's sizes) instead of a join row;
:func:`split_counters` takes them apart in the sink.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, REVISION, col_name, output_columns, side_columns
from jobs.join.paced import Event, KeyState, Rules, next_timer, step
from jobs.join.paced_state import Dictionaries, StateCodec
from jobs.join.records import parse_records
from jobs.spec import SCHEMA_TYPES, Cardinality, JoinSpec, JoinType

METRIC, COUNT = "paced_metric", "paced_count"
#: A sample of the state the operator wrote (:class:`PacedJoinProcessor`): keys, their buffered
#: rows, and their bytes pickled (raw) and as stored (compressed).
SIZE_COUNTERS = ("state_keys", "state_rows", "state_raw_bytes", "state_bytes")
#: The PT columns every row of the aligned source carries, kept through parsing.
PACE_COLUMNS = ("left_pt", "right_pt")
#: The control columns of the tagged stream, besides the join's columns.
_SIDE, _T, _ARRIVAL, _POS, _OFF, _ID, _LPT, _RPT, _CLOCK = (
    "paced_side",
    "paced_t",
    "paced_arrival",
    "paced_partition",
    "paced_offset",
    "paced_id",
    "paced_left_pt",
    "paced_right_pt",
    "paced_clock",
)
_STATE = StructType([StructField("buffers", BinaryType()), StructField("timer", LongType())])


def rules_of(spec: JoinSpec) -> Rules:
    p = spec.streaming.paced
    return Rules(
        lower=spec.window.lower_seconds * 1000,
        upper=spec.window.upper_seconds * 1000,
        outer=spec.join.type == JoinType.left_outer,
        one_to_one=spec.join.cardinality == Cardinality.one_to_one,
        per_key_cap=p.per_key_cap,
        max_drift=int(p.max_drift.total_seconds() * 1000),
        horizon=None if spec.corrections.horizon is None else int(spec.corrections.horizon.total_seconds() * 1000),
    )


def output_ddl(spec: JoinSpec) -> str:
    """The join's output columns with their types, and the counter columns."""
    types = {ARRIVAL_TIME: "timestamp", PARTITION: "int", OFFSET: "bigint"}
    cols = ["ds date"]
    for side in ("left", "right"):
        schema = spec.side(side).schema_
        for c in side_columns(spec, side):
            cols.append(f"{col_name(side, c)} {SCHEMA_TYPES[schema[c]] if c in schema else types[c]}")
    return ", ".join([*cols, f"{REVISION} int", f"{METRIC} string", f"{COUNT} bigint"])


#: The aligned source's columns (:data:`jobs.storage.aligned_source.SCHEMA`) a parse keeps.
_SOURCE = ("side", "key", "value", "topic", "partition", "offset", "timestamp", *PACE_COLUMNS)


def both_sides_parsed(raw: DataFrame, spec: JoinSpec) -> DataFrame:
    """The aligned source's rows, each parsed as its side's records (:func:`parse_records`, the
    rules landing applies), in one chain of projections: the source is read once per micro-batch
    (two filtered branches would each read it again, and Spark does not share a streaming scan).
    The left side's columns get :data:`_LEFT` in front; the right's keep their names."""
    left = parse_records(raw, spec.left, spec, keep=_SOURCE)
    renamed = left.select(*_SOURCE, *[F.col(c).alias(_LEFT + c) for c in left.columns if c not in _SOURCE])
    return parse_records(renamed, spec.right, spec, keep=tuple(renamed.columns))


_LEFT = "paced_l_"


def paced_join(raw: DataFrame, spec: JoinSpec, dictionaries: Dictionaries | None = None) -> DataFrame:
    """The aligned source's rows -> the join's rows and the operator's counter rows: every good
    record tagged with its side, key, times and Kafka position; the rows of a drain (side ``tick``)
    carry only the PTs, which move the watermark and so close windows. ``dictionaries``: where the
    state's compression dictionaries are kept (:mod:`jobs.join.paced_state`)."""
    keys = [f"paced_key{i}" for i in range(len(spec.left.key))]
    parsed = both_sides_parsed(raw, spec)
    side = F.col("side")
    is_left, is_right = side == "left", side == "right"

    def one_side(which: str) -> list[Column]:
        prefix, cond = (_LEFT, is_left) if which == "left" else ("", is_right)
        cols = [F.when(cond, F.col(prefix + c)).alias(col_name(which, c)) for c in side_columns(spec, which)]
        return [*cols, F.when(cond, F.col(prefix + "ds")).alias("ds")] if which == "left" else cols

    lt, rt = spec.left, spec.right
    good = (is_left & F.col(_LEFT + "_reason").isNull()) | (is_right & F.col("_reason").isNull()) | (side == "tick")
    stream = parsed.where(good).select(
        *one_side("left"),
        *one_side("right"),
        F.substring(side, 1, 1).alias(_SIDE),
        F.when(is_left, F.unix_millis(F.col(_LEFT + lt.event_time)))
        .when(is_right, F.unix_millis(F.col(rt.event_time)))
        .alias(_T),
        F.unix_millis(F.when(is_left, F.col(_LEFT + ARRIVAL_TIME)).otherwise(F.col(ARRIVAL_TIME))).alias(_ARRIVAL),
        F.when(is_left, F.col(_LEFT + PARTITION)).otherwise(F.col(PARTITION)).alias(_POS),
        F.when(is_left, F.col(_LEFT + OFFSET)).otherwise(F.col(OFFSET)).alias(_OFF),
        F.when(is_left, F.col(_LEFT + lt.id).cast("string")).otherwise(F.col(rt.id).cast("string")).alias(_ID),
        *[
            F.when(is_left, F.col(_LEFT + lk)).otherwise(F.col(rk)).alias(name)
            for lk, rk, name in zip(lt.key, rt.key, keys)
        ],
        F.col(PACE_COLUMNS[0]).alias(_LPT),
        F.col(PACE_COLUMNS[1]).alias(_RPT),
    )
    # the right PT is the query's watermark; the column is dropped before the operator, so Spark's
    # own late-row rule (event time <= watermark: every row of a batch whose right PT did not move)
    # has no column to drop rows by: lateness is the operator's to decide
    stream = (
        stream.withColumn(_CLOCK, F.timestamp_millis(F.greatest(F.col(_RPT), F.lit(0))))
        .withWatermark(_CLOCK, "0 seconds")
        .drop(_CLOCK)
    )
    processor = PacedJoinProcessor(rules_of(spec), output_columns(spec), dictionaries, stream.columns)
    return stream.groupBy(*keys).transformWithState(
        statefulProcessor=processor,
        outputStructType=output_ddl(spec),
        outputMode="Append",
        timeMode="EventTime",
    )


def split_counters(batch: DataFrame) -> tuple[DataFrame, dict[str, int]]:
    """A micro-batch of :func:`paced_join` -> its join rows and its counters (summed)."""
    counts = {
        r[METRIC]: int(r["n"])
        for r in batch.where(F.col(METRIC).isNotNull()).groupBy(METRIC).agg(F.sum(COUNT).alias("n")).collect()
    }
    return batch.where(F.col(METRIC).isNull()).drop(METRIC, COUNT), counts


class PacedJoinProcessor(StatefulProcessor):
    """One key's calls: new rows of a micro-batch, or its timer (the right PT passed something).

    On Spark's Row interface (``transformWithState``), not the pandas one: a key holds a few events,
    and a pandas frame per key cost more than the join (paced ÷ native events/s 0.20 with frames,
    0.46 with rows; bench/paced.py, BENCHMARKS.md)."""

    #: State sizes are reported every this many keys stored (and on a task's first): a sample.
    SIZE_SAMPLE = 256

    def __init__(self, rules: Rules, columns: list[str], dictionaries: Dictionaries | None, input_columns: list[str]):
        self.rules = rules
        self.columns = columns
        self.dictionaries = dictionaries
        left_columns = [c for c in columns if c.startswith("left_") or c == "ds"]
        right_columns = [c for c in columns if c.startswith("right_")]
        self.width = (len(left_columns), len(right_columns))
        at = {c: i for i, c in enumerate(input_columns)}
        self.at_side, self.at_lpt, self.at_rpt = at[_SIDE], at[_LPT], at[_RPT]
        self.at_meta = [at[c] for c in (_T, _ARRIVAL, _POS, _OFF, _ID)]
        self.at_row = {"l": [at[c] for c in left_columns], "r": [at[c] for c in right_columns]}

    def init(self, handle: StatefulProcessorHandle) -> None:
        from pyspark.sql import Row

        self.handle = handle
        self.state = handle.getValueState("buffers", _STATE)
        self.codec = StateCodec.of(self.dictionaries)
        self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)
        self.stored = 0
        self.output = Row(*self.columns, REVISION, METRIC, COUNT)  # named: Spark asks a row for its dict

    def handleInputRows(self, key, rows, timerValues) -> Iterator:  # noqa: N802, N803
        events: dict[str, list[Event]] = {"l": [], "r": []}
        lpt = rpt = -1
        for r in rows:
            side = r[self.at_side]
            lpt, rpt = max(lpt, r[self.at_lpt]), max(rpt, r[self.at_rpt])
            if side in events:  # not a drain's tick
                t, a, p, o, i = (r[k] for k in self.at_meta)
                events[side].append(Event(t, a, p, o, i, tuple(r[k] for k in self.at_row[side])))
        yield from self._step(events["l"], events["r"], None if lpt < 0 else lpt, None if rpt < 0 else rpt)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:  # noqa: N802, N803
        watermark = timerValues.getCurrentWatermarkInMs()
        yield from self._step([], [], None, watermark if watermark > 0 else None, fired=True)

    def close(self) -> None:
        pass

    def _step(self, lefts: list[Event], rights: list[Event], lpt, rpt, fired: bool = False) -> Iterator:
        stored = self.state.get()  # None when the key holds nothing (one call to the state server, not two)
        state = self.codec.loads(stored[0]) if stored else KeyState()
        timer = None if stored is None or fired else stored[1]
        out = step(state, self.rules, lefts, rights, lpt, rpt)
        due = next_timer(state, self.rules)
        if timer is not None and timer != due:
            self.handle.deleteTimer(timer)
        if due is not None and due != timer:
            self.handle.registerTimer(due)
        if state.empty():
            self.state.clear()
        else:
            blob, raw = self.codec.dumps(state)
            self.state.update((blob, due))
            z = self.sizes
            z["state_keys"] += 1
            z["state_rows"] += len(state.lefts) + len(state.rights)
            z["state_raw_bytes"] += raw
            z["state_bytes"] += len(blob)
            self.stored += 1
            if self.stored % self.SIZE_SAMPLE == 1:  # a task's first key, then every SIZE_SAMPLE
                out.counts.update(z)
                self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)
        nulls = (None,) * self.width[1]
        for left, right, revision in [(lft, rgt, 0) for lft, rgt in out.pairs] + out.corrections:
            yield self.output(*left, *(right if right is not None else nulls), revision, None, None)
        blanks = (None,) * (sum(self.width) + 1)
        for name, n in out.counts.items():
            yield self.output(*blanks, name, n)

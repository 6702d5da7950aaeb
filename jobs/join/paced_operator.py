"""The paced engine's join on Spark: both sides' typed events as one tagged stream, grouped by shard
(a hash of the join key, the paper's §6.2 "DB shard ID"), through :mod:`jobs.join.paced` per join
key inside ``transformWithState`` (RocksDB state).

The aligned source (:mod:`jobs.storage.aligned_source`) stamps every row with its micro-batch's
two PTs. The right PT is the query's event-time watermark (no delay): a shard's timer (its keys'
next window to close, next right event to let go) fires when it passes.

Why shards, not keys, as Spark's grouping key: every grouping key's call costs the state server a
round trip to set it, one for its state and one per timer change, ~70 us each, and a key holds
one or two events (bench/paced.py: ~700 us a key with the join key as grouping key). A shard's
call pays those once for all its keys of the micro-batch: each key's buffers stay one value of a
map state (read and written only when the key has something to do: a write is the key's bytes,
not the shard's), and the shard keeps one small index of its keys' next timers and registers one
timer, the earliest.

A side's output values travel through the operator as one JSON text (:func:`_packed`), not a
column each: Spark's Row interface hands Python every value of a row as its own Arrow scalar
(~2 us each, ~58 us a row at the 27 columns the union of both sides had), and the operator only
carries them to its output, where Spark reads them back (:func:`_unpacked`).

Output: the join's columns (:func:`jobs.join.columns.output_columns`) and ``revision`` (late
corrections), plus ``paced_metric`` and ``paced_count`` on the rows that carry the operator's
counters (:data:`jobs.join.paced.METRICS`, a sample of the state's sizes) instead of a join row;
:func:`split_counters` takes them apart in the sink.
"""

from __future__ import annotations

import pickle
from collections.abc import Container, Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, REVISION, col_name, side_columns
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
#: How the operator keeps its state, recorded beside a paced checkpoint (an older one is refused at
#: start-up, :func:`jobs.steps.stream.guard_checkpoint_spec`): 1 a value state per join key; 2 by
#: shard, a buffered event's values as a tuple; 3 (now) by shard, its values as their JSON text.
STATE_LAYOUT = 3
STATE_LAYOUTS = {
    1: "its state per join key, from before it was kept by shard (streaming.paced.shards)",
    2: "buffered events' values as Python tuples, from before they were kept as their JSON text",
}
#: A join key's buffers, one value of the shard's map state (its state variable, and the value's field).
BUFFERS = "buffers"
_BUFFERS = StructType([StructField(BUFFERS, BinaryType())])
#: A shard's index: its keys' next timers and its rows' last left PT (pickled ``({key: due}, left_pt)``;
#: a plain ``{key: due}`` before the left PT was kept), and the one timer it registered.
_INDEX = StructType([StructField("dues", BinaryType()), StructField("timer", LongType())])
_SHARD = "paced_shard"
#: A row's output values, packed (:func:`_packed`): the operator's input column and its output's two.
_ROW, _LEFT_ROW, _RIGHT_ROW = "paced_row", "paced_left_row", "paced_right_row"
#: Timestamps to the microsecond, with their offset (Spark's default JSON format keeps milliseconds).
_JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
#: The operator's output: both sides' packed values, the revision, and the counter columns.
_OUTPUT_DDL = f"{_LEFT_ROW} string, {_RIGHT_ROW} string, {REVISION} int, {METRIC} string, {COUNT} bigint"


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


def _side_fields(spec: JoinSpec, side: str) -> list[tuple[str, str]]:
    """A side's output columns (the left's with ``ds`` last) with their Spark types."""
    types = {ARRIVAL_TIME: "timestamp", PARTITION: "int", OFFSET: "bigint"}
    schema = spec.side(side).schema_
    fields = [(c, SCHEMA_TYPES[schema[c]] if c in schema else types[c]) for c in side_columns(spec, side)]
    return [*fields, ("ds", "date")] if side == "left" else fields


def _packed(spec: JoinSpec, side: str, prefix: str) -> Column:
    """A side's output values as one JSON text, fields named by position (what a buffered event
    keeps: the operator only carries them to its output, :func:`_unpacked` reads them back)."""
    fields = [F.col(prefix + c).alias(str(i)) for i, (c, _) in enumerate(_side_fields(spec, side))]
    return F.to_json(F.struct(*fields), _JSON)


def _unpacked(spec: JoinSpec, side: str, packed: str) -> list[Column]:
    """The output columns of a side's JSON text (null where the text is: no match, a counter row)."""
    fields = _side_fields(spec, side)
    values = F.from_json(F.col(packed), ", ".join(f"`{i}` {t}" for i, (_, t) in enumerate(fields)), _JSON)
    return [values[str(i)].alias("ds" if c == "ds" else col_name(side, c)) for i, (c, _) in enumerate(fields)]


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

    lt, rt = spec.left, spec.right
    good = (is_left & F.col(_LEFT + "_reason").isNull()) | (is_right & F.col("_reason").isNull()) | (side == "tick")
    stream = parsed.where(good).select(
        F.when(is_left, _packed(spec, "left", _LEFT)).when(is_right, _packed(spec, "right", "")).alias(_ROW),
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
    stream = stream.withColumn(_SHARD, F.pmod(F.hash(*keys), F.lit(spec.streaming.paced.shards)))
    key_schema = StructType([stream.schema[k] for k in keys])
    processor = PacedJoinProcessor(rules_of(spec), dictionaries, stream.columns, key_schema)
    joined = stream.groupBy(_SHARD).transformWithState(
        statefulProcessor=processor, outputStructType=_OUTPUT_DDL, outputMode="Append", timeMode="EventTime"
    )
    left, right = _unpacked(spec, "left", _LEFT_ROW), _unpacked(spec, "right", _RIGHT_ROW)
    return joined.select(left[-1], *left[:-1], *right, REVISION, METRIC, COUNT)


def split_counters(batch: DataFrame) -> tuple[DataFrame, dict[str, int]]:
    """A micro-batch of :func:`paced_join` -> its join rows and its counters (summed)."""
    counts = {
        r[METRIC]: int(r["n"])
        for r in batch.where(F.col(METRIC).isNotNull()).groupBy(METRIC).agg(F.sum(COUNT).alias("n")).collect()
    }
    return batch.where(F.col(METRIC).isNull()).drop(METRIC, COUNT), counts


def due_keys(dues: dict[tuple, int], right_pt: int | None, stepped: Container[tuple] = ()) -> list[tuple]:
    """A shard's join keys with something to do once the right PT is ``right_pt`` (their next
    timer at or before it), but those ``stepped`` already."""
    if right_pt is None:
        return []
    return [k for k, due in dues.items() if due <= right_pt and k not in stepped]


def shard_timer(dues: dict[tuple, int], watermark: int) -> int | None:
    """The one timer a shard registers: its earliest key's next timer, but past the watermark (a
    key can still be due after its step: an id the left PT has not passed yet; a timer at or
    before the watermark is the one firing now, which Spark deletes once the call is done)."""
    return max(min(dues.values()), watermark + 1) if dues else None


class PacedJoinProcessor(StatefulProcessor):
    """One shard's calls: new rows of a micro-batch, or its timer (the right PT passed something).

    On Spark's Row interface (``transformWithState``), not the pandas one: a key holds a few events,
    and a pandas frame per key cost more than the join (paced ÷ native events/s 0.20 with frames,
    0.46 with rows; bench/paced.py, BENCHMARKS.md)."""

    #: State sizes are reported every this many keys stored (and on a task's first): a sample.
    SIZE_SAMPLE = 256

    def __init__(
        self,
        rules: Rules,
        dictionaries: Dictionaries | None,
        input_columns: list[str],
        key_schema: StructType,
    ):
        self.rules = rules
        self.dictionaries = dictionaries
        self.key_schema = key_schema
        at = {c: i for i, c in enumerate(input_columns)}
        self.at_side, self.at_lpt, self.at_rpt, self.at_row = at[_SIDE], at[_LPT], at[_RPT], at[_ROW]
        self.at_key = [at[f.name] for f in key_schema.fields]
        self.at_meta = [at[c] for c in (_T, _ARRIVAL, _POS, _OFF, _ID)]

    def init(self, handle: StatefulProcessorHandle) -> None:
        from pyspark.sql import Row

        self.handle = handle
        self.buffers = handle.getMapState(BUFFERS, self.key_schema, _BUFFERS)
        self.index = handle.getValueState("index", _INDEX)
        self.codec = StateCodec.of(self.dictionaries)
        self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)
        self.stored = 0
        self.output = Row(_LEFT_ROW, _RIGHT_ROW, REVISION, METRIC, COUNT)  # named: Spark asks a row for its dict

    def handleInputRows(self, key, rows, timerValues) -> Iterator:  # noqa: N802, N803
        events: dict[tuple, dict[str, list[Event]]] = {}
        lpt = rpt = -1
        for r in rows:
            side = r[self.at_side]
            lpt, rpt = max(lpt, r[self.at_lpt]), max(rpt, r[self.at_rpt])
            if side == "l" or side == "r":  # not a drain's tick
                t, a, p, o, i = (r[k] for k in self.at_meta)
                by_side = events.setdefault(tuple(r[k] for k in self.at_key), {"l": [], "r": []})
                by_side[side].append(Event(t, a, p, o, i, r[self.at_row]))
        if not events:  # a drain's ticks: the watermark they move fires the timers
            return
        dues, timer, known_lpt = self._index()
        lpt_, rpt_ = None if lpt < 0 else lpt, None if rpt < 0 else rpt
        for k, by_side in events.items():
            yield from self._step(k, by_side["l"], by_side["r"], lpt_, rpt_, dues)
        # the keys due by this micro-batch's right PT too, not only by the watermark their timers fire
        # by (Spark's: the last micro-batch's right PT, in a backlog most of an hour earlier)
        for k in due_keys(dues, rpt_, events):
            yield from self._step(k, [], [], lpt_, rpt_, dues)
        self._save_index(dues, timer, lpt_ if lpt_ is not None else known_lpt, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:  # noqa: N802, N803
        watermark = timerValues.getCurrentWatermarkInMs()
        dues, _, known_lpt = self._index()  # Spark deletes the timer that fired once this call is done
        for k in due_keys(dues, watermark):
            yield from self._step(k, [], [], known_lpt, watermark if watermark > 0 else None, dues)
        self._save_index(dues, None, known_lpt, watermark)

    def close(self) -> None:
        pass

    def _index(self) -> tuple[dict[tuple, int], int | None, int | None]:
        """The shard's keys' next timers, the timer it registered, and the left PT its last rows
        carried (a lower bound of the left stream's: PT never moves back), which its timers step by."""
        stored = self.index.get()
        if not stored:
            return {}, None, None
        kept = pickle.loads(stored[0])
        dues, lpt = kept if isinstance(kept, tuple) else (kept, None)  # a plain dict before the left PT was kept
        return dues, stored[1], lpt

    def _save_index(self, dues: dict[tuple, int], timer: int | None, lpt: int | None, watermark: int) -> None:
        """Keep the shard's index; its one timer moved (:func:`shard_timer`, each a state call)."""
        at = shard_timer(dues, watermark)
        if timer is not None and timer != at:
            self.handle.deleteTimer(timer)
        if at is not None and at != timer:
            self.handle.registerTimer(at)
        if dues:
            self.index.update((pickle.dumps((dues, lpt), protocol=pickle.HIGHEST_PROTOCOL), at))
        else:
            self.index.clear()

    def _step(self, k: tuple, lefts: list[Event], rights: list[Event], lpt, rpt, dues: dict[tuple, int]) -> Iterator:
        """One join key's step; ``dues`` gets its next timer (or loses it when the key is empty)."""
        stored = self.buffers.getValue(k) if k in dues else None  # a key with no timer holds nothing
        state = self.codec.loads(stored[0]) if stored else KeyState()
        out = step(state, self.rules, lefts, rights, lpt, rpt)
        due = next_timer(state, self.rules)
        if state.empty():
            if stored:
                self.buffers.removeKey(k)
            dues.pop(k, None)
        else:
            blob, raw = self.codec.dumps(state)
            self.buffers.updateValue(k, (blob,))
            assert due is not None  # a key that holds anything has a time to let it go
            dues[k] = due
            z = self.sizes
            z["state_keys"] += 1
            z["state_rows"] += len(state.lefts) + len(state.rights)
            z["state_raw_bytes"] += raw
            z["state_bytes"] += len(blob)
            self.stored += 1
            if self.stored % self.SIZE_SAMPLE == 1:  # a task's first key, then every SIZE_SAMPLE
                out.counts.update(z)
                self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)
        for left, right, revision in [(lft, rgt, 0) for lft, rgt in out.pairs] + out.corrections:
            yield self.output(left, right, revision, None, None)
        for name, n in out.counts.items():
            yield self.output(None, None, None, name, n)

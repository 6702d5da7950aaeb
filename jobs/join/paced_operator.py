"""The paced engine's join on Spark: both sides' typed events as one tagged stream, grouped by shard
(a hash of the join key, the paper's §6.2 "DB shard ID"), through :mod:`jobs.join.paced` per join
key inside ``transformWithState`` (RocksDB state).

The aligned source (:mod:`jobs.storage.aligned_source`) stamps every row with its micro-batch's
two PTs, and every micro-batch has a tick, a row with only them, which reaches every shard: each
shard is called every micro-batch and steps its keys due by that micro-batch's right PT. Spark's
own clock would be its event-time watermark, the previous micro-batch's right PT: a shard with no
records in a micro-batch closed its windows one trigger later (87% of the demo's non-matches at
a 1-minute trigger; its first-answer p99 33.5 min without the tick, 32.6 with it; BENCHMARKS.md).

Why shards, not keys, as Spark's grouping key: every grouping key's call costs the state server a
round trip to set it and one for its state, ~70 us each, and a key holds one or two events
(bench/paced.py: ~700 us a key with the join key as grouping key). A shard's call pays those once
for all its keys of the micro-batch: its keys' buffers are kept in blocks (read and written only
when one of their keys has something to do), and the shard keeps one small index of its keys'
next timers (the right PT at which each has something to do).

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
import zlib
from collections.abc import Container, Iterator
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, REVISION, col_name, side_columns
from jobs.join.paced import Event, KeyState, Rules, next_timer, step
from jobs.join.paced_state import Dictionaries, StateCodec, pack_block, unpack_block
from jobs.join.pacing import TICK
from jobs.join.records import parse_records
from jobs.spec import SCHEMA_TYPES, Cardinality, JoinSpec, JoinType

METRIC, COUNT = "paced_metric", "paced_count"
#: A sample of the state the operator wrote (:class:`PacedJoinProcessor`): keys, their buffered
#: rows, and their bytes pickled (raw) and as stored (compressed).
SIZE_COUNTERS = ("state_keys", "state_rows", "state_raw_bytes", "state_bytes")
#: The PT columns every row of the aligned source carries, kept through parsing.
PACE_COLUMNS = ("left_pt", "right_pt")
#: The control columns of the tagged stream, besides the join's key and packed values: a row's side,
#: PTs, times, Kafka position and id as one text (:func:`_meta`), and whether it is the tick (every
#: shard gets one).
_META, _IS_TICK = "paced_meta", "paced_is_tick"
#: How the operator keeps its state, recorded beside a paced checkpoint (an older one is refused at
#: start-up, :func:`jobs.steps.stream.guard_checkpoint_spec`): 1 a value state per join key; 2 by
#: shard, a buffered event's values as a tuple; 3 by shard, a key's buffers one value of its map
#: state, its values as their JSON text; 4 the keys' buffers in blocks of the shard, stepped by
#: Spark's event-time timers; 5 (now) every shard stepped by each micro-batch's tick, no timers.
STATE_LAYOUT = 5
STATE_LAYOUTS = {
    1: "its state per join key, from before it was kept by shard (streaming.paced.shards)",
    2: "buffered events' values as Python tuples, from before they were kept as their JSON text",
    3: "a key's buffers one value each, from before they were kept in blocks (streaming.paced.blocks)",
    4: "shards stepped by Spark's event-time timers, from before every micro-batch's tick stepped them",
}
#: A shard's blocks of join keys, its map state by block number (the state variable); a block's
#: value (its field) is its keys' buffers, pickled ``{key: blob}`` (:mod:`jobs.join.paced_state`).
BLOCKS, BUFFERS = "blocks", "buffers"
_BLOCK = StructType([StructField("block", IntegerType())])
_BUFFERS = StructType([StructField(BUFFERS, BinaryType())])
#: A shard's index: pickled ``({key: due}, {block})``: its keys' next timers and the blocks it holds.
_INDEX = StructType([StructField("dues", BinaryType())])
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
    record tagged with its side, key, times and Kafka position, in its key's shard; a micro-batch's
    tick (side ``tick``, only the PTs) in every shard, so that each steps its due keys by them.
    ``dictionaries``: where the state's compression dictionaries are kept (:mod:`jobs.join.paced_state`)."""
    keys = [f"paced_key{i}" for i in range(len(spec.left.key))]
    parsed = both_sides_parsed(raw, spec)
    side = F.col("side")
    is_left, is_right = side == "left", side == "right"

    lt, rt = spec.left, spec.right
    is_tick = side == TICK
    good = (is_left & F.col(_LEFT + "_reason").isNull()) | (is_right & F.col("_reason").isNull()) | is_tick
    stream = parsed.where(good).select(
        F.when(is_left, _packed(spec, "left", _LEFT)).when(is_right, _packed(spec, "right", "")).alias(_ROW),
        _meta(
            F.substring(side, 1, 1),
            F.col(PACE_COLUMNS[0]),
            F.col(PACE_COLUMNS[1]),
            F.when(is_left, F.unix_millis(F.col(_LEFT + lt.event_time))).when(
                is_right, F.unix_millis(F.col(rt.event_time))
            ),
            F.unix_millis(F.when(is_left, F.col(_LEFT + ARRIVAL_TIME)).otherwise(F.col(ARRIVAL_TIME))),
            F.when(is_left, F.col(_LEFT + PARTITION)).otherwise(F.col(PARTITION)),
            F.when(is_left, F.col(_LEFT + OFFSET)).otherwise(F.col(OFFSET)),
            F.when(is_left, F.col(_LEFT + lt.id).cast("string")).otherwise(F.col(rt.id).cast("string")),
        ).alias(_META),
        *[
            F.when(is_left, F.col(_LEFT + lk)).otherwise(F.col(rk)).alias(name)
            for lk, rk, name in zip(lt.key, rt.key, keys)
        ],
        is_tick.alias(_IS_TICK),
    )
    shards = spec.streaming.paced.shards
    every = F.sequence(F.lit(0), F.lit(shards - 1))  # one explode: the source is read once (above)
    own = F.array(shard_of([F.col(k) for k in keys], shards))
    stream = stream.select(
        *[c for c in stream.columns if c != _IS_TICK],
        F.explode(F.when(F.col(_IS_TICK), every).otherwise(own)).alias(_SHARD),
    )
    key_schema = StructType([stream.schema[k] for k in keys])
    processor = PacedJoinProcessor(
        rules_of(spec), dictionaries, stream.columns, key_schema, spec.streaming.paced.blocks
    )
    joined = stream.groupBy(_SHARD).transformWithState(
        statefulProcessor=processor, outputStructType=_OUTPUT_DDL, outputMode="Append", timeMode="None"
    )
    left, right = _unpacked(spec, "left", _LEFT_ROW), _unpacked(spec, "right", _RIGHT_ROW)
    return joined.select(left[-1], *left[:-1], *right, REVISION, METRIC, COUNT)


def shard_of(key: list[Column], shards: int) -> Column:
    """A join key's shard: which of the operator's grouping keys holds it."""
    return F.pmod(F.hash(*key), F.lit(shards))


def _meta(side: Column, left_pt: Column, right_pt: Column, *event: Column) -> Column:
    """A row's side (``l``, ``r``, ``t``: a tick), its micro-batch's PTs and, for an event,
    its time, arrival, Kafka partition and offset, and id (last: it may hold any character) as one
    text (:func:`meta_of` reads it): Spark's Row interface converts each column of a row on its own,
    ~1.3 us a value, and these eight were most of a row's columns."""
    return F.concat_ws("|", side, left_pt, right_pt, *event)


def meta_of(text: str) -> tuple[str, int, int, tuple | None]:
    """:func:`_meta`'s text -> (side, left PT, right PT, (time, arrival, partition, offset, id) or None)."""
    side, lpt, rpt, *event = text.split("|", 7)
    if side != "l" and side != "r":  # a tick: whatever its event columns held is not an event
        return side, int(lpt), int(rpt), None
    t, a, p, o, i = event
    return side, int(lpt), int(rpt), (int(t), int(a), int(p), int(o), i)


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


def block_of(key: tuple, blocks: int) -> int:
    """The block of its shard a join key's buffers are kept in: a hash stable across processes
    (Python's own ``hash`` of a string is salted per process)."""
    return zlib.crc32(repr(key).encode()) % blocks


class PacedJoinProcessor(StatefulProcessor):
    """One shard's call per micro-batch: its new rows, and the tick with the micro-batch's PTs.

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
        blocks: int,
    ):
        self.rules = rules
        self.nblocks = blocks
        self.dictionaries = dictionaries
        at = {c: i for i, c in enumerate(input_columns)}
        self.at_meta, self.at_row = at[_META], at[_ROW]
        self.at_key = [at[f.name] for f in key_schema.fields]

    def init(self, handle: StatefulProcessorHandle) -> None:
        from pyspark.sql import Row

        self.handle = handle
        self.blocks = handle.getMapState(BLOCKS, _BLOCK, _BUFFERS)
        self.index = handle.getValueState("index", _INDEX)
        self.codec = StateCodec.of(self.dictionaries)
        self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)
        self.stored = 0
        self.output = Row(_LEFT_ROW, _RIGHT_ROW, REVISION, METRIC, COUNT)  # named: Spark asks a row for its dict

    def handleInputRows(self, key, rows, timerValues) -> Iterator:  # noqa: N802, N803
        events: dict[tuple, tuple[list[Event], list[Event]]] = {}
        lpt = rpt = -1
        for r in rows:
            side, row_lpt, row_rpt, event = meta_of(r[self.at_meta])
            lpt, rpt = max(lpt, row_lpt), max(rpt, row_rpt)
            if event is not None:  # not the tick
                lefts, rights = events.setdefault(tuple(r[k] for k in self.at_key), ([], []))
                t, arrival, partition, offset, event_id = event
                (lefts if side == "l" else rights).append(
                    Event(t, arrival, partition, offset, event_id, r[self.at_row])
                )
        shard = self._shard()
        lpt_, rpt_ = None if lpt < 0 else lpt, None if rpt < 0 else rpt
        for k in due_keys(shard.dues, rpt_, events):  # the keys with no rows whose time has come
            events[k] = ([], [])
        if not events:  # the tick alone, nothing due: the index stays as it is
            return
        yield from self._step(events, lpt_, rpt_, shard)
        self._save(shard)

    def close(self) -> None:
        pass

    def _shard(self) -> _Shard:
        """The shard's index (:class:`_Shard`), as its last call left it."""
        stored = self.index.get()
        if not stored:
            return _Shard({}, set())
        dues, blocks = pickle.loads(stored[0])
        return _Shard(dues, blocks)

    def _save(self, shard: _Shard) -> None:
        if shard.dues:
            self.index.update((pickle.dumps((shard.dues, shard.blocks), protocol=pickle.HIGHEST_PROTOCOL),))
        else:
            self.index.clear()

    def _step(self, todo: dict[tuple, tuple[list[Event], list[Event]]], lpt, rpt, shard: _Shard) -> Iterator:
        """Step each join key of ``todo`` with its new left and right events, a block of the shard
        at a time: a block is read and written once for all its keys (each a state-server round trip,
        ~0.1 ms, which a key's own value paid two or three times per key; bench/paced.py), and a key
        not stepped stays the blob it was. The shard's index gets each key's next timer (or loses it
        when the key is empty)."""
        by_block: dict[int, list[tuple]] = {}
        for k in todo:
            by_block.setdefault(block_of(k, self.nblocks), []).append(k)
        for b, keys in by_block.items():
            stored = self.blocks.getValue((b,)) if b in shard.blocks else None
            blobs = unpack_block(stored[0]) if stored else {}
            for k in keys:
                blob = blobs.get(k)
                state = self.codec.loads(blob) if blob is not None else KeyState()
                out = step(state, self.rules, *todo[k], lpt, rpt)
                if state.empty():
                    blobs.pop(k, None)
                    shard.dues.pop(k, None)
                else:
                    blobs[k], raw = self.codec.dumps(state)
                    due = next_timer(state, self.rules)
                    assert due is not None  # a key that holds anything has a time to let it go
                    shard.dues[k] = due
                    self._sizes(state, raw, len(blobs[k]), out.counts)
                for left, right, revision in [(lft, rgt, 0) for lft, rgt in out.pairs] + out.corrections:
                    yield self.output(left, right, revision, None, None)
                for name, n in out.counts.items():
                    yield self.output(None, None, None, name, n)
            if blobs:
                self.blocks.updateValue((b,), (pack_block(blobs),))
                shard.blocks.add(b)
            elif stored:
                self.blocks.removeKey((b,))
                shard.blocks.discard(b)

    def _sizes(self, state: KeyState, raw: int, stored: int, counts: dict[str, int]) -> None:
        """Count a key's stored buffers; every :data:`SIZE_SAMPLE` keys, into ``counts`` (a sample)."""
        z = self.sizes
        z["state_keys"] += 1
        z["state_rows"] += len(state.lefts) + len(state.rights)
        z["state_raw_bytes"] += raw
        z["state_bytes"] += stored
        self.stored += 1
        if self.stored % self.SIZE_SAMPLE == 1:  # a task's first key, then every SIZE_SAMPLE
            counts.update(z)
            self.sizes = dict.fromkeys(SIZE_COUNTERS, 0)


@dataclass
class _Shard:
    """A shard's index: its keys' next timers (the right PT at which each has something to do) and
    the blocks it holds."""

    dues: dict[tuple, int]
    blocks: set[int]

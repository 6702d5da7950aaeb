"""Column names of the join: what landing adds to every event, and the prefixed output columns.

Every variant (the three batch baselines and the stream) writes rows of one shape:
``ds``, then ``left_<column>`` and ``right_<column>`` for each side's schema and Kafka position.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.spec import JoinSpec

#: Columns the landing job adds to every landed row (names start with "_" to stay clear of payloads).
ARRIVAL_TIME, PARTITION, OFFSET = "_arrival_time", "_partition", "_offset"

#: The stream's output only: when the row was emitted (a live or backlog run: the micro-batch's
#: wall time; replay-as-live: the end of its slice in record time, the simulated now), so event ->
#: output latency can be measured; a late correction that replaced a non-match keeps the
#: non-match's (:func:`first_answers`). Batch variants have no such column.
EMITTED_AT = "emitted_at"
#: The paced engine with late corrections only: when a row amended its left event's first answer
#: (null on a first answer); the row's ``revision`` says which correction it is (0: none).
AMENDED_AT = "amended_at"
#: The paced engine's output: which answer a row is for its left event (0 the first; 1, 2, ... late
#: corrections). Kept in the output table only with ``corrections``.
REVISION = "revision"


def col_name(side: str, column: str) -> str:
    """Output column of a side's column: ``left_event_time``, ``right_arrival_time``, ..."""
    return f"{side}_{column.lstrip('_')}"


def side_columns(spec: JoinSpec, side: str) -> list[str]:
    """The columns each side contributes to join output, before prefixing."""
    return [*spec.side(side).schema_, ARRIVAL_TIME, PARTITION, OFFSET]


def unique_columns(spec: JoinSpec, side: str) -> list[str]:
    """A side's output columns whose values are (nearly) unique per event: its id, event time,
    arrival time and Kafka offset (a key need not be: a user's events share it)."""
    st = spec.side(side)
    return [col_name(side, c) for c in dict.fromkeys((st.id, st.event_time, ARRIVAL_TIME, OFFSET))]


def output_columns(spec: JoinSpec) -> list[str]:
    return [
        "ds",
        *(col_name("left", c) for c in side_columns(spec, "left")),
        *(col_name("right", c) for c in side_columns(spec, "right")),
    ]


def output_latency_s(spec: JoinSpec) -> Column:
    """An output row's latency in seconds: :data:`EMITTED_AT` minus the row's latest event time (the
    later of the pair's event times; the left event's for a row with no match). The one definition
    the budget (``budgets.output_latency``), ``recommend --verify`` and the cut-over gate share."""
    lt = F.col(col_name("left", spec.left.event_time))
    rt = F.col(col_name("right", spec.right.event_time))
    latest = F.greatest(lt, F.coalesce(rt, lt))
    return (F.unix_micros(F.col(EMITTED_AT)) - F.unix_micros(latest)) / 1e6


def first_answers(out: DataFrame, spec: JoinSpec) -> DataFrame:
    """The stream's output as first emitted. With late corrections, a row of revision 1 replaced its
    left event's first answer, a non-match, and kept its ``emitted_at``: it is that non-match again
    (its right columns null); later revisions are later answers, left out. (A revision 1 always
    finds its non-match: both are written in the left event's ds partition, by the run that owns
    it.)"""
    if REVISION not in out.columns:
        return out
    right = {col_name("right", c) for c in side_columns(spec, "right")}
    replaced = F.col(REVISION) == 1
    return out.where(F.col(REVISION) <= 1).select(
        *[F.when(~replaced, F.col(c)).alias(c) if c in right else F.col(c) for c in out.columns]
    )


def stream_output_columns(spec: JoinSpec) -> list[str]:
    """The stream's output table: the join's columns and :data:`EMITTED_AT` (with late corrections,
    :data:`REVISION` and :data:`AMENDED_AT` too)."""
    amends = [REVISION, AMENDED_AT] if spec.corrections.horizon is not None else []
    return [*output_columns(spec), EMITTED_AT, *amends]


def prefixed(events: DataFrame, spec: JoinSpec, side: str) -> DataFrame:
    """A side's events with prefixed columns (left keeps ``ds``: output is partitioned by it)."""
    cols = [F.col(c).alias(col_name(side, c)) for c in side_columns(spec, side)]
    if side == "left":
        cols.append(F.col("ds"))
    return events.select(*cols)

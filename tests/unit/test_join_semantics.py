"""Join semantics on tiny hand-built data; every expected answer is written out by hand.

Window [-10m, +5m] (right.t in [left.t − 10m, left.t + 5m], inclusive), key ``k``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from tiny_spec import tiny_spec, tiny_spec_data

from jobs.join.conditions import Handover, join_events, join_streams, match_condition
from jobs.spec import parse_spec

SCHEMA = "event_id string, k string, t timestamp, _arrival_time timestamp, _partition int, _offset long, ds date"


def ts(hhmmss: str, day: int = 20) -> datetime:
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return datetime(2026, 11, day, h, m, s, tzinfo=UTC)


def events(spark, rows):
    """rows: (event_id, key, event 'HH:MM:SS', arrival 'HH:MM:SS'[, day, arrival_day, partition, offset])"""
    out = []
    for i, r in enumerate(rows):
        eid, k, t, arr, *rest = r
        day = rest[0] if len(rest) > 0 else 20
        arr_day = rest[1] if len(rest) > 1 else day
        part = rest[2] if len(rest) > 2 else 0
        off = rest[3] if len(rest) > 3 else i
        out.append((eid, k, ts(t, day), ts(arr, arr_day), part, off, date(2026, 11, arr_day)))
    return spark.createDataFrame(out, SCHEMA)


def pairs(df):
    return sorted((r.left_event_id, r.right_event_id) for r in df.select("left_event_id", "right_event_id").collect())


def assert_pairs(df, expected):
    """The join output's (left_event_id, right_event_id) rows are exactly ``expected``, duplicates
    counted, order ignored."""
    assertDataFrameEqual(
        df.select("left_event_id", "right_event_id"),
        [Row(left_event_id=left, right_event_id=right) for left, right in expected],
    )


def test_bounds_are_inclusive_and_keys_must_be_equal(spark):
    spec = tiny_spec()
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01")])
    right = events(
        spark,
        [
            ("R_lower", "a", "11:50:00", "12:01:00"),  # exactly l.t − 10m: in
            ("R_before", "a", "11:49:59", "12:01:00"),  # one second too early: out
            ("R_upper", "a", "12:05:00", "12:06:00"),  # exactly l.t + 5m: in
            ("R_after", "a", "12:05:01", "12:06:00"),  # one second too late: out
            ("R_otherkey", "b", "12:00:00", "12:01:00"),  # in the window, other key: out
        ],
    )
    assert_pairs(join_events(left, right, spec, windowed=True), [("L1", "R_lower"), ("L1", "R_upper")])
    assert_pairs(
        join_events(left, right, spec, windowed=False),
        [("L1", "R_after"), ("L1", "R_before"), ("L1", "R_lower"), ("L1", "R_upper")],
    )


def test_the_batch_window_is_exact_to_the_microsecond_and_adds_no_interval(spark):
    """The batch condition compares microseconds (no zone lookup a pair); the stream's keeps the
    interval form Spark derives the join state's eviction from. Both keep the bounds inclusive."""
    from datetime import timedelta

    spec = tiny_spec()
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01")])
    us = timedelta(microseconds=1)
    at = [("R_lower", ts("11:50:00")), ("R_under", ts("11:50:00") - us), ("R_upper", ts("12:05:00")),
          ("R_over", ts("12:05:00") + us)]  # fmt: skip
    right = spark.createDataFrame(
        [(rid, "a", t, ts("12:06:00"), 0, i, date(2026, 11, 20)) for i, (rid, t) in enumerate(at)], SCHEMA
    )
    batch = join_events(left, right, spec, windowed=True)
    assert_pairs(batch, [("L1", "R_lower"), ("L1", "R_upper")])
    assert "INTERVAL" not in batch._jdf.queryExecution().optimizedPlan().toString()
    assert "INTERVAL" in str(match_condition(spec, stream=True))  # its bounds: the stream tests below


def test_left_outer_keeps_unmatched_left_with_null_right_and_inner_drops_it(spark):
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01"), ("L2", "zzz", "12:00:00", "12:00:01")])
    right = events(spark, [("R1", "a", "12:01:00", "12:02:00")])
    outer = join_events(left, right, tiny_spec(), windowed=True)
    assert_pairs(outer, [("L1", "R1"), ("L2", None)])
    nulls = outer.where("left_event_id = 'L2'").select("right_k", "right_t", "right_arrival_time").first()
    assert nulls == (None, None, None)
    inner = join_events(left, right, tiny_spec(join={"type": "inner", "cardinality": "1-to-n"}), windowed=True)
    assert_pairs(inner, [("L1", "R1")])


def test_one_to_one_keeps_the_first_arrived_match_then_partition_then_offset(spark):
    spec = tiny_spec(join={"type": "left_outer", "cardinality": "1-to-1"})
    left = events(spark, [("L1", "a", "12:00:00", "12:00:01"), ("L2", "b", "12:00:00", "12:00:01")])
    right = events(
        spark,
        [
            ("R_early_event_late_arrival", "a", "11:55:00", "12:20:00", 20, 20, 0, 1),
            ("R_late_event_early_arrival", "a", "12:04:00", "12:04:30", 20, 20, 0, 2),
            # same arrival instant for key b: partition 0 beats partition 1, then lower offset
            ("R_b_p1", "b", "12:01:00", "12:03:00", 20, 20, 1, 0),
            ("R_b_p0_o9", "b", "12:02:00", "12:03:00", 20, 20, 0, 9),
            ("R_b_p0_o8", "b", "12:03:00", "12:03:00", 20, 20, 0, 8),
        ],
    )
    assert_pairs(
        join_events(left, right, spec, windowed=True), [("L1", "R_late_event_early_arrival"), ("L2", "R_b_p0_o8")]
    )


def test_midnight_cutoff_1d_to_1d_misses_what_1d_to_2d_finds(spark):
    """A click at 23:55 that arrives at 00:10 lands in the next ds (partitions are by arrival)."""
    spec = tiny_spec()
    left_ds20 = events(spark, [("L1", "a", "23:50:00", "23:50:05", 20, 20)])
    right_all = events(spark, [("R1", "a", "23:55:00", "00:10:00", 20, 21)])
    right_ds20 = right_all.where(F.col("ds") == date(2026, 11, 20))
    right_ds20_21 = right_all.where(F.col("ds").isin(date(2026, 11, 20), date(2026, 11, 21)))
    assert_pairs(join_events(left_ds20, right_ds20, spec, windowed=False), [("L1", None)])  # batch_1d_1d
    assert_pairs(join_events(left_ds20, right_ds20_21, spec, windowed=False), [("L1", "R1")])  # batch_1d_2d
    assert_pairs(join_events(left_ds20, right_ds20, spec, windowed=True), [("L1", None)])  # batch_1d_windowed


# ------------------------------------------------------------------ streaming semantics


class _FileStreams:
    """Feeds the streaming core micro-batch by micro-batch through file sources."""

    def __init__(self, spark, root, spec, left_from=None):
        self.spark, self.root = spark, root
        for side in ("left", "right"):
            (root / side).mkdir()
        schema = SCHEMA
        left = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(root / "left"))
        right = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(root / "right"))
        self.query = (
            join_streams(left, right, spec, left_from=left_from)
            .writeStream.format("memory")
            .queryName("tiny_stream_out")
            .outputMode("append")
            .start()
        )
        self.step = 0

    def feed(self, left_rows, right_rows):
        """One file per side per step; empty sides get an empty file so the steps stay aligned."""
        self.step += 1
        for side, rows in (("left", left_rows), ("right", right_rows)):
            lines = []
            for eid, k, t, arr, *partition in rows:  # Kafka partition 0 unless a row names one
                lines.append(
                    json.dumps(
                        {
                            "event_id": eid,
                            "k": k,
                            "t": ts(t).isoformat(),
                            "_arrival_time": ts(arr).isoformat(),
                            "_partition": partition[0] if partition else 0,
                            "_offset": self.step,
                            "ds": "2026-11-20",
                        }
                    )
                )
            (self.root / side / f"{self.step:04d}.json").write_text("\n".join(lines) + "\n")
        self.query.processAllAvailable()
        self.query.processAllAvailable()  # the no-data batch that applies the new watermark

    def table(self):
        return self.spark.table("tiny_stream_out")

    def output(self):
        return pairs(self.table())

    def stop(self):
        self.query.stop()


@pytest.fixture()
def file_streams(spark, tmp_path):
    made = []

    def make(spec, left_from=None):
        fs = _FileStreams(spark, tmp_path, spec, left_from)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.stop()


def test_stream_matches_emit_at_once_nulls_only_after_the_window_closed_and_late_rows_drop(file_streams):
    s = file_streams(tiny_spec())  # watermark delay 0 on both sides: everything behind max(t) is late
    s.feed(
        [("L1", "a", "12:00:00", "12:00:01"), ("L2", "c", "12:00:00", "12:00:01")],
        [("R1", "a", "12:02:00", "12:02:01")],
    )
    assert_pairs(s.table(), [("L1", "R1")])  # a match is emitted at once
    s.feed([("L3", "x", "12:03:00", "12:03:01")], [("R9", "x", "12:04:00", "12:04:01")])
    # watermark = min(12:03 left, 12:04 right) = 12:03; L2's window [11:50, 12:05] is still open
    assert_pairs(s.table(), [("L1", "R1"), ("L3", "R9")])
    s.feed([("L4", "y", "12:30:00", "12:30:01")], [("R8", "y", "12:31:00", "12:31:01")])
    # watermark 12:30 passed 12:05: L2's window closed without a match -> its null row now
    assert ("L2", None) in s.output()
    s.feed([], [("R_late", "c", "12:04:00", "12:32:00")])  # in L2's window but behind the watermark
    assert ("L2", "R_late") not in s.output()
    assert_pairs(s.table(), [("L1", "R1"), ("L2", None), ("L3", "R9"), ("L4", "R8")])


def test_a_replay_joins_no_left_event_from_before_its_cut_over_but_still_de_duplicates_it(file_streams):
    """A replay's left events that arrived before the cut-over are the old run's: no pair, no
    non-match row, no state; their ids still drop a re-send arriving after the cut-over."""
    data = tiny_spec_data()
    data["left"]["watermark_delay"] = data["right"]["watermark_delay"] = "30m"  # the re-send is not late
    s = file_streams(parse_spec(data), left_from=Handover(ts("12:00:00")))
    s.feed(
        [("L_old", "a", "11:58:00", "11:58:30"), ("L_new", "b", "12:00:30", "12:00:31")],
        [("R_a", "a", "11:59:00", "11:59:10"), ("R_b", "b", "12:01:00", "12:01:05")],
    )
    assert_pairs(s.table(), [("L_new", "R_b")])  # L_old is in R_a's window, but the old run owns it
    s.feed([("L_old", "a", "11:58:00", "12:02:00")], [("R_a2", "a", "11:59:30", "12:02:10")])  # its re-send
    assert_pairs(s.table(), [("L_new", "R_b")])
    s.feed([("L_z", "z", "14:00:00", "14:00:01")], [("R_z", "z", "14:00:00", "14:00:01")])  # windows close
    assert_pairs(s.table(), [("L_new", "R_b"), ("L_z", "R_z")])  # no non-match row for L_old either


def test_a_replay_owns_the_left_events_the_old_run_never_read_whenever_they_arrived(file_streams):
    """The old run read partition 0 up to offset 2 (the feeds' offsets are their step numbers): a
    left event at offset 2 that arrived before the cut-over is the new run's (nobody else would
    write it), one at offset 1 the old run's; a partition the old run did not know is the new
    run's whole."""
    data = tiny_spec_data()
    data["left"]["watermark_delay"] = data["right"]["watermark_delay"] = "30m"
    s = file_streams(parse_spec(data), left_from=Handover(ts("12:00:00"), {0: 2}))
    s.feed(
        [("L_read", "a", "11:50:00", "11:50:30"), ("L_new_partition", "c", "11:50:00", "11:50:30", 3)],
        [("R_a", "a", "11:51:00", "11:51:10"), ("R_c", "c", "11:51:00", "11:51:10")],
    )
    s.feed([("L_unread", "b", "11:55:00", "11:55:30")], [("R_b", "b", "11:56:00", "11:56:10")])
    assert_pairs(s.table(), [("L_new_partition", "R_c"), ("L_unread", "R_b")])


def test_a_replay_owns_the_left_events_whose_window_the_old_run_still_held_open(file_streams):
    """The old run read everything here (offsets below 99) and stopped with its watermark at 11:50:
    with the window's upper bound of 5 minutes it had evicted (written the non-match of) left
    events of event time up to 11:45, and still held the later ones open. Those are the new run's,
    though they arrived before the cut-over, or a click arriving after the stop found nobody."""
    data = tiny_spec_data()
    data["left"]["watermark_delay"] = data["right"]["watermark_delay"] = "30m"
    spec = parse_spec(data)
    s = file_streams(spec, left_from=Handover(ts("12:00:00"), {0: 99}, open_from=ts("11:50:00") - spec.window.upper))
    s.feed(
        [("L_closed", "a", "11:44:00", "11:44:30"), ("L_open", "b", "11:46:00", "11:46:30")],
        [("R_a", "a", "11:45:00", "11:55:10"), ("R_b", "b", "11:47:00", "11:55:10")],
    )
    assert_pairs(s.table(), [("L_open", "R_b")])


def test_batch_1d_2d_reads_the_days_the_window_reaches_into():
    from jobs.join.variants import missing_days, right_days

    d = date(2026, 11, 20)
    assert right_days(tiny_spec(), "batch_1d_2d", d) == [date(2026, 11, 19), d, date(2026, 11, 21)]
    assert right_days(tiny_spec(window={"lower": "0s", "upper": "+1h"}), "batch_1d_2d", d) == [d, date(2026, 11, 21)]
    assert right_days(tiny_spec(window={"lower": "-1h", "upper": "0s"}), "batch_1d_2d", d) == [date(2026, 11, 19), d]
    assert right_days(tiny_spec(), "batch_1d_windowed", d) == [d]
    # the day before the first landed day is history the pipeline never had, not a gap
    assert missing_days([date(2026, 11, 19), d, date(2026, 11, 21)], [d]) == [date(2026, 11, 21)]


@pytest.mark.parametrize(
    ("window", "left_delay", "refused"),
    [
        ({"lower": "-1500ms", "upper": "+5m"}, "1m", "window: lower: -1s500ms is not a whole number of seconds"),
        ({"lower": "-10m", "upper": "250ms"}, "1m", "window: upper: +250ms is not a whole number of seconds"),
        ({"lower": "-10m", "upper": "+5m"}, "2.5s", "left.watermark_delay: 2s500ms is not a whole number of seconds"),
    ],
)
def test_a_bound_or_watermark_under_a_second_is_refused_not_truncated(window, left_delay, refused):
    """Every engine keeps them in whole seconds: ``+1500ms`` had become +1 s in batch, stream and
    sweep alike, while the spec's label still said +1.5 s."""
    from jobs.spec import SpecError

    data = tiny_spec_data(window=window)
    data["left"]["watermark_delay"] = left_delay
    with pytest.raises(SpecError, match=re.escape(refused)):
        parse_spec(data)
    assert tiny_spec(window={"lower": "-90s", "upper": "1m30s"}).window.label() == "[-1m30s, +1m30s]"

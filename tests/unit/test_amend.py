"""Late corrections merged into a join output (``delta_io.amend``): which row a correction replaces,
and which of its times stay, through a micro-batch run again after a crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
SCHEMA = "ds string, left_id string, right_id string, revision int, emitted_at timestamp, amended_at timestamp"


def test_a_correction_keeps_the_first_answers_time_and_a_rerun_keeps_both_times(spark, tmp_path):
    from jobs.storage import delta_io

    path = str(tmp_path / "out")
    at = lambda minutes: T + timedelta(minutes=minutes)  # noqa: E731
    first = [("2026-11-20", "L1", None, 0, at(0), None), ("2026-11-20", "L2", "R9", 0, at(0), None)]
    spark.createDataFrame(first, SCHEMA).write.format("delta").save(path)

    def amend(when):  # a micro-batch's corrections, stamped with its time
        fixes = [("2026-11-20", "L1", "R1", 1, when, when), ("2026-11-20", "L1", "R2", 2, when, when)]
        keep = ["emitted_at", "amended_at"]
        delta_io.amend(spark.createDataFrame(fixes, SCHEMA), path, "left_id", "right_id", "revision", keep=keep)

    def rows():
        got = spark.read.format("delta").load(path).orderBy("left_id", "revision").collect()
        return [(r.left_id, r.right_id, r.revision, r.emitted_at, r.amended_at) for r in got]

    amend(at(30))
    after = rows()
    as_local = lambda d: d.astimezone().replace(tzinfo=None)  # noqa: E731 (Spark hands back local time)
    assert after == [
        ("L1", "R1", 1, as_local(at(0)), as_local(at(30))),  # the non-match replaced: its first answer's time
        ("L1", "R2", 2, as_local(at(30)), as_local(at(30))),  # a row of its own
        ("L2", "R9", 0, as_local(at(0)), None),
    ]
    amend(at(45))  # the same micro-batch run again after a crash, later
    assert rows() == after

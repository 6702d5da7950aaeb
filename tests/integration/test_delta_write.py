"""A partition overwrite counts the rows it writes, and a table it makes keeps file statistics on
the named columns only; timestamps are Parquet's 64-bit microseconds, not Spark's default INT96."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration


def test_replace_partitions_counts_and_lays_out_a_new_table(spark, tmp_path):
    from jobs.storage import delta_io

    df = spark.range(500).selectExpr(
        "concat('L', id) AS left_event_id", "timestamp_seconds(id) AS t", "date'2026-11-20' AS ds"
    )
    path = str(tmp_path / "out")
    n = delta_io.replace_partitions(df, path, {"ds": ["2026-11-20"]}, stats_columns=["t"])
    assert n == 500 == spark.read.format("delta").load(path).count()
    props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert props["delta.dataSkippingStatsColumns"] == "t"
    adds = [json.loads(line)["add"] for f in sorted((tmp_path / "out" / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if '"add"' in line]  # fmt: skip
    assert adds and all(set(json.loads(a["stats"])["minValues"]) == {"t"} for a in adds)
    for a in adds:
        meta = pq.ParquetFile(tmp_path / "out" / a["path"]).metadata.row_group(0)
        types = {meta.column(i).path_in_schema: meta.column(i).physical_type for i in range(meta.num_columns)}
        assert types["t"] == "INT64"  # TIMESTAMP_MICROS (BASE_CONF)
    assert spark.read.format("delta").load(path).where("t = timestamp_seconds(499)").count() == 1

    # an overwrite of the partition counts what it wrote, not what the table holds
    assert delta_io.replace_partitions(df.limit(120), path, {"ds": ["2026-11-20"]}) == 120


def test_plain_columns_are_written_without_a_dictionary_in_new_and_old_tables(spark, tmp_path):
    """``plain_columns`` reach Parquet's writer through the session, for the write that makes the
    table and for a later one (a table property would reach only the first), and the session's
    settings are as before afterwards. Repeated values: parquet-java would keep a dictionary."""
    from jobs.storage import delta_io

    df = spark.range(600).selectExpr(
        "concat('s', id % 7) AS plain", "concat('s', id % 7) AS kept", "date'2026-11-20' AS ds"
    )
    path = str(tmp_path / "out")
    for _ in range(2):  # makes the table, then replaces its partition
        assert delta_io.replace_partitions(df, path, {"ds": ["2026-11-20"]}, plain_columns=["plain"]) == 600
        for f in spark.read.format("delta").load(path).inputFiles():
            meta = pq.ParquetFile(f.removeprefix("file:")).metadata.row_group(0)
            enc = {meta.column(i).path_in_schema: set(meta.column(i).encodings) for i in range(meta.num_columns)}
            assert not any("DICTIONARY" in e for e in enc["plain"]), enc["plain"]
            assert any("DICTIONARY" in e for e in enc["kept"]), enc["kept"]
    assert spark.conf.get("parquet.enable.dictionary#plain", None) is None


def test_a_join_output_writes_each_sides_unique_columns_plain(demo_spec):
    from jobs.join.columns import output_columns
    from jobs.steps.batch import output_layout

    plain = output_layout(demo_spec)["plain_columns"]
    assert set(plain) <= set(output_columns(demo_spec))
    assert {"left_event_id", "right_event_id", "left_event_time", "right_offset"} <= set(plain)
    assert not {"left_session_id", "right_session_id", "ds"} & set(plain)  # keys repeat


def test_a_micro_batch_with_no_rows_records_no_commit(spark, tmp_path):
    """The stream's sinks append each micro-batch without checking it for rows first (a second
    action on the batch): Delta must record no commit for an empty one (BASE_CONF)."""
    from jobs.storage import delta_io

    rows = spark.range(5).selectExpr("id", "date'2026-11-20' AS ds")
    path = str(tmp_path / "out")
    append = delta_io.BatchAppender(path, lambda: "writer-1")
    assert append(rows, 0)
    assert append(rows.limit(0), 1)  # nothing to write
    assert append(rows, 2)
    assert len(spark.sql(delta_io.history_sql(path, 10)).collect()) == 2
    assert delta_io.committed_batches(spark, path, "writer-1") == {0, 2}
    assert spark.read.format("delta").load(path).count() == 10


def test_a_table_written_with_int96_timestamps_takes_int64_ones(spark, tmp_path):
    """Tables written before timestamps became INT64 go on: new files beside old INT96 ones are
    read, filtered and overwritten as one table."""
    from jobs.storage import delta_io
    from jobs.storage.spark import conf_for

    def day(ds: str, first: int):
        return spark.range(first, first + 100).selectExpr("timestamp_seconds(id) AS t", f"date'{ds}' AS ds")

    path = str(tmp_path / "out")
    with conf_for(spark, {"spark.sql.parquet.outputTimestampType": "INT96"}):
        delta_io.replace_partitions(day("2026-11-19", 0), path, {"ds": ["2026-11-19"]}, stats_columns=["t"])
    delta_io.replace_partitions(day("2026-11-20", 86_400), path, {"ds": ["2026-11-20"]})
    kinds = {
        (f.parent.name, pq.ParquetFile(f).metadata.row_group(0).column(0).physical_type)
        for f in (tmp_path / "out").glob("ds=*/*.parquet")
    }
    assert kinds == {("ds=2026-11-19", "INT96"), ("ds=2026-11-20", "INT64")}
    table = spark.read.format("delta").load(path)
    assert table.count() == 200
    assert table.where("t >= timestamp_seconds(50) AND t < timestamp_seconds(86450)").count() == 100
    delta_io.replace_partitions(day("2026-11-19", 10), path, {"ds": ["2026-11-19"]})
    assert spark.read.format("delta").load(path).agg({"t": "min"}).first()[0].timestamp() == 10


def test_table_exists_answers_from_the_file_system_or_from_spark(spark, tmp_path):
    """No ``_delta_log`` folder: no table, without asking Spark (whose refusal is a costly Java
    exception). A ``_delta_log`` folder with no commit in it is Spark's to judge: no table either."""
    from jobs.storage import delta_io

    path = tmp_path / "t"
    assert not delta_io.table_exists(spark, str(path))
    path.mkdir()
    assert not delta_io.table_exists(spark, f"file://{path}")
    (path / "_delta_log").mkdir()
    assert not delta_io.table_exists(spark, str(path))
    spark.range(3).write.format("delta").mode("append").save(str(path))
    assert delta_io.table_exists(spark, str(path)) and delta_io.table_exists(spark, f"file://{path}")

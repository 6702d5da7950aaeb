"""The paced operator's Spark shell: a side's output values packed into one JSON text before the
operator and read back after it, exactly (the operator carries them, never reads them)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest


@pytest.mark.parametrize("timezone", ["UTC", "America/Los_Angeles"])
def test_a_sides_values_come_back_from_their_packed_text_exactly(spark, demo_spec, timezone):
    from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION, col_name
    from jobs.join.paced_operator import _packed, _unpacked

    schema = {**demo_spec.left.schema_, "score": "double", "seen": "boolean", "clicks": "long"}
    spec = demo_spec.model_copy(update={"left": demo_spec.left.model_copy(update={"schema_": schema})})
    fold = datetime(2026, 11, 1, 9, 30, 0, 123456, tzinfo=UTC)  # 01:30 in Los Angeles the second time that night
    rows = [
        ("e1", "s1", fold, "", 0, 0.1 + 0.2, True, 2**40, fold, 3, 2**33, date(2026, 11, 1)),
        ("e2", None, datetime(2026, 11, 20, 0, 0, 0, 1, tzinfo=UTC), 'a "quoted", {x}', None, None, False, None,
         datetime(2026, 11, 20, 0, 0, 1, tzinfo=UTC), 0, 0, date(2026, 11, 20)),
    ]  # fmt: skip
    names = [*schema, ARRIVAL_TIME, PARTITION, OFFSET, "ds"]
    ddl = (
        "event_id string, session_id string, event_time timestamp, query string, result_count int, score double, "
        f"seen boolean, clicks bigint, {ARRIVAL_TIME} timestamp, {PARTITION} int, {OFFSET} bigint, ds date"
    )
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", timezone)
    try:
        events = spark.createDataFrame(rows, ddl)
        packed = events.select(_packed(spec, "left", "").alias("text"))
        back = packed.select(*_unpacked(spec, "left", "text")).collect()
        original = events.collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert [r.asDict() for r in back] == [
        {("ds" if c == "ds" else col_name("left", c)): r[c] for c in names} for r in original
    ]
    assert back[0][col_name("left", "event_time")] == original[0]["event_time"]  # to the microsecond


def test_a_shard_steps_every_key_due_by_this_micro_batchs_right_pt():
    """Not only the keys with rows: every shard is called each micro-batch (its tick), and steps its
    keys whose time has come by that micro-batch's right PT."""
    from jobs.join.paced_operator import due_keys

    dues = {("a",): 100, ("b",): 250, ("c",): 200}
    assert due_keys(dues, 200) == [("a",), ("c",)]
    assert due_keys(dues, 200, stepped={("a",): None}) == [("c",)]
    assert due_keys(dues, 99) == [] and due_keys(dues, None) == []


def test_a_keys_block_is_the_same_in_every_process():
    """A block written by one Python worker is read by whichever holds its shard next: Python's own
    hash of a string is salted per process, so a key's block must not come from it."""
    import os
    import subprocess
    import sys

    from jobs.join.paced_operator import block_of

    keys = [("s1",), ("s2",), ("session-42", 7), (12345,)]
    code = f"from jobs.join.paced_operator import block_of; print([block_of(k, 16) for k in {keys!r}])"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str([block_of(k, 16) for k in keys])}
    assert {block_of((f"s{i}",), 4) for i in range(100)} == {0, 1, 2, 3}


def test_the_paced_engines_python_processes_import_its_modules_without_pandas():
    """Spark starts a Python process for each of the source's planning steps and for the operator's
    driver side, in a row before the first micro-batch: none of them needs pandas (~1.5 s to import
    here), so the modules they load do not import it (bench.paced_first_batch)."""
    import subprocess
    import sys

    code = "import sys, jobs.storage.aligned_source, jobs.join.paced_operator; print('pandas' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_a_block_keeps_the_blobs_of_keys_not_stepped_as_they_were():
    from jobs.join.paced import Event, KeyState
    from jobs.join.paced_state import StateCodec, pack_block, unpack_block

    codec = StateCodec.of(None)
    state = KeyState()
    state.lefts.append(Event(1, 2, 0, 5, "e1", '{"0":"x"}'))
    blobs = {("a",): codec.dumps(state)[0], ("b", 2): b"z-not-read"}
    back = unpack_block(pack_block(blobs))
    assert back == blobs and codec.loads(back[("a",)]).lefts == state.lefts


def test_a_rows_meta_text_reads_back_its_side_pts_and_event(spark):
    """The side, PTs and event columns travel as one text; an id may hold the separator, and a
    micro-batch's tick (no event time) reads as no event whatever its other columns held."""
    from pyspark.sql import functions as F

    from jobs.join.paced_operator import _meta, meta_of

    rows = [
        ("l", 5, 7, 1_700_000_000_123, 1_700_000_000_456, 2, 40, "id|with|bars"),
        ("t", 9, 9, None, 99, -1, 0, None),
    ]
    df = spark.createDataFrame(rows, "s string, l long, r long, t long, a long, p int, o long, i string")
    texts = [r[0] for r in df.select(_meta(*[F.col(c) for c in df.columns])).collect()]
    assert [meta_of(t) for t in texts] == [
        ("l", 5, 7, (1_700_000_000_123, 1_700_000_000_456, 2, 40, "id|with|bars")),
        ("t", 9, 9, None),
    ]

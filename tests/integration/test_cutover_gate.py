"""The cut-over gate end to end on real Spark, Delta and Airflow (``dag.test()``), through the CLI.

A small pipeline of its own with five crafted days (20 searches a day, most clicked): landed
tables, the batch baseline joined by the product's join, the stream's output equal to it with an
``emitted_at`` ten minutes after each search, match metrics from ``compare``. On the second day
the stream lost four clicked searches, so that day breaks the SLO and promotion waits; after
three good days in a row (the last evaluated by the ``joinshift_gate`` DAG) it promotes; forced
promotions (reason recorded) go on to retire, which pauses ``joinshift_daily``; rollbacks one
stage at a time (retired, cutover, canary) unpause the batch DAG and restore the batch view.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NAME = "gate_it"
DAYS = [date(2026, 11, 16) + timedelta(days=i) for i in range(5)]
BAD_DAY = DAYS[1]
LOST = 4


def _run(argv: list[str]) -> tuple[int, str]:
    from jobs.cli import CommandFailed, main

    try:
        return main(argv), ""
    except CommandFailed as exc:
        return int(exc.code or 0), str(exc)


def _events(spark, spec, side: str, rows: list[tuple]):
    from pyspark.sql import functions as F

    st = spec.side(side)
    schema = ", ".join(f"{c} {'timestamp' if t == 'timestamp' else 'int' if t == 'int' else 'string'}"
                       for c, t in st.schema_.items())  # fmt: skip
    df = spark.createDataFrame(rows, schema)
    return df.select(
        *st.schema_,
        (F.col(st.event_time) + F.expr("INTERVAL 1 MINUTE")).alias("_arrival_time"),
        F.lit(0).alias("_partition"),
        F.monotonically_increasing_id().alias("_offset"),
        F.to_date(F.col(st.event_time) + F.expr("INTERVAL 1 MINUTE")).alias("ds"),
    )


@pytest.fixture(scope="module")
def pipeline(spark, dagbag, own_pipeline_spec, test_root, test_settings):
    from pyspark.sql import functions as F

    from jobs.join.conditions import join_events
    from jobs.operate.health import health_log
    from jobs.spec import Budgets, CutoverSpec, HealthSpec, write_spec
    from jobs.storage.tables import Tables

    spec = own_pipeline_spec(
        NAME,
        cutover=CutoverSpec(days_required=3),
        budgets=Budgets(output_latency=timedelta(hours=1)),
        health=HealthSpec(max_restarts_per_day=2),
    )
    spec_file = write_spec(spec, test_root / NAME / "spec.yaml")
    tables = Tables.of(spec)
    left, right = [], []
    for d in DAYS:
        for i in range(20):
            t = datetime(d.year, d.month, d.day, 8 + i // 2, 7 * i % 60)
            left.append((f"{d}-l{i}", f"{d}-s{i}", t, "shoes", 10))
            if i < 15:  # 15 of 20 searches are clicked 5 minutes later
                right.append((f"{d}-r{i}", f"{d}-s{i}", t + timedelta(minutes=5), "click", 1))
    lf, rf = _events(spark, spec, "left", left), _events(spark, spec, "right", right)
    lf.write.format("delta").partitionBy("ds").save(tables.landed("left"))
    rf.write.format("delta").partitionBy("ds").save(tables.landed("right"))
    lf, rf = (spark.read.format("delta").load(tables.landed(side)) for side in ("left", "right"))
    batch = join_events(lf, rf, spec, windowed=True)  # every click lands on its search's ds
    batch.write.format("delta").partitionBy("ds").save(tables.output("batch_1d_windowed"))
    lost = [f"{BAD_DAY}-l{i}" for i in range(LOST)]  # the stream lost four clicked searches of one day
    stream = batch.withColumn("emitted_at", F.col("left_event_time") + F.expr("INTERVAL 10 MINUTES"))
    stream.where(~F.col("left_event_id").isin(lost)).write.format("delta").partitionBy("ds").save(
        tables.output("stream")
    )
    from jobs.accuracy.compare import compare_ds

    for d in DAYS:
        compare_ds(spark, spec, d)
    hl = health_log(spec)
    hl.parent.mkdir(parents=True, exist_ok=True)
    samples = [("running", DAYS[2]), ("exited", DAYS[2]), ("running", DAYS[3])]  # one restart on the 18th
    hl.write_text("".join(json.dumps({"sampled_at": f"{d}T12:00:0{i}+00:00", "state": s}) + "\n"
                          for i, (s, d) in enumerate(samples)))  # fmt: skip
    return {"spec": spec, "file": str(spec_file), "tables": tables}


def _batch_dag_paused() -> bool:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    from jobs.operate.gate import BATCH_DAG

    with create_session() as session:
        dm = session.get(DagModel, BATCH_DAG)
        assert dm is not None, "the DAG test syncs the bundle's DAGs to the metadata DB"
        return bool(dm.is_paused)


def _set_paused(paused: bool) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.get(DagModel, "joinshift_daily").is_paused = paused


def _view(spark, spec, name: str):
    from jobs.operate import gate_store

    return gate_store.status(spark, spec).serving[name]


def test_a_bad_day_makes_promotion_wait_and_rollback_restores_the_batch_view(
    spark, kafka, dagbag, pipeline, test_settings, capsys
):
    from jobs.operate import gate_store

    spec, f, tables = pipeline["spec"], pipeline["file"], pipeline["tables"]
    code, _ = _run(["gate", "evaluate", "--spec", f, "--ds", str(DAYS[0]), "--to", str(DAYS[3])])
    assert code == 0
    days = gate_store.read_days(spark, spec)
    bad = {c.check: c for c in days[BAD_DAY]}
    assert bad["match_rate"].status == "failed" and bad["match_rate"].value == pytest.approx(-20.0)
    assert bad["lost_rows"].status == "failed" and bad["lost_rows"].value == LOST
    assert bad["unexplained_misses"].status == "failed"
    good = {c.check: c for c in days[DAYS[2]]}
    assert {c.status for c in good.values()} == {"met"}, good
    assert good["latency_p99"].value == pytest.approx(600.0)
    assert good["restarts"].value == 1

    # two good days after the bad one: promotion waits, saying which day failed and why
    code, msg = _run(["gate", "promote", "--spec", f])
    assert code == 2
    assert msg == (
        "joinshift gate: promotion to canary needs 3 consecutive days meeting the SLO; 2 met (2026-11-18..19); "
        "2026-11-17 failed: match rate -20.00 pp below batch_1d_windowed (tolerance 1.5); "
        "4 unexplained misses = 20.00 pp of 20 left events (limit 0.5 pp); "
        "4 landed left events in neither output nor a count"
    )

    # the daily DAG evaluates the third good day; then the promotion goes through
    dr = dagbag.get_dag("joinshift_gate").test(
        logical_date=datetime(DAYS[4].year, DAYS[4].month, DAYS[4].day, tzinfo=UTC), run_conf={"spec": f}
    )
    assert "success" in str(dr.state).lower()
    assert _run(["gate", "promote", "--spec", f, "--by", "tester"])[0] == 0
    assert _view(spark, spec, "public")["table"] == tables.output("batch_1d_windowed")
    assert _view(spark, spec, "canary")["table"] == tables.output("stream")
    views = gate_store.register_views(spark, spec)
    assert views == {NAME: "batch_1d_windowed", f"{NAME}_canary": "stream"}
    assert spark.table(f"{NAME}_canary").count() == spark.read.format("delta").load(tables.output("stream")).count()
    rows = spark.read.format("delta").load(tables.output("stream")).count()
    assert _run(["gate", "view", "--spec", f, "--canary"])[0] == 0
    assert capsys.readouterr().out.strip().endswith(f"reads stream ({tables.output('stream')}): {rows} rows")
    assert _run(["gate", "view", "--spec", f, "--json"])[0] == 0
    assert json.loads(capsys.readouterr().out)["variant"] == "batch_1d_windowed"

    # the canary stage earns its own days: without new ones only a forced promotion (with a reason) goes on
    code, msg = _run(["gate", "promote", "--spec", f])
    assert code == 2 and "no day evaluated after 2026-11-20" in msg
    assert _run(["gate", "promote", "--spec", f, "--force"]) == (
        2,
        "joinshift gate: --force needs --reason TEXT (recorded with the decision)",
    )
    assert _run(["gate", "promote", "--spec", f, "--force", "--reason", "consumers asked"])[0] == 0
    assert _view(spark, spec, "public")["variant"] == "stream"
    # a replay-as-live trial deletes and rebuilds the stream output: not while the public view reads it
    stream_rows = spark.read.format("delta").load(tables.output("stream")).count()
    assert _run(["replay-as-live", "--spec", f]) == (
        2,
        f"joinshift replay-as-live: {NAME} is at gate stage 'cutover': its public view reads the stream output "
        "a replay-as-live trial deletes and rebuilds; run the trial under another pipeline name (--as), or "
        "roll the gate back to shadow first (joinshift gate rollback)",
    )
    dr = dagbag.get_dag("joinshift_replay_as_live").test(run_conf={"spec": f})
    assert "failed" in str(dr.state).lower()
    assert spark.read.format("delta").load(tables.output("stream")).count() == stream_rows

    _set_paused(False)
    assert _run(["gate", "promote", "--spec", f, "--force", "--reason", "batch no longer needed"])[0] == 0
    assert _batch_dag_paused(), "retiring the batch join pauses joinshift_daily"
    state = json.loads(Path(tables.gate_state()).read_text())
    assert state["stage"] == "retired" and state["batch_dag_paused"] is True

    # rollback from every stage, one at a time: retired -> cutover runs the batch DAG again (the
    # stream still serves); cutover -> canary gives the public view back to the batch output
    assert _run(["gate", "rollback", "--spec", f, "--to", "cutover", "--reason", "keep the fallback"])[0] == 0
    assert not _batch_dag_paused()
    assert _view(spark, spec, "public")["variant"] == "stream"
    assert _run(["gate", "rollback", "--spec", f, "--to", "canary", "--reason", "late clicks missing"])[0] == 0
    assert _view(spark, spec, "public")["table"] == tables.output("batch_1d_windowed")
    assert _view(spark, spec, "canary")["table"] == tables.output("stream")
    code, msg = _run(["gate", "rollback", "--spec", f, "--to", "cutover"])
    assert code == 2 and "cutover" in msg, msg  # a rollback never moves forward

    # rollback from canary: nobody reads the stream; the public view reads the batch output
    assert _run(["gate", "rollback", "--spec", f, "--reason", "late clicks missing"])[0] == 0
    assert not _batch_dag_paused()
    assert _view(spark, spec, "public")["table"] == tables.output("batch_1d_windowed")
    assert _view(spark, spec, "canary") is None
    assert gate_store.register_views(spark, spec) == {NAME: "batch_1d_windowed"}
    assert spark.table(NAME).count() == spark.read.format("delta").load(tables.output("batch_1d_windowed")).count()
    assert not spark.catalog.tableExists(f"{NAME}_canary")
    decisions = gate_store.read_decisions(spark, spec)
    assert [(d["from_stage"], d["to_stage"], d["forced"]) for d in decisions] == [
        ("shadow", "canary", False),
        ("canary", "cutover", True),
        ("cutover", "retired", True),
        ("retired", "cutover", False),
        ("cutover", "canary", False),
        ("canary", "shadow", False),
    ]
    assert decisions[0]["by"] == "tester" and decisions[0]["through_ds"] == DAYS[4]
    assert "late clicks missing" in decisions[-1]["reason"]
    state = json.loads(Path(tables.gate_state()).read_text())
    assert state["stage"] == "shadow" and state["days"][0]["ds"] == str(DAYS[4])


def test_two_gate_commands_at_once_decide_once_and_leave_the_latest_stage_in_state_json(
    spark, own_pipeline_spec, test_settings, monkeypatch
):
    """A promotion decided from a stage another command has left meanwhile was appended too (two
    decisions from one stage), and a command whose status predated another's decision could write
    ``state.json`` last: the public view's pointer named the older stage."""
    from jobs.operate import gate_store
    from jobs.operate.gate import GateRefused
    from jobs.storage.tables import Tables

    spec, s = own_pipeline_spec("gate_race"), test_settings
    paused: list[bool] = []  # the batch DAG's pause, as the gate sets it
    for reason in ("to canary", "to cutover"):
        gate_store.promote(spark, spec, force=True, reason=reason, by="alice", s=s)
    stale, version = gate_store._read_for_decision(spark, spec, s)  # what a second command read: cutover
    gate_store.promote(spark, spec, force=True, reason="retire", by="alice", pause_batch=paused.append, s=s)
    with pytest.raises(GateRefused, match=r"another gate command decided first \(promote to retired by alice\)"):
        gate_store._decide(spark, spec, stale, version=version, action="promote", to="retired", by="bob",
                           reason="second", forced=True, pause_batch=paused.append, s=s)  # fmt: skip
    assert [d["by"] for d in gate_store.read_decisions(spark, spec, s)] == ["alice"] * 3
    assert paused[-1] is True  # the loser leaves the batch DAG as the winner set it: paused at retired

    real, decided = gate_store.status, []

    def read_then_someone_decides(*args, **kwargs):
        st = real(*args, **kwargs)
        if not decided:  # between this command's read and its write, another rolls back
            decided.append("rolling back")
            decided[0] = gate_store.rollback(spark, spec, reason="meanwhile", by="carol", s=s)
        return st

    monkeypatch.setattr(gate_store, "status", read_then_someone_decides)
    gate_store.refresh_state(spark, spec, s)
    assert decided and decided[0]["to"] == "shadow" and decided[0]["from"] == "retired"
    state = json.loads(Path(Tables.of(spec, s).gate_state()).read_text())
    assert state["stage"] == "shadow" and state["decisions"][-1]["by"] == "carol"

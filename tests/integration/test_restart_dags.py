"""Restart management through Airflow (``dag.test()``) on the real broker, Spark and Delta:
``joinshift_supervise`` starts the continuous join as its own process and records its health in
Delta; ``joinshift_replay`` stops it under a hold, keeps its checkpoint, rebuilds the window from
Kafka and writes nothing twice; the next supervision starts the stream from the new checkpoint.
A hold keeps a supervisor's hands off; a replay whose start Kafka no longer retains fails its
DAG run at the retention check, before anything is stopped."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

CUTOVER = "2026-11-19T12:00:00Z"


def _state(dr) -> str:
    return str(dr.state).lower()


@pytest.fixture(scope="module")
def pipeline(kafka, demo_spec, test_root):
    from jobs.local.chaos import isolated_spec, publish_workload
    from jobs.spec import write_spec

    name = "dagrestart"
    ps = isolated_spec(demo_spec, name, max_offsets=200)
    ps = ps.model_copy(update={"streaming": ps.streaming.model_copy(update={"trigger_interval": timedelta(seconds=2)})})
    publish_workload(demo_spec, ps, kafka, left_events=200, seed=11)
    path = write_spec(ps, test_root / name / "spec.yaml")
    yield ps, path
    from jobs.operate.process import stop_stream_process

    stop_stream_process(ps)


def _pairs(spark, ps):
    from jobs.storage.tables import Tables

    df = spark.read.format("delta").load(Tables.of(ps).output("stream"))
    return [
        (r.left_event_id, r.right_event_id, r.left_arrival_time)
        for r in df.select("left_event_id", "right_event_id", "left_arrival_time").collect()
    ]


def test_supervise_then_replay_then_supervise_through_airflow(dagbag, spark, kafka, pipeline):
    import json

    from jobs.local.chaos import delta_version, wait_until
    from jobs.operate.health import health_log
    from jobs.operate.process import StreamProcess
    from jobs.storage.hold import current_hold, supervisor_dir
    from jobs.storage.processes import pid_alive
    from jobs.storage.spark import THROUGHPUT_COLLECTOR
    from jobs.storage.tables import Tables

    ps, path = pipeline
    out = Tables.of(ps).output("stream")
    conf = {"spec": str(path), "watch_minutes": 0.5}  # a 10-second poke: ~4 checks

    def checks_of_the_watch() -> int:  # what the last watch recorded (each check is one health sample)
        saved = json.loads((supervisor_dir(ps) / "watch.json").read_text())
        return int(saved["memory"]["report"]["checks"])

    dr = dagbag.get_dag("joinshift_supervise").test(run_conf=conf)
    assert "success" in _state(dr)
    first_watch = checks_of_the_watch()
    assert first_watch >= 2 and len(health_log(ps).read_text().splitlines()) == first_watch
    first = StreamProcess(path, ps)
    assert first.find(), "the supervised stream process runs on after the DAG run"
    running = subprocess.run(["pgrep", "-f", f"jobs.cli stream --spec {path}"], capture_output=True, text=True)
    assert len(running.stdout.split()) == 1, "every poke must adopt the one process, not start another"
    # the joinshift_stream DAG's increment (its task body) and a CLI increment are refused while the
    # continuous process owns the checkpoint: never two streams on one checkpoint
    from jobs import airflow_tasks
    from jobs.cli import main
    from jobs.storage.hold import CheckpointBusy

    with pytest.raises(CheckpointBusy, match=r"in use by pid \d+ \(continuous"):
        airflow_tasks.stream_increment(str(path))
    with pytest.raises(SystemExit, match="checkpoint is in use") as refused:
        main(["stream", "--spec", str(path), "--available-now"])
    assert refused.value.code == 1
    assert wait_until(lambda: delta_version(out) >= 0, 180), "the supervised stream wrote no output"
    # the continuous stream's driver lives on: it keeps the JVM's default collector (G1), where a
    # step that runs to its end gets the throughput one (test_cli_errors reads those JVMs' logs)
    jvms = [p.cmdline() for p in psutil.Process(first.pid).children(recursive=True) if p.name() == "java"]
    assert len(jvms) == 1 and THROUGHPUT_COLLECTOR not in jvms[0], jvms
    states = {
        r.state for r in spark.read.format("delta").load(Tables.of(ps)._t("stream_health")).select("state").collect()
    }
    assert states & {"starting", "running"}, states

    # the supervised stream drains what Kafka holds: then the old run's output is final
    assert wait_until(lambda: _drained(ps, kafka), 240), "the supervised stream did not catch up"
    before = _pairs(spark, ps)
    assert before

    dr = dagbag.get_dag("joinshift_replay").test(run_conf={"spec": str(path), "cutover": CUTOVER})
    assert "success" in _state(dr)
    assert not pid_alive(first.pid), "the replay stops the supervised process"
    # ... in order: SIGTERM, each query stopped between its micro-batches, Spark stopped, no error
    since_start = first.log_file.read_text().rsplit("\n=== ", 1)[-1]
    _, asked, after = since_start.partition("SIGTERM: stopping between micro-batches")
    assert asked and "joinshift stream: stopped" in after, since_start[-3000:]
    assert "ERROR" not in after and "Exception" not in after, after[:3000]
    assert current_hold(ps) is None, "the hold ends with the replay"
    cp = Path(Tables.of(ps).checkpoint("stream_join"))
    assert list(cp.parent.glob(f"{cp.name}.bak-*")), "the old checkpoint is kept"
    after = _pairs(spark, ps)
    # the old run had read everything: the replay owns nothing it did not already write, so the
    # output must be the same multiset of rows (a row written twice would show here)
    assert len(after) == len(before) and sorted(after) == sorted(before)

    dr = dagbag.get_dag("joinshift_supervise").test(run_conf={**conf, "watch_minutes": 0})  # one poke
    assert "success" in _state(dr)
    second = StreamProcess(path, ps)
    assert second.find() and second.pid != first.pid, "supervision starts the stream again after the replay"
    # and it reads from the replay's checkpoint: a new click makes a micro-batch with data, which
    # loads the join's state the replay wrote (a schema the live plan refused once: test_replay.py)
    from jobs.local.chaos import wait_until
    from jobs.storage.progress import read_progress
    from tests.integration.test_stream_semantics import at, publish, right

    log = Tables.of(ps).progress_log("stream_join")
    runs_before = {p.get("runId") for p in read_progress(log)}
    publish(kafka, ps, [right("R-after-replay", "s-after-replay", at(20, "23:00"), at(20, "23:01"))])

    def read_after_replay() -> bool:
        new = [p for p in read_progress(log) if p.get("runId") not in runs_before]
        return any(p["numInputRows"] > 0 for p in new)

    assert wait_until(read_after_replay, 180), "the stream started after the replay read nothing"
    again = StreamProcess(path, ps)
    assert again.find() and again.pid == second.pid, "the stream started after the replay did not stay up"
    samples = health_log(ps).read_text().splitlines()
    assert len(samples) == first_watch + checks_of_the_watch()  # the one-poke watch after the replay: 1
    progress = spark.read.format("delta").load(Tables.of(ps).stream_progress)  # one row per micro-batch
    assert progress.select("run_id", "batch_id").distinct().count() == progress.count()
    assert progress.where("input_rows_left + input_rows_right > 0 AND join_state_rows > 0").count() >= 1
    assert progress.select("run_id").distinct().count() >= 2  # the supervised run and the replay

    # a spec the checkpoint cannot continue (another window, no replay): the stream a poke starts
    # refuses it (exit 2); a later poke, a supervisor of its own, reads that exit code from what the
    # process left, and the task fails at once: no restarts, no retries
    from jobs.operate.health import restart_log
    from jobs.operate.process import stop_stream_process
    from jobs.spec import WindowSpec, parse_duration, write_spec

    stop_stream_process(ps)
    write_spec(ps.model_copy(update={"window": WindowSpec(lower=parse_duration("-1h"), upper=ps.window.upper)}), path)
    starts = len(restart_log(ps).read_text().splitlines())
    dr = dagbag.get_dag("joinshift_supervise").test(run_conf={**conf, "watch_minutes": 3})
    assert "failed" in _state(dr)
    assert len(restart_log(ps).read_text().splitlines()) == starts + 1  # its first start only
    report = json.loads((supervisor_dir(ps) / "watch.json").read_text())["memory"]["report"]
    assert [a["kind"] for a in report["alerts"]] == ["refused"], report["alerts"]
    assert "exit code 2: joinshift stream: checkpoint " in report["alerts"][0]["message"], report["alerts"]


def _drained(ps, bootstrap) -> bool:
    from jobs.operate.health import health

    h = health(ps, bootstrap=bootstrap)
    return bool(h.lag) and all(v == 0 for v in h.lag.values())


def test_a_hold_keeps_the_supervisor_from_starting_the_stream(demo_spec, test_root):
    from jobs.operate.process import StreamProcess
    from jobs.operate.supervisor import supervise
    from jobs.spec import write_spec
    from jobs.storage.hold import hold

    hs = demo_spec.model_copy(update={"pipeline": "held"})
    path = write_spec(hs, test_root / "held" / "spec.yaml")
    proc = StreamProcess(path, hs)
    with hold(hs, reason="replay in a test"):
        with pytest.raises(RuntimeError, match="already held"):
            _other_process_hold(hs)
        report = supervise(hs, spec_path=path, checks=3, interval_s=0.1, process=proc, on_alert=None)
    assert report.states == {"held": 3} and report.restarts == [] and proc.pid is None
    assert "replay in a test" in report.last["reason"]


def test_a_stream_will_not_start_on_a_checkpoint_another_process_holds(demo_spec, test_root):
    import json
    import os

    from jobs.steps.stream import start_streaming_join
    from jobs.storage.hold import hold_file

    hs = demo_spec.model_copy(update={"pipeline": "held_elsewhere"})
    f = hold_file(hs)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"pid": os.getppid(), "since": "now", "reason": "replay from cut-over X"}))
    try:
        with pytest.raises(RuntimeError, match=r"held by pid \d+ .*replay from cut-over X"):
            start_streaming_join(None, hs, bootstrap="127.0.0.1:1")  # refused before Spark is touched
    finally:
        f.unlink()


def _other_process_hold(hs):
    """A hold recorded by another live process (this test's parent shell stands in for it)."""
    import json
    import os

    from jobs.storage.hold import hold, hold_file

    f = hold_file(hs)
    mine = f.read_text()
    f.write_text(json.dumps({"pid": os.getppid(), "since": "now", "reason": "another replay"}))
    try:
        with hold(hs, reason="a second replay"):
            pass
    finally:
        f.write_text(mine)


def test_a_replay_dag_run_fails_at_the_retention_check_and_stops_nothing(dagbag, kafka, demo_spec, test_root):
    from kafka import KafkaAdminClient, TopicPartition

    from jobs.local.chaos import isolated_spec, publish_workload
    from jobs.spec import write_spec
    from jobs.storage.tables import Tables

    gs = isolated_spec(demo_spec, "dagretention", max_offsets=200)
    publish_workload(demo_spec, gs, kafka, left_events=100, seed=3)
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.delete_records({TopicPartition(gs.right.topic, 0): 40})  # what retention would have removed
    finally:
        admin.close()
    path = write_spec(gs, test_root / "dagretention" / "spec.yaml")
    cutover = datetime(2026, 11, 19, 6, tzinfo=UTC).isoformat()
    dr = dagbag.get_dag("joinshift_replay").test(run_conf={"spec": str(path), "cutover": cutover})
    assert "failed" in _state(dr)
    states = {ti.task_id: str(ti.state).lower() for ti in dr.get_task_instances()}
    assert "failed" in states["check_retention"] and "success" not in states["replay"], states
    assert not Path(Tables.of(gs).checkpoint("stream_join")).exists()

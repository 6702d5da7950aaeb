"""Every runbook, end to end: each `joinshift` command in its ``sh`` blocks runs, in order, through
the real CLI on the real broker, Spark and Delta, with the exit code the runbook states.

One small pipeline of its own (topics, tables, checkpoint) is streamed, landed and joined in batch
first, as a deployed pipeline would be; the runbooks then run in the order an operator might meet
them, each leaving the stream's output without a duplicated row.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DAY = date(2026, 11, 19)
NAME = "runbooks"


def _run(argv: list[str]) -> int:
    from jobs.cli import main

    try:
        return main(argv)
    except SystemExit as exc:  # commands report failures by exiting
        return exc.code if isinstance(exc.code, int) else 1


@pytest.fixture(scope="module")
def deployed(spark, kafka, demo_spec, own_pipeline_spec, test_root):
    """A running pipeline's world: its spec file, data in Kafka, one stream increment, the
    landed days, their batch join and its comparison (each runbook test can run alone)."""
    from jobs.spec import write_spec
    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    spec = demo_spec
    rb = own_pipeline_spec(NAME, topic_suffixes=("responses", "clicks"))
    spec_file = write_spec(rb, test_root / NAME / "spec.yaml")
    wl = generate(WorkloadParams(left_events_per_day=300, days=1, seed=5, start_date=DAY), spec)
    records = wl.records.assign(
        topic=wl.records.topic.map({spec.left.topic: rb.left.topic, spec.right.topic: rb.right.topic})
    )
    for st in (rb.left, rb.right):
        create_topic(kafka, st.topic)
    publish(records, kafka)

    assert _run(["stream", "--spec", str(spec_file), "--available-now"]) == 0
    # late clicks land in the next ds, which batch_1d_2d reads
    assert _run(["land", "--spec", str(spec_file), "--ds", str(DAY), "--to", str(DAY + timedelta(days=1))]) == 0
    assert _run(["batch", "--spec", str(spec_file), "--ds", str(DAY)]) == 0
    assert _run(["compare", "--spec", str(spec_file), "--ds", str(DAY)]) == 0  # each runbook may start at report

    new_spec = write_spec(rb.with_window(rb.window.lower / 2, rb.window.upper), test_root / NAME / "new_window.yaml")
    return {
        "spec": rb,
        "spec_file": str(spec_file),
        "fill": {"day": str(DAY), "cutover": f"{DAY}T12:00:00Z", "new spec": str(new_spec)},
    }


def _commands(name: str, spec_file: str):
    from jobs.operate import runbooks

    cmds = runbooks.commands(runbooks.render(name, spec_file))
    assert cmds, f"runbook {name} has no commands"
    return cmds


def _run_runbook(name: str, deployed) -> list[list[str]]:
    ran = []
    for c in _commands(name, deployed["spec_file"]):
        argv = c.argv(deployed["fill"])
        assert _run(argv) == c.expect_exit, f"{name}: `joinshift {' '.join(argv)}` should exit {c.expect_exit}"
        ran.append(argv)
    return ran


def _no_duplicate_output(spark, spec) -> int:
    from jobs.storage.tables import Tables

    out = spark.read.format("delta").load(Tables.of(spec).output("stream"))
    assert out.groupBy("left_event_id", "right_event_id").count().where("count > 1").count() == 0
    return out.count()


def test_every_runbook_command_is_a_real_command_with_known_placeholders():
    from jobs.cli import build_parser
    from jobs.operate import runbooks
    from jobs.spec import DEFAULT_SPEC

    parser = build_parser()
    for name in runbooks.names():
        for c in _commands(name, DEFAULT_SPEC):
            assert set(c.placeholders) <= {"day", "cutover", "new spec"}, c.line
            parser.parse_args(c.argv({"day": "2026-11-19", "cutover": "2026-11-19T12:00:00Z", "new spec": "x.yaml"}))


def test_restart_after_crash(spark, deployed):
    before = _no_duplicate_output(spark, deployed["spec"])
    ran = _run_runbook("restart_after_crash", deployed)
    assert ["stream", "--spec", deployed["spec_file"], "--available-now"] in ran
    assert _no_duplicate_output(spark, deployed["spec"]) == before  # nothing new in Kafka: nothing new out


def test_change_the_window(spark, deployed):
    from jobs.storage.tables import Tables

    ran = _run_runbook("change_the_window", deployed)
    assert any(a[0] == "plan" for a in ran) and any(a[0] == "replay" and "--dry-run" not in a for a in ran)
    cp = Tables.of(deployed["spec"]).checkpoint()
    assert list(Path(cp).parent.glob("stream_join.bak-*")), "the old checkpoint was not kept"
    _no_duplicate_output(spark, deployed["spec"])


def test_recover_broken_checkpoint(spark, deployed):
    from jobs.storage.tables import Tables

    cp = Path(Tables.of(deployed["spec"]).checkpoint())
    last = max(int(p.name) for p in (cp / "offsets").iterdir() if p.name.isdigit())
    f = cp / "offsets" / str(last)
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])  # a torn write
    _run_runbook("recover_broken_checkpoint", deployed)
    _no_duplicate_output(spark, deployed["spec"])


def test_replay_after_outage(spark, deployed):
    _run_runbook("replay_after_outage", deployed)
    _no_duplicate_output(spark, deployed["spec"])


def test_cut_over_and_roll_back(spark, deployed, test_settings):
    import json

    from jobs.storage.tables import Tables

    ran = _run_runbook("cut_over_and_roll_back", deployed)
    assert (Path(test_settings.path("reports", NAME)) / str(DAY) / "report.html").exists()
    assert ["gate", "promote", "--spec", deployed["spec_file"]] in ran  # refused: one day, not seven
    state = json.loads(Path(Tables.of(deployed["spec"]).gate_state()).read_text())
    assert state["stage"] == "shadow" and state["days"][0]["ds"] == str(DAY)
    assert state["decisions"][-1]["action"] == "rollback"

"""The CLI's error paths, walked on the real broker, Spark and Delta: every user error (a missing
spec or config, an input not landed or not computed yet) ends in one line that names what to do
and a non-zero exit code, never a traceback; and the day-edge rule: a variant whose next right
day has not landed is computed for no ds it cannot finish and marked incomplete, the run goes on.

Commands run in this process through :func:`jobs.cli.main` (one Spark session for all); the
configuration errors run as child processes, since settings are read once per process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import date

import pytest

from jobs.cli import main
from tests.integration.test_stream_semantics import at, left, publish, right

pytestmark = pytest.mark.integration

D20, D21, D22 = date(2026, 11, 20), date(2026, 11, 21), date(2026, 11, 22)


def fails(argv: list[str], capsys, code: int = 1) -> str:
    """Run the CLI; it must exit ``code`` with one stderr line naming the command; return that line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == code, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"joinshift {argv[0]}: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def cli_spec(own_pipeline_spec, tmp_path_factory):
    from jobs.spec import write_spec

    spec = own_pipeline_spec("cli_errors")
    return spec, str(write_spec(spec, tmp_path_factory.mktemp("cli") / "cli_errors.yaml"))


def test_configuration_errors_are_one_line_in_a_fresh_process(tmp_path):
    def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobs.cli", *args],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("spark_master: [unclosed\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("spark_mastr: local[2]\n")
    cases = [
        ({"JOINSHIFT_CONFIG": str(tmp_path / "nope.yaml")}, "JOINSHIFT_CONFIG points to"),
        ({"JOINSHIFT_CONFIG": str(bad_yaml)}, "not valid YAML"),
        ({"JOINSHIFT_CONFIG": str(unknown)}, "unknown setting(s) spark_mastr"),
    ]
    for env, named in cases:
        res = run(env, "compare", "--ds", "2026-11-20")
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().startswith("joinshift compare: ") and named in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = run({}, "batch", "--spec", str(tmp_path / "missing.yaml"), "--ds", "2026-11-20")
    assert res.returncode == 2 and "missing.yaml does not exist" in res.stderr and "Traceback" not in res.stderr
    # a JVM option the JVM refuses: Spark's driver exits before it says why, and the line names where to look
    empty = {"JOINSHIFT_STORAGE_ROOT": str(tmp_path / "empty"), "JOINSHIFT_LOG_DIR": str(tmp_path / "logs")}
    res = run({**empty, "JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS": "-Xss1zz"}, "batch", "--ds", "2026-11-20")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().startswith("joinshift batch: the Spark driver's JVM exited as it started"), res.stderr
    assert "spark_driver_java_options" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "check spark_master (local[*])" in res.stderr, res.stderr
    assert "(Invalid thread stack size: -Xss1zz)" in res.stderr, res.stderr  # the JVM's own reason, quoted
    # a heap the machine cannot reserve: the JVM says so on stdout, which came before the line
    res = run({**empty, "JOINSHIFT_SPARK_DRIVER_MEMORY": "999999g"}, "batch", "--ds", "2026-11-20")
    assert res.returncode == 2 and "Could not reserve enough space" in res.stderr, res.stderr
    assert not res.stdout.strip() and len(res.stderr.strip().splitlines()) == 1, (res.stdout, res.stderr)
    # a standalone master that is not there: Spark's driver retried for a minute, then a traceback
    res = run({**empty, "JOINSHIFT_SPARK_MASTER": "spark://127.0.0.1:1"}, "batch", "--ds", "2026-11-20")
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == (
        "joinshift batch: no Spark master answers at spark://127.0.0.1:1 (spark_master): start the cluster, "
        "or set JOINSHIFT_SPARK_MASTER to one that runs (local[*] runs Spark in this process)"
    ), res.stderr


def test_commands_before_their_inputs_exist_say_which_command_makes_them(
    spark, kafka, own_pipeline_spec, tmp_path, capsys
):
    from jobs.spec import write_spec

    path = str(write_spec(own_pipeline_spec("cli_no_inputs"), tmp_path / "cli_no_inputs.yaml"))  # nothing landed
    assert "joinshift land --ds 2026-11-20" in fails(["batch", "--spec", path, "--ds", "2026-11-20"], capsys)
    assert "joinshift land --ds 2026-11-20" in fails(["compare", "--spec", path, "--ds", "2026-11-20"], capsys)
    assert "joinshift stream" in fails(["attribute", "--spec", path, "--ds", "2026-11-20"], capsys)
    assert "joinshift land --ds 2026-11-20" in fails(["recommend", "--spec", path, "--ds", "2026-11-20"], capsys)
    # a report of nothing looked like one of a day where nothing happened, and exited 0
    assert "run `joinshift compare --ds 2026-11-20` first" in fails(
        ["report", "--spec", path, "--ds", "2026-11-20"], capsys
    )


def test_the_last_day_waits_for_its_next_right_day_and_everything_else_is_computed(
    spark, kafka, cli_spec, test_settings, capsys
):
    spec, path = cli_spec
    publish(
        kafka,
        spec,
        [
            left("L1", "s1", at(20, "10:00"), at(20, "10:00", 5)),
            right("R1", "s1", at(20, "10:10"), at(20, "10:11")),
            left("L2", "s2", at(21, "23:50"), at(21, "23:50", 5)),  # its match arrives on the 22nd
            right("R2", "s2", at(22, "00:05"), at(22, "00:06")),
        ],
    )
    assert main(["land", "--spec", path, "--ds", "2026-11-20", "--to", "2026-11-21"]) == 0
    capsys.readouterr()

    assert main(["batch", "--spec", path, "--ds", "2026-11-20", "--to", "2026-11-21"]) == 0
    out, err = capsys.readouterr()
    status = {(r["ds"], r["variant"]): r for r in map(json.loads, out.strip().splitlines())}
    assert len(status) == 8
    waiting = {k for k, r in status.items() if r["status"] == "incomplete"}
    assert waiting == {("2026-11-21", "batch_1d_2d"), ("2026-11-21", "reference")}
    assert all(status[k]["waiting_for"] == ["2026-11-22"] for k in waiting)
    assert status[("2026-11-21", "batch_1d_windowed")]["status"] == "done"  # the same-day variants are not held up
    assert err.count("joinshift land --ds 2026-11-22") == 2 and "Traceback" not in err

    assert main(["compare", "--spec", path, "--ds", "2026-11-21"]) == 0
    out = capsys.readouterr().out
    assert "batch_1d_2d for ds 2026-11-21: incomplete" in out and "reference for ds 2026-11-21: incomplete" in out
    from jobs.accuracy.compare import compare_ds

    assert {m["variant"] for m in compare_ds(spark, spec, D21, test_settings)} == {"batch_1d_1d", "batch_1d_windowed"}

    sweep = ["sweep", "--spec", path, "--ds", "2026-11-21", "--right-days", "neighbours"]
    err = fails([*sweep, "--grid", "lower=-1h,upper=0..1h/30m"], capsys)
    assert "waits for right-stream ds 2026-11-22" in err and "joinshift land --ds 2026-11-22" in err

    err = fails(["recommend", "--spec", path, "--ds", "2026-11-21"], capsys)  # its only match is on the 22nd
    assert "1 left events and no right event within" in err and "check the keys" in err
    assert main(["recommend", "--spec", path, "--ds", "2026-11-20", "--to", "2026-11-21", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["inputs"]["incomplete"] == {"2026-11-21": ["2026-11-22"]}
    assert any(r.startswith("incomplete: right ds 2026-11-22 not landed") for r in rec["explanation"])

    # the next day lands: the waiting variants complete, and L2 finds its match across midnight
    assert main(["land", "--spec", path, "--ds", "2026-11-22"]) == 0
    assert main(["batch", "--spec", path, "--ds", "2026-11-21", "--variant", "reference"]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(out) == {"ds": "2026-11-21", "variant": "reference", "status": "done", "rows": 1}
    from jobs.storage.tables import Tables

    ref = spark.read.format("delta").load(Tables.of(spec, test_settings).output("reference")).where("ds = '2026-11-21'")
    assert [(r.left_event_id, r.right_event_id) for r in ref.collect()] == [("L2", "R2")]


def test_runs_that_succeed_print_nothing_on_stderr(spark, kafka, own_pipeline_spec, tmp_path, capsys):
    """A fresh process (its own JVM) for a batch join and a stream increment: the JVM's start-up
    notice, Spark's warnings and the listener bus at exit leave stderr empty. Both run to their
    end, so their drivers run the throughput collector (each JVM's own log); the continuous
    stream's keeps G1 (``test_restart_dags``). A pipeline of its own, landed here: it runs alone."""
    from jobs.spec import write_spec

    spec = own_pipeline_spec("cli_quiet")
    path = str(write_spec(spec, tmp_path / "cli_quiet.yaml"))
    publish(
        kafka,
        spec,
        [left("L1", "s1", at(20, "10:00"), at(20, "10:00", 5)), right("R1", "s1", at(20, "10:10"), at(20, "10:11"))],
    )
    assert main(["land", "--spec", path, "--ds", "2026-11-20"]) == 0
    capsys.readouterr()
    collectors = {}
    for args in (["batch", "--ds", "2026-11-20", "--variant", "batch_1d_1d"], ["stream", "--available-now"]):
        gc_log = tmp_path / f"gc-{args[0]}.log"
        options = f"{os.environ.get('JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS', '')} -Xlog:gc:file={gc_log}".strip()
        res = subprocess.run(
            [sys.executable, "-m", "jobs.cli", args[0], "--spec", path, *args[1:]],
            env={**os.environ, "JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS": options},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", f"{args[0]} printed on stderr:\n{res.stderr}"
        collectors[args[0]] = re.findall(r"\[gc\] Using (\w+)", gc_log.read_text())
    assert collectors == {"batch": ["Parallel"], "stream": ["Parallel"]}
    # the checkpoint the increment built refuses a window it cannot continue: exit 2, which a
    # supervisor does not restart (the same answer every time), not 1
    narrower = spec.with_window(spec.window.lower / 2, spec.window.upper)
    refused = fails(["stream", "--spec", str(write_spec(narrower, tmp_path / "narrower.yaml")), "--available-now"],
                    capsys, code=2)  # fmt: skip
    assert "cannot continue (window.lower" in refused and "runbook change_the_window" in refused


def test_an_import_with_a_row_too_large_for_kafka_is_refused_before_any_row_is_sent(
    spark, kafka, own_pipeline_spec, tmp_path, capsys
):
    """The producer sent the rows before the first too large, then a traceback: a second import
    after splitting the row landed those rows twice (as duplicates)."""
    from jobs.spec import write_spec
    from jobs.storage import kafka as kafka_io

    spec = own_pipeline_spec("import_too_large")
    path = str(write_spec(spec, tmp_path / "import_too_large.yaml"))
    row = {"event_id": "L1", "session_id": "s1", "event_time": "2026-11-20T10:00:00Z", "result_count": 1}
    rows = [
        {**row, "query": "q", "arrived": "2026-11-20T10:00:01Z"},
        {**row, "event_id": "L2", "query": "x" * (9 * 1024 * 1024), "arrived": "2026-11-20T10:00:02Z"},
    ]
    big = tmp_path / "left.jsonl"
    big.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = fails(["import", "--spec", path, "--left", str(big), "--arrival", "arrived"], capsys)
    assert "1 rows are larger than a Kafka record may be here" in line and f"topic {spec.left.topic}" in line, line
    assert spec.left.topic not in kafka_io.topic_offsets(kafka)  # nothing sent, no topic made


def test_an_import_a_topic_would_refuse_or_delete_rows_of_is_refused_before_any_row_is_sent(
    spark, kafka, own_pipeline_spec, tmp_path, capsys
):
    """A topic of the user's own takes or refuses records one by one: a row larger than its
    max.message.bytes, or stamped before its retention, was refused (or deleted) after the rows
    before it had been sent, so an import again after the fix landed those twice. Its configs are
    checked first; the line names the one to change, and the import after that change lands every
    row once. A refusal by the brokers themselves (an ACL, a config changed meanwhile) stays one line."""
    from datetime import UTC, datetime, timedelta

    import pandas as pd
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    from jobs.spec import write_spec
    from jobs.storage import kafka as kafka_io
    from jobs.workload.publisher import PublishFailed
    from jobs.workload.publisher import publish as send

    spec = own_pipeline_spec("import_refused")
    path = str(write_spec(spec, tmp_path / "import_refused.yaml"))
    week_ms = 7 * 86_400_000
    configs = {"max.message.bytes": "2000", "retention.ms": str(week_ms)}  # the brokers' usual retention
    admin = kafka_io.admin_client(kafka)

    def alter(name: str, value: str) -> None:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, spec.left.topic, configs={name: value})])

    now = datetime.now(UTC)
    ago = lambda d: (now - d).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    row = {"event_id": "L1", "session_id": "s1", "event_time": ago(timedelta(hours=2)), "result_count": 1}
    rows = [
        {**row, "query": "q", "arrived": ago(timedelta(hours=1))},  # sent first, had the refusal come from the broker
        # 20 kB of hex: 10 kB compressed, over the topic's 2 kB (a broker refused it, after the row above)
        {**row, "event_id": "L2", "query": os.urandom(10_000).hex(), "arrived": ago(timedelta(minutes=59))},
    ]
    own = tmp_path / "left.jsonl"
    args = ["import", "--spec", path, "--left", str(own), "--arrival", "arrived"]
    try:
        admin.create_topics([NewTopic(spec.left.topic, 1, 1, topic_configs=configs)])
        own.write_text("".join(json.dumps(r) + "\n" for r in rows))
        line = fails(args, capsys)
        assert f"1 rows are larger than topic {spec.left.topic} takes, compressed (max.message.bytes=2000" in line
        assert "--add-config max.message.bytes=8388608" in line, line
        assert kafka_io.end_offsets(kafka, [spec.left.topic]) == {spec.left.topic: {0: 0}}  # nothing sent

        alter("max.message.bytes", "8388608")  # what the line says; then a month-old row
        rows.append({**row, "event_id": "L3", "query": "old", "arrived": ago(timedelta(days=30))})
        own.write_text("".join(json.dumps(r) + "\n" for r in rows))
        line = fails(args, capsys)
        assert f"deletes records stamped longer ago than 7d (retention.ms={week_ms})" in line, line
        assert "the oldest row arrived 30d ago" in line and "--add-config retention.ms=-1" in line, line
        assert kafka_io.end_offsets(kafka, [spec.left.topic]) == {spec.left.topic: {0: 0}}

        alter("retention.ms", "-1")
        assert main(args) == 0
        assert json.loads(capsys.readouterr().out) == {spec.left.topic: 3}
        assert kafka_io.end_offsets(kafka, [spec.left.topic]) == {spec.left.topic: {0: 3}}  # each row once

        # changed after the check: the brokers refuse a record, and the idempotent producer then
        # fails every send after it (a traceback, before): one line, saying how many were sent
        alter("max.message.bytes", "2000")
        values = [b"small", os.urandom(10_000), *[b"after"] * 3]
        records = pd.DataFrame({"topic": spec.left.topic, "key": "s1", "value": values,
                                "arrival_ms": int(now.timestamp() * 1000)})  # fmt: skip
        with pytest.raises(PublishFailed, match=r"Kafka refused records \(first: \w+Error") as refused:
            send(records, kafka)
        assert "\n" not in str(refused.value), str(refused.value)
    finally:
        admin.close()

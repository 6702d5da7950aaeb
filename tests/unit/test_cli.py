"""The command line: help for every command, and errors that name the bad argument or field."""

from __future__ import annotations

import argparse
from datetime import UTC

import pytest
import yaml

from jobs.cli import build_parser, main
from jobs.spec import DEFAULT_SPEC


def _commands(parser=None, prefix=()):
    """Every command and sub-command the parser has, as argument lists (``gate promote`` too)."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*prefix, name]
                yield from _commands(sub, (*prefix, name))


COMMANDS = list(_commands())


def test_the_commands_are_read_from_the_parser():
    assert {"demo", "sweep", "health", "supervise", "spark-server"} <= {c[0] for c in COMMANDS}
    assert ["gate", "promote"] in COMMANDS and ["gate", "rollback"] in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*command, "--help"])
    assert exc.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()


def test_version_names_joinshift_and_its_engines_as_installed(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"joinshift {version('joinshift')} (") and "\n" not in out
    for dist in ("pyspark", "delta-spark", "apache-airflow", "great-expectations", "kafka-python"):
        assert f"{dist} {version(dist)}" in out


def test_settings_lists_every_setting_with_its_origin(capsys, monkeypatch):
    import json

    from jobs.settings import _FIELDS

    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    monkeypatch.setenv("JOINSHIFT_SPARK_DRIVER_MEMORY", "3g")
    assert main(["settings", "--json"]) == 0
    rows = {r["setting"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["spark_driver_memory"] == {
        "setting": "spark_driver_memory",
        "value": "3g",
        "from": "JOINSHIFT_SPARK_DRIVER_MEMORY",
    }
    assert {n for n in _FIELDS if n not in ("spark_conf", "kafka_properties")} <= set(rows)
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "JOINSHIFT_SPARK_DRIVER_MEMORY" in out and "spark_driver_memory" in out


@pytest.mark.parametrize(
    "line,offered",
    [
        ("joinshift sett", {"settings"}),
        ("joinshift gate pro", {"promote"}),
        ("joinshift stream --av", {"--available-now"}),
        ("joinshift kafka st", {"start", "stop", "status"}),
    ],
)
def test_bash_completes_commands_options_and_choices_from_the_parser(line, offered, capsys, tmp_path):
    """The script ``joinshift completion bash`` prints, sourced by a real bash and asked as the
    shell asks it on <Tab>."""
    import shutil
    import subprocess

    assert main(["completion", "bash"]) == 0
    script = tmp_path / "joinshift.bash"
    script.write_text(capsys.readouterr().out)
    words = line.split()
    ask = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; COMP_POINT={len(line)}\n"
        "$(complete -p joinshift | sed -E 's/.*-F ([^ ]+) .*/\\1/') joinshift\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run([shutil.which("bash") or "bash", "-c", ask], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert {w.strip() for w in out.stdout.split()} == offered, out.stdout


def test_a_bad_date_names_the_argument(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["land", "--ds", "20-11-2026"])
    err = capsys.readouterr().err
    assert "--ds" in err and "YYYY-MM-DD" in err
    with pytest.raises(SystemExit):  # the windows reach the days around it: 9999-12-31 overflowed in the join
        build_parser().parse_args(["batch", "--ds", "9999-12-31"])
    assert "give a day from 1900-01-01 to 9998-12-31" in capsys.readouterr().err


def test_a_forced_promotion_without_a_reason_is_refused_before_spark_starts(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["gate", "promote", "--force"])
    assert exc.value.code == 2 and "--force needs --reason TEXT" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["demo"], ["recommend", "--ds", "2026-11-20"]])
@pytest.mark.parametrize("minutes", ["0", "1441", "half"])
def test_a_bad_slice_length_is_refused_by_the_replays_rule(capsys, command, minutes):
    """Whole minutes up to a day, as replay-as-live's --slice and the DAGs' slice_minutes
    (recommend took 5000, a slice no trial can run)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--slice-minutes", minutes])
    err = capsys.readouterr().err
    assert f"--slice-minutes: '{minutes}' is not a slice: whole minutes up to 1440 (a day), e.g. 30" in err
    assert build_parser().parse_args([*command, "--slice-minutes", "1440"]).slice_minutes == 1440


@pytest.mark.parametrize(
    "args,named",
    [
        (["--slice", "soon"], "--slice"),
        (["--slice", "0m"], "--slice"),
        (["--slice", "2d"], "--slice"),
        (["--to", "2026-11-20"], "--from"),
        (["--from", "2026-11-20", "--to", "2026-11-19"], "--to"),
        (["--as", "no spaces"], "--as"),
        (["--as", "my-join.trial"], "--as"),  # the spec's own rule for a name: letters, digits, _
    ],
)
def test_replay_as_live_refuses_a_bad_argument_in_one_line(args, named, capsys):
    with pytest.raises(SystemExit, match=named) as exc:
        main(["replay-as-live", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("joinshift replay-as-live:") and named in err and "\n" not in err


def test_a_range_that_ends_before_it_starts_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--to"):
        main(["land", "--ds", "2026-11-20", "--to", "2026-11-19"])


def test_an_invalid_spec_fails_naming_the_field(tmp_path, demo_spec_data):
    data = demo_spec_data()
    data["window"]["upper"] = "soon"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit, match=r"window\.upper"):
        main(["compare", "--spec", str(bad), "--ds", "2026-11-20"])


@pytest.mark.parametrize(
    "content,says",
    [
        (None, "is a folder; name the YAML file in it"),
        (b"\x7fELF\x02\x01\x01\x00\xd0\xff", "is not UTF-8 text"),
        (b"window: [1, 2\n", "not valid YAML: expected ',' or ']', but got '<stream end>' (line 2, column 1)"),
        (b"pipeline: 2026-02-30\n", "day is out of range for month: a value YAML reads as a date or time is not one"),
        (b"", "a join spec is a YAML mapping of field: value, not an empty file"),
    ],
    ids=["folder", "binary", "unclosed", "impossible-date", "empty"],
)
def test_a_spec_that_is_not_a_yaml_file_is_refused_in_one_line(content, says, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.mkdir() if content is None else spec.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--spec", str(spec), "--ds", "2026-11-20"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("joinshift compare:") and says in err and "\n" not in err


def test_a_path_that_cannot_be_written_is_one_line_and_its_traceback_is_logged(tmp_path, capsys, monkeypatch):
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_LOG_DIR", str(tmp_path / "logs"))
    settings.cache_clear()
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "reports"  # under a file: no folder can be made there
    try:
        with pytest.raises(SystemExit) as exc:
            main(["report", "--example", "--out", str(out)])
    finally:
        settings.cache_clear()
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"joinshift report: {out}") and "\n" not in err  # the folder it tried to make
    assert err.endswith(": Not a directory; check the path and its permissions")
    log = (tmp_path / "logs" / "joinshift.log").read_text()
    assert "report failed on a path" in log and "Traceback" in log and "NotADirectoryError" in log


@pytest.mark.parametrize(
    "name",
    [
        "restart_after_crash",
        "change_the_window",
        "recover_broken_checkpoint",
        "replay_after_outage",
        "cut_over_and_roll_back",
    ],
)
def test_runbooks_are_filled_with_the_pipelines_values(name, capsys):
    assert main(["runbook", name]) == 0
    out = capsys.readouterr().out
    assert "{" not in out.split("---")[0]  # every placeholder was filled
    assert "joinshift " in out  # steps are product commands


def test_an_unknown_runbook_lists_the_known_ones():
    with pytest.raises(SystemExit, match="restart_after_crash"):
        main(["runbook", "reboot_everything"])


def test_a_bad_cutover_names_the_argument():
    spec = DEFAULT_SPEC
    with pytest.raises(SystemExit, match=r"--cutover: 'yesterday' is not an ISO-8601 instant"):
        main(["replay", "--spec", spec, "--cutover", "yesterday"])


def test_a_cutover_without_a_zone_is_utc():

    from jobs.operate.replay import parse_cutover

    assert parse_cutover("2026-11-20T06:00:00").tzinfo == UTC
    assert parse_cutover("2026-11-20T07:00:00+01:00") == parse_cutover("2026-11-20T06:00:00Z")


def test_attribute_refuses_an_unknown_baseline_in_one_line_before_starting_spark(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["attribute", "--ds", "2026-11-20", "--baseline", "stream"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown baseline 'stream'" in err and "batch_1d_windowed" in err


@pytest.mark.parametrize("value", ["soon", "0m", "2d"])
def test_recommend_refuses_a_bad_trial_slice_in_one_line_before_starting_spark(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["recommend", "--ds", "2026-11-20", "--verify", "--trial-slice", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("joinshift recommend: --trial-slice") and "\n" not in err


def test_a_signal_asks_a_command_to_stop_in_order_and_a_second_one_stops_it_at_once():
    """``joinshift stream``'s SIGTERM (the supervisor's stop, a plain ``kill``) and Ctrl-C: the
    first sets the stop request, which the command acts on; the same signal again ends it."""
    import signal
    import subprocess
    import sys

    from jobs.settings import PROJECT_ROOT

    body = (
        "import time\n"
        "from jobs.commands.common import _stop_on_signals\n"
        "stop = _stop_on_signals('stream', 'stopping between micro-batches')\n"
        "print('waiting', flush=True)\n"
        "print('asked' if stop.wait(60) else 'not asked', flush=True)\n"
        "time.sleep(60)\n"
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen(
            [sys.executable, "-c", body], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout.readline() == "waiting\n"
            proc.send_signal(sig)
            assert proc.stdout.readline() == "asked\n"
            proc.send_signal(sig)
            assert proc.wait(30) == -sig
            name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
            assert proc.stderr.read() == (
                f"joinshift stream: {name}: stopping between micro-batches ({name} again to stop at once)\n"
            )
        finally:
            proc.kill()
            proc.wait()


def test_ctrl_c_ends_a_command_with_one_line_and_exit_130(tmp_path):
    """Ctrl-C in the middle of a long command (a big workload generated): one line, no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from jobs.settings import PROJECT_ROOT

    workload = tmp_path / "big.yaml"
    workload.write_text("left_events_per_day: 3000000\ndays: 2\n")  # minutes of generating
    body = (
        "import sys\n"
        "from jobs.cli import main\n"
        "print('ready', flush=True)\n"
        f"sys.exit(main(['generate', '--dry-run', '--workload', {str(workload)!r}]))\n"
    )
    env = {**os.environ, "JOINSHIFT_LOG_DIR": str(tmp_path / "logs")}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen([sys.executable, "-c", body], cwd=PROJECT_ROOT, env=env, **pipes)
    try:
        assert proc.stdout.readline() == "ready\n"
        # inside the command: a CPU second of generating after the imports (not a guess of a sleep)
        worker = psutil.Process(proc.pid)
        at_ready = worker.cpu_times().user
        deadline = time.monotonic() + 60
        while worker.cpu_times().user < at_ready + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert worker.cpu_times().user >= at_ready + 1, "the command never started generating"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        assert proc.stderr.read() == "joinshift generate: interrupted\n"
    finally:
        proc.kill()
        proc.wait()


def test_a_relative_spec_is_the_current_folders_else_the_projects(tmp_path, monkeypatch, capsys):
    """A user's own spec is found where they stand; the repository's from any folder (DAGs, runbooks)."""
    from jobs.settings import PROJECT_ROOT

    monkeypatch.chdir(tmp_path)
    mine = yaml.safe_load((PROJECT_ROOT / DEFAULT_SPEC).read_text())
    mine["pipeline"] = "my_join"
    (tmp_path / "my_join.yaml").write_text(yaml.safe_dump(mine))
    assert main(["runbook", "restart_after_crash", "--spec", "my_join.yaml"]) == 0
    assert "my_join" in capsys.readouterr().out
    # plan reads its two specs by the same rule: the project's here, the user's there
    assert main(["plan", "--deployed", DEFAULT_SPEC, "--proposed", "my_join.yaml"]) != 0
    assert "pipeline" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["runbook", "restart_after_crash", "--spec", "nowhere.yaml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "nowhere.yaml does not exist" in err and "current folder, then in the project" in err


@pytest.mark.parametrize(
    "argv", [["replay-as-live", "--from", "2026-11-19"], ["land", "--ds", "2026-11-19"]], ids=["replay-as-live", "land"]
)
def test_a_broker_that_does_not_answer_is_one_line_before_anything_starts_or_is_cleared(
    argv, tmp_path, capsys, monkeypatch
):
    """Before: a traceback (KafkaTimeoutError) after replay-as-live had cleared the pipeline's
    checkpoint and output, and `land` sat ~3 minutes in Spark's own Kafka admin first."""
    from jobs.settings import settings

    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", str(tmp_path / "storage"))
    monkeypatch.setenv("JOINSHIFT_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("JOINSHIFT_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # loopback, nothing listens
    settings.cache_clear()
    checkpoint = tmp_path / "storage" / "checkpoints" / "search_sessions" / "stream_join"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id": "a live run\'s"}')
    try:
        with pytest.raises(SystemExit) as exc:
            main(argv)
    finally:
        settings.cache_clear()
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"joinshift {argv[0]}: Kafka at 127.0.0.1:1 does not answer") and "\n" not in err
    assert (checkpoint / "metadata").exists()  # nothing cleared
    assert not (tmp_path / "storage" / "tables").exists()  # and nothing written


@pytest.mark.parametrize("value", ["30 seconds", "garbage", "0s", "-1m"])
def test_a_trigger_interval_is_a_positive_duration_in_the_one_grammar(value, capsys):
    """It went to Spark as written: its example `30s` ended in Spark's INVALID_INTERVAL_FORMAT traceback."""
    for command in ("stream", "supervise"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--trigger-interval", value])
        assert exc.value.code == 2 and "--trigger-interval" in capsys.readouterr().err


def test_a_spec_duration_that_is_negative_or_too_long_names_its_field(demo_spec_data):
    from jobs.spec import SpecError, parse_spec

    for section, field, value in [
        ("streaming", "trigger_interval", "-1h"),
        ("right", "watermark_delay", "99999999999999h"),
    ]:
        data = demo_spec_data()
        data.setdefault(section, {})[field] = value
        with pytest.raises(SpecError, match=f"{section}.{field}"):
            parse_spec(data)


def test_an_unknown_option_is_named_with_its_commands_usage(capsys):
    for argv, usage in [
        (["stream", "--bogus"], "Usage: joinshift stream "),
        (["gate", "view", "--bogus"], "Usage: joinshift gate view "),
    ]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.startswith(usage) and "unrecognized arguments: --bogus" in err
    args, extra = build_parser().parse_known_args(["airflow", "dags", "list", "--output", "json"])
    assert args.airflow_args == ["dags", "list", "--output", "json"] and extra == []  # passed through whole


def test_check_suites_names_a_missing_folder_and_keeps_dir_in_its_advice(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["quality", "check-suites", "--dir", str(tmp_path / "nowhere")])
    assert exc.value.code == 1 and f"no suites folder {tmp_path / 'nowhere'}" in capsys.readouterr().err
    (tmp_path / "gx").mkdir()
    with pytest.raises(SystemExit):
        main(["quality", "check-suites", "--dir", str(tmp_path / "gx")])  # empty: out of sync
    assert f"joinshift quality write-suites --spec {DEFAULT_SPEC} --dir {tmp_path / 'gx'}`" in capsys.readouterr().err


def test_import_names_a_missing_or_unknown_file_before_kafka_and_spark(tmp_path, capsys, monkeypatch):
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing answers: it must not be asked
    settings.cache_clear()
    (tmp_path / "rows.txt").write_text("a,b\n")
    try:
        for path, says in [
            (tmp_path / "nope.csv", "nope.csv does not exist"),
            (tmp_path / "rows.txt", "not a Parquet"),
        ]:
            with pytest.raises(SystemExit) as exc:
                main(["import", "--left", str(path)])
            assert exc.value.code == 1 and says in capsys.readouterr().err
    finally:
        settings.cache_clear()


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
def test_seconds_are_a_positive_number(value, capsys):
    for argv in (
        ["supervise", "--interval", value],
        ["health", "--kafka-timeout", value],
        ["kafka", "status", "--timeout", value],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and "is not a positive number" in capsys.readouterr().err


def test_the_gate_pauses_the_batch_dag_in_the_airflow_airflow_home_configures(tmp_path):
    """A deployment's AIRFLOW_HOME whose airflow.cfg names its database: the gate reads that one.
    It set the embedded default's variables first, which win over airflow.cfg, and so paused
    joinshift_daily in a SQLite file beside it instead."""
    import os
    import subprocess
    import sys

    from jobs.settings import PROJECT_ROOT

    theirs = tmp_path / "theirs.db"
    (tmp_path / "airflow.cfg").write_text(f"[database]\nsql_alchemy_conn = sqlite:///{theirs}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    body = (
        "from jobs.commands.operate import _set_batch_dag_paused\n"
        "try:\n    _set_batch_dag_paused(True)\nexcept Exception as e:\n    print(type(e).__name__)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", body], cwd=PROJECT_ROOT, env={**env, "AIRFLOW_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert theirs.exists() and not (tmp_path / "airflow.db").exists(), (res.stdout, res.stderr[-2000:])

"""A job that fails under the maintenance hold (a replay interrupted after it moved the old
checkpoint aside) leaves a half-built checkpoint: the hold stays, marked failed, after its process
is gone, so no stream starts from that checkpoint (it would write again what the old run wrote),
until the job is run again and finishes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from jobs.storage.hold import CheckpointBusy, current_hold, hold, hold_file


@pytest.fixture
def held_spec(demo_spec, test_settings, tmp_path):
    s = dataclasses.replace(test_settings, storage_root=str(tmp_path / "storage"))
    return demo_spec.model_copy(update={"pipeline": "replayed"}), s


def _failed_in_a_process_now_gone(spec, s, error: BaseException) -> dict:
    with pytest.raises(type(error)):
        with hold(spec, s, reason="replay from cut-over 2026-11-20T06:00:00+00:00"):
            raise error
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    f = hold_file(spec, s)
    rec = json.loads(f.read_text())
    f.write_text(json.dumps({**rec, "pid": int(gone.stdout)}))  # the replay's process has exited since
    return rec


def test_a_failed_job_leaves_its_hold_after_its_process_is_gone(held_spec):
    spec, s = held_spec
    _failed_in_a_process_now_gone(spec, s, RuntimeError("Kafka went away\nat line 2"))
    held = current_hold(spec, s)
    assert held is not None and held["failed"].startswith("Kafka went away (at ")
    assert held["reason"] == "replay from cut-over 2026-11-20T06:00:00+00:00"


def test_ctrl_c_counts_as_a_failure(held_spec):
    spec, s = held_spec
    _failed_in_a_process_now_gone(spec, s, KeyboardInterrupt())
    assert current_hold(spec, s)["failed"].startswith("KeyboardInterrupt (at ")


def test_a_hold_whose_process_died_without_a_word_is_stale(held_spec):
    spec, s = held_spec
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    f = hold_file(spec, s)
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"pid": int(gone.stdout), "since": "t", "reason": "replay"}))
    assert current_hold(spec, s) is None


def test_no_stream_starts_and_no_increment_runs_on_a_failed_jobs_checkpoint(held_spec):
    from jobs.steps.stream import run_increment, start_streaming_join

    spec, s = held_spec
    _failed_in_a_process_now_gone(spec, s, RuntimeError("Kafka went away"))
    with pytest.raises(CheckpointBusy, match=r"failed .*Kafka went away.*run that job again"):
        start_streaming_join(None, spec, bootstrap="127.0.0.1:1", s=s)  # refused before Spark is touched
    skipped = run_increment(None, spec, bootstrap="127.0.0.1:1", s=s)
    assert skipped["batches"] == 0 and "Kafka went away" in skipped["skipped"]


def test_the_supervisor_starts_nothing_and_alerts_once(held_spec, tmp_path):
    from jobs.operate.process import StreamProcess
    from jobs.operate.supervisor import supervise

    spec, s = held_spec
    _failed_in_a_process_now_gone(spec, s, RuntimeError("Kafka went away"))

    class NeverStarted(StreamProcess):
        def start(self):
            raise AssertionError("a stream started on a half-built checkpoint")

    alerts = []
    report = supervise(
        spec,
        s,
        spec_path=tmp_path / "spec.yaml",
        checks=3,
        interval_s=0,
        process=NeverStarted(tmp_path / "spec.yaml", spec, s),
        on_alert=lambda kind, msg: alerts.append(kind),
    )
    assert report.states == {"held": 3} and report.restarts == []
    assert alerts == ["hold_failed"] and "Kafka went away" in report.alerts[0]["message"]


def test_running_the_job_again_takes_the_hold_over_and_ends_it(held_spec):
    spec, s = held_spec
    _failed_in_a_process_now_gone(spec, s, RuntimeError("Kafka went away"))
    with hold(spec, s, reason="replay from cut-over 2026-11-20T06:00:00+00:00"):
        assert "failed" not in current_hold(spec, s)
    assert current_hold(spec, s) is None and not hold_file(spec, s).exists()


def test_a_live_hold_still_refuses_a_second_job(held_spec):
    spec, s = held_spec
    with hold(spec, s, reason="replay"):
        f = hold_file(spec, s)
        f.write_text(json.dumps({**json.loads(f.read_text()), "pid": 1}))  # held by another live process
        with pytest.raises(CheckpointBusy, match="already held by pid 1"):
            with hold(spec, s, reason="a second replay"):
                pass


def test_a_hold_whose_pid_now_names_another_process_is_stale(held_spec):
    """After a container restart the holder's pid can name a live process of its own: the hold
    names its holder by pid and start time, so that process is not taken for it."""
    import os

    spec, s = held_spec
    with hold(spec, s, reason="replay"):
        f = hold_file(spec, s)
        rec = json.loads(f.read_text())
        assert rec["tag"].startswith(f"{os.getpid()}-") and current_hold(spec, s) is not None
        f.write_text(json.dumps({**rec, "tag": f"{os.getpid()}-1"}))  # same pid, started at another time
        assert current_hold(spec, s) is None


def test_a_job_that_fails_before_it_changed_anything_ends_the_hold_as_it_began(held_spec):
    """A replay refused before it moved the checkpoint (an increment still running): the stream
    may start again from the checkpoint it had; a re-run that fails that early keeps the hold
    the earlier failure left (its half-built checkpoint is still there)."""
    spec, s = held_spec
    with pytest.raises(CheckpointBusy):
        with hold(spec, s, reason="replay") as held:
            held.at_risk = False
            raise CheckpointBusy("an increment runs")
    assert current_hold(spec, s) is None and not hold_file(spec, s).exists()

    _failed_in_a_process_now_gone(spec, s, RuntimeError("Kafka went away"))
    with pytest.raises(CheckpointBusy):
        with hold(spec, s, reason="replay") as held:
            held.at_risk = False
            raise CheckpointBusy("an increment runs")
    assert "Kafka went away" in current_hold(spec, s)["failed"]

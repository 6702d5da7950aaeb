"""A replay moves the old checkpoint aside as ``<checkpoint>.bak-<UTC>``; a second one in the same
second (a replay run again at once after it failed) moved the checkpoint inside the first backup."""

from __future__ import annotations

from datetime import UTC, datetime


def test_two_replays_in_one_second_keep_two_backups_side_by_side(tmp_path, monkeypatch):
    from jobs.operate import checkpoint
    from jobs.operate.replay import backup_and_clear

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 7, 17, 0, 0, tzinfo=UTC)

    monkeypatch.setattr(checkpoint, "datetime", Frozen)  # the clock, not the product
    cp = tmp_path / "checkpoints" / "stream_join"
    kept = []
    for attempt in ("first", "second"):
        cp.mkdir(parents=True)
        (cp / "metadata").write_text(attempt)
        kept.append(backup_and_clear(str(cp)))
        assert not cp.exists()
    assert kept == [f"{cp}.bak-20261207T170000Z", f"{cp}.bak-20261207T170000Z-1"]
    assert [(tmp_path / "checkpoints" / k.rsplit("/", 1)[1] / "metadata").read_text() for k in kept] == [
        "first",
        "second",
    ]


def test_a_backup_waits_for_no_stream_stopping_a_running_one_only_when_asked(tmp_path, demo_spec):
    """A copy taken while the stream writes can hold a commit whose state files it copied before
    they were written. A running stream refuses the backup, unless --stop; an increment owning the
    checkpoint refuses it; the hold ends with the backup, so the supervisor starts the stream again."""
    import dataclasses
    import sys
    from pathlib import Path

    import pytest

    from jobs.operate.checkpoint import backup_stopped
    from jobs.operate.process import STREAM_COMMAND, StreamProcess
    from jobs.settings import Settings
    from jobs.spec import write_spec
    from jobs.storage.checkpoints import CheckpointError
    from jobs.storage.hold import CheckpointBusy, current_hold, stream_owner
    from jobs.storage.processes import pid_alive

    s = dataclasses.replace(Settings(), storage_root=str(tmp_path), log_dir=str(tmp_path / "logs"))
    spec = demo_spec.model_copy(update={"pipeline": "backed_up"})
    path = write_spec(spec, tmp_path / "spec.yaml")
    cp = Path(s.checkpoint_path(spec.pipeline, "stream_join"))
    cp.mkdir(parents=True)
    (cp / "metadata").write_text('{"id": "q"}')

    class Sleeper(StreamProcess):  # a live process standing in for the stream job
        def command(self):
            return [sys.executable, "-c", "import time; time.sleep(60)", *STREAM_COMMAND, "--spec", self.spec_path]

    stream = Sleeper(path, spec, s)
    stream.start()
    try:
        with pytest.raises(CheckpointBusy, match=r"is writing the checkpoint.*pass --stop"):
            backup_stopped(spec, cp, s)
        assert pid_alive(stream.pid) and not list(cp.parent.glob("*.bak-*"))
        as_uri = dataclasses.replace(s, storage_root=f"file://{tmp_path}")  # the same folder, spelt otherwise
        with pytest.raises(CheckpointBusy, match="is writing the checkpoint"):
            backup_stopped(spec, cp, as_uri)
        assert current_hold(spec, s) is None

        target, stopped = backup_stopped(spec, cp, s, stop=True)
        assert stopped == stream.pid and not stream.alive()
        assert (cp.parent / target.name / "metadata").read_text() == '{"id": "q"}'
        assert current_hold(spec, s) is None  # the supervisor's next check starts it again

        stream.start()  # a folder the stream does not write (a backup) is copied as it is
        again, stopped = backup_stopped(spec, target, s)
        assert stopped is None and pid_alive(stream.pid) and (cp.parent / again.name / "metadata").exists()
        with pytest.raises(CheckpointError, match="no checkpoint to back up"):
            backup_stopped(spec, cp.parent / "missing", s, stop=True)
        assert pid_alive(stream.pid)  # not stopped for a folder that is not there
        stream.stop(timeout=5)

        with stream_owner(spec, s, role="increment"), pytest.raises(CheckpointBusy, match="backing up its checkpoint"):
            backup_stopped(spec, cp, s)
    finally:
        stream.stop(timeout=5)

"""One stream owns a pipeline's checkpoint at a time: a live owner is refused at once, an owner
that was just stopped (its last threads still exiting, the lock not yet released) is waited for."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import threading

import pytest

from jobs.storage.hold import CheckpointBusy, stream_owner, supervisor_dir


@pytest.fixture
def held(demo_spec, test_settings, tmp_path):
    """The pipeline's lock held by another open file (as another process would), and a way to
    name its owner in the owner record."""
    s = dataclasses.replace(test_settings, storage_root=str(tmp_path / "storage"))
    folder = supervisor_dir(demo_spec, s)
    folder.mkdir(parents=True)
    fd = os.open(folder / "stream.lock", os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def owned_by(pid: int) -> None:
        (folder / "stream.owner.json").write_text(json.dumps({"pid": pid, "role": "continuous", "since": "t"}))

    yield s, fd, owned_by
    os.close(fd)


def test_a_live_owner_is_refused_at_once(demo_spec, held, monkeypatch):
    s, _, owned_by = held
    owned_by(os.getpid())
    monkeypatch.setattr("jobs.storage.hold.time.sleep", lambda _: pytest.fail("waited on a live owner"))
    with pytest.raises(CheckpointBusy, match=rf"in use by pid {os.getpid()} \(continuous"):
        with stream_owner(demo_spec, s, role="increment"):
            pass


def test_an_exiting_owner_is_waited_for(demo_spec, held):
    s, fd, owned_by = held
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owned_by(int(gone.stdout))  # its process has exited, its lock is still held for a moment
    threading.Timer(0.5, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
    with stream_owner(demo_spec, s, role="replay"):
        record = json.loads((supervisor_dir(demo_spec, s) / "stream.owner.json").read_text())
        assert record["pid"] == os.getpid() and record["role"] == "replay"

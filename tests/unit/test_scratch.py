"""A driver's scratch folder: a process's own is kept while it lives, a dead process's is removed
by the next driver's start, a folder of a pid now reused by another process is removed too, and
a user's ``spark.local.dir`` or ``java.io.tmpdir`` is theirs."""

from __future__ import annotations

import os
import subprocess
import sys

from jobs.settings import Settings
from jobs.storage.processes import process_tag, tag_alive
from jobs.storage.scratch import driver_scratch, scratch_dir, scratch_root, sweep


def _dead_tag() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = process_tag(child.pid)
    child.wait()
    return tag


def test_a_tag_names_one_process_and_not_a_later_one_with_its_pid():
    assert tag_alive(process_tag(os.getpid())) is True
    assert tag_alive(_dead_tag()) is False
    pid, _, started = process_tag(os.getpid()).partition("-")
    assert tag_alive(f"{pid}-{int(started) - 1}") is False  # the pid, reused by this process
    assert tag_alive("not-ours") is None and tag_alive("123") is None


def test_the_next_driver_removes_the_folders_of_processes_that_are_gone(tmp_path):
    s = Settings(storage_root=str(tmp_path))
    root = scratch_root(s)
    dead = root / _dead_tag()
    (dead / "spark-1" / "StateStoreId(opId=0,partId=0,name=default)").mkdir(parents=True)
    (dead / "liblz4-java.so").write_bytes(b"x")
    other = root / "kept-by-someone"
    other.mkdir()
    conf = driver_scratch(s, {"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:/x"})
    own = scratch_dir(s)
    assert not dead.exists() and other.is_dir() and own.is_dir()
    assert conf == {
        "spark.local.dir": str(own),
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:/x -Djava.io.tmpdir={own}",
    }
    assert sweep(s) == []  # this process lives: its folder stays


def test_a_users_local_dir_and_tmpdir_are_kept(tmp_path):
    s = Settings(storage_root=str(tmp_path))
    conf = {"spark.local.dir": "/fast/disk", "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/fast/tmp"}
    assert driver_scratch(s, conf) == {}

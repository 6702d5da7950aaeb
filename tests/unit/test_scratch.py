"""A driver's scratch folder: a process's own is kept while it lives, a dead process's is removed
by the next driver's start, a folder of a pid now reused by another process is removed too, and
a user's ``spark.local.dir`` or ``java.io.tmpdir`` is theirs."""

from __future__ import annotations

import os
import subprocess
import sys

from jobs.storage.processes import pid_namespace, process_tag, tag_alive
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


def test_the_scratch_root_is_the_temp_dirs_and_this_pid_namespaces(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    assert scratch_root() == tmp_path / "joinshift-scratch" / pid_namespace()
    assert pid_namespace() == pid_namespace() and scratch_dir().parent == scratch_root()


def test_the_next_driver_removes_the_folders_of_processes_that_are_gone(tmp_path):
    dead = tmp_path / _dead_tag()
    (dead / "spark-1" / "StateStoreId(opId=0,partId=0,name=default)").mkdir(parents=True)
    (dead / "liblz4-java.so").write_bytes(b"x")
    other = tmp_path / "kept-by-someone"
    other.mkdir()
    conf = driver_scratch({"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:/x"}, tmp_path)
    own = scratch_dir(tmp_path)
    assert not dead.exists() and other.is_dir() and own.is_dir()
    assert conf == {
        "spark.local.dir": str(own),
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:/x -Djava.io.tmpdir={own}",
    }
    assert sweep(tmp_path) == []  # this process lives: its folder stays


def test_a_users_local_dir_and_tmpdir_are_kept(tmp_path):
    conf = {"spark.local.dir": "/fast/disk", "spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/fast/tmp"}
    assert driver_scratch(conf, tmp_path) == {}

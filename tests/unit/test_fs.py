"""Files by URI (jobs/storage/fs.py) on a local root: plain Python file calls, no Spark; and where
the machine-local files go (Settings.local_path). The same calls on s3a:// run in
tests/integration/test_storage_s3a.py."""

from __future__ import annotations

from pathlib import Path

from jobs.settings import PROJECT_ROOT, Settings
from jobs.storage import fs


def test_local_paths_and_uris():
    assert fs.local("/a/b") == Path("/a/b") and fs.local("rel/x") == Path("rel/x")
    assert fs.local("file:///a/b") == Path("/a/b") and fs.local("file:/a/b") == Path("/a/b")
    assert fs.local("s3a://bucket/x") is None and not fs.is_local("hdfs://nn/x")
    assert fs.join("s3a://b/root/", "tables", "t") == "s3a://b/root/tables/t"
    assert fs.name("s3a://b/root/cp/") == "cp"


def test_local_file_calls(tmp_path):
    root = f"file://{tmp_path}"
    f = fs.join(root, "a", "log.jsonl")
    assert not fs.exists(f) and fs.listdir(fs.join(root, "a")) == []
    fs.append_text(f, "1\n")
    fs.append_text(f, "2\n")
    assert fs.read_text(f) == "1\n2\n" and fs.read_bytes(f, tail=2) == b"2\n"
    fs.write_text(fs.join(root, "a", "state.json"), "{}")
    assert fs.listdir(fs.join(root, "a")) == [("log.jsonl", False), ("state.json", False)]
    assert fs.size(fs.join(root, "a")) == 6 and fs.is_dir(fs.join(root, "a"))
    fs.copy(fs.join(root, "a"), fs.join(root, "b"))
    fs.rename(fs.join(root, "b"), fs.join(root, "c", "moved"))
    assert fs.read_text(fs.join(root, "c", "moved", "log.jsonl")) == "1\n2\n" and not fs.exists(fs.join(root, "b"))
    fs.delete(fs.join(root, "a"))
    fs.delete(fs.join(root, "never"))
    assert not fs.exists(fs.join(root, "a")) and fs.exists(fs.join(root, "c"))


def test_machine_local_files_follow_a_local_root_and_leave_a_uri_root():
    assert Settings(storage_root="/srv/js").local_path("supervisor", "p") == Path("/srv/js/supervisor/p")
    assert Settings(storage_root="file:///srv/js").local_path("reports") == Path("/srv/js/reports")
    remote = Settings(storage_root="s3a://bucket/js")
    assert remote.local_path("supervisor") == PROJECT_ROOT / "var" / "local" / "supervisor"
    assert Settings(storage_root="s3a://b/js", local_root="/var/js").local_path("x") == Path("/var/js/x")

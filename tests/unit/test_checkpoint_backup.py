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

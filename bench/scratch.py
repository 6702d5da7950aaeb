"""A benchmark's own world: a wiped scratch folder holding its broker, logs and storage, so a run
never touches the project's embedded default (``var/``) or another benchmark's data."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from jobs.settings import Settings, settings


def scratch_settings(root: str | Path, **overrides: Any) -> Settings:
    """Wipe ``root``; settings whose broker home, logs and storage root are under it (no external
    broker), with ``overrides`` on top."""
    root = Path(root)
    shutil.rmtree(root, ignore_errors=True)
    return dataclasses.replace(
        settings(),
        kafka_home=str(root / "kafka"),
        log_dir=str(root / "logs"),
        storage_root=str(root / "storage"),
        kafka_bootstrap="",
        **overrides,
    )

"""A benchmark's own world: a wiped scratch folder holding its broker, logs and storage, so a run
never touches the project's embedded default (``var/``) or another benchmark's data."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from jobs.settings import PROJECT_ROOT, Settings, settings


def scratch_settings(root: str | Path, **overrides: Any) -> Settings:
    """Wipe ``root``; settings whose broker home, logs and storage root are under it (no external
    broker), with ``overrides`` on top. A relative ``root`` is taken from the current folder: the
    embedded broker and Spark run in other folders."""
    root = Path(root).resolve()
    shutil.rmtree(root, ignore_errors=True)
    return dataclasses.replace(
        settings(),
        kafka_home=str(root / "kafka"),
        log_dir=str(root / "logs"),
        storage_root=str(root / "storage"),
        kafka_bootstrap="",
        **overrides,
    )


def default_spec(max_offsets: int | None = None) -> Any:
    """The shipped spec (``include/specs/search_sessions.yaml``), its micro-batches capped at
    ``max_offsets`` records per topic when given."""
    from jobs.spec import load_spec

    base = load_spec(PROJECT_ROOT / "include" / "specs" / "search_sessions.yaml")
    if max_offsets is None:
        return base
    return base.model_copy(
        update={"streaming": base.streaming.model_copy(update={"max_offsets_per_trigger": max_offsets})}
    )


def publish_one_day(spec: Any, bootstrap: str, left_events: int) -> None:
    """Generate one day (2026-11-19, ``left_events`` left events), create the spec's two topics
    and publish the day's records."""
    from datetime import date

    from jobs.storage.kafka import create_topic
    from jobs.workload.generator import generate
    from jobs.workload.params import WorkloadParams
    from jobs.workload.publisher import publish

    wl = generate(WorkloadParams(left_events_per_day=left_events, days=1, start_date=date(2026, 11, 19)), spec)
    for st in (spec.left, spec.right):
        create_topic(bootstrap, st.topic)
    publish(wl.records, bootstrap)

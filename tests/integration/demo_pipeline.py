"""The demo pipeline every integration module may read: two generated days through every DAG.

Built once per test session by the ``demo_pipeline`` fixture (``tests/integration/conftest.py``).
Read it; never write to its tables or topics (derive a pipeline of your own with
``own_pipeline_spec`` for that).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import yaml

DAYS = [date(2026, 11, 19), date(2026, 11, 20)]
ARRIVAL_DAYS = [*DAYS, date(2026, 11, 21)]
WORKLOAD = {"seed": 7, "start_date": "2026-11-19", "days": 2, "left_events_per_day": 1500}
SLICE_MINUTES = 180  # coarse: each micro-batch costs ~1 s on 2 cores


@dataclass(frozen=True)
class DemoPipeline:
    workload: Any  # jobs.workload.generator's generated workload: records, left, right (pandas)
    days: list[date]
    arrival_days: list[date]
    started_at: datetime  # before its first DAG run: what the metadata DB holds from before is not its


def _utc(d: date) -> datetime:
    return datetime.combine(d, datetime.min.time(), UTC)


def build(dagbag, demo_spec, test_root) -> DemoPipeline:
    """Run the DAGs once: simulate (publish as history, then replay-as-live), daily landing +
    baselines, compare, report."""
    from jobs.spec import DEFAULT_SPEC
    from jobs.workload.generator import generate
    from jobs.workload.params import parse_workload

    workload_file = test_root / "workload.yaml"
    workload_file.write_text(yaml.safe_dump(WORKLOAD))
    wl = generate(parse_workload(WORKLOAD), demo_spec)
    conf = {"spec": DEFAULT_SPEC}
    started_at = datetime.now(UTC)

    def run(dag_id, logical, run_conf):
        dr = dagbag.get_dag(dag_id).test(logical_date=_utc(logical) if logical else None, run_conf=run_conf)
        assert "success" in str(dr.state).lower(), f"{dag_id} {logical}: {dr.state}"

    run("joinshift_simulate", None, {**conf, "workload": str(workload_file), "slice_minutes": SLICE_MINUTES})
    for ds in ARRIVAL_DAYS:
        run("joinshift_daily", ds, conf)
    for ds in DAYS:
        run("joinshift_compare", ds, conf)
    run("joinshift_report", DAYS[-1], conf)
    return DemoPipeline(wl, DAYS, ARRIVAL_DAYS, started_at)

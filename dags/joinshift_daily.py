"""
### joinshift: daily landing and batch joins

For the ds that just ended: land both Kafka topics into their Hive-style daily tables
(partitioned by arrival date, bad records to quarantine), then run the paper's batch baselines:
`batch_1d_1d` and `batch_1d_windowed` for this ds, and `batch_1d_2d` for the ds whose
neighbouring day has now landed (the day before, when the window reaches past midnight); and
the `reference` (the windowed join with no daily cut-off) for the ds whose last reachable right
day has now landed.
Each batch join updates the `joinshift_batch_outputs` asset, which schedules `joinshift_compare`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, task
from airflow.timetables.interval import CronDataIntervalTimetable


@dag(
    dag_id="joinshift_daily",
    # the day's interval, run once it has ended: ds is the day that ended (Airflow 3's "@daily"
    # runs at the day's start with that day as its logical date, so ds would be a day barely begun)
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "batch"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={"spec": Param("", type="string", description="join spec YAML from the project root; empty: the default")},
    doc_md=__doc__,
)
def joinshift_daily():
    @task
    def land(side: str, params=None, ds=None) -> dict:
        """Land one stream's ds from Kafka into Delta; counts per quarantine reason."""
        from jobs import airflow_tasks

        return airflow_tasks.land(params["spec"], ds, side)

    @task(outlets=[Asset("joinshift_batch_outputs")])
    def batch_join(variant: str, params=None, ds=None, *, outlet_events=None) -> dict:
        """One batch baseline (or the reference), idempotent per ds partition; updates `joinshift_batch_outputs`."""
        from jobs import airflow_tasks

        outlet_events[Asset("joinshift_batch_outputs")].extra = {"spec": params["spec"]}  # compare's pipeline
        return airflow_tasks.batch(params["spec"], ds, variant)

    landed = [land.override(task_id=f"land_{side}")(side) for side in ("left", "right")]
    for variant in ("batch_1d_1d", "batch_1d_windowed", "batch_1d_2d", "reference"):
        landed >> batch_join.override(task_id=variant)(variant)


joinshift_daily()

"""
### joinshift: daily compare

Waits until the batch baselines of the ds exist (including `batch_1d_2d`, which needs the next
day landed) and the stream's watermark passed the end of the ds, then writes one metrics row
per variant: left events, matched left, match rate, and the window-boundary delta percentiles.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

SPEC = "include/specs/search_sessions.yaml"


@dag(
    dag_id="joinshift_compare",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "accuracy"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"spec": Param(SPEC, type="string", description="join spec YAML (path from the project root)")},
    doc_md=__doc__,
)
def joinshift_compare():
    @task.sensor(poke_interval=600, timeout=2 * 86400, mode="reschedule")
    def wait_for_batch_and_stream(params=None, ds=None) -> bool:
        """True once every batch variant for ds exists and the stream has moved past ds."""
        from jobs import airflow_tasks

        return airflow_tasks.inputs_ready(params["spec"], ds)

    @task
    def compare(params=None, ds=None) -> list[dict]:
        """Match rates of the four variants and boundary deltas, to the metrics table."""
        from jobs import airflow_tasks

        return airflow_tasks.compare(params["spec"], ds)

    wait_for_batch_and_stream() >> compare()


joinshift_compare()

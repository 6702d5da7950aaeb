"""
### joinshift: a generated workload, replayed as live

Generates the workload described by a file under `include/workloads/`, publishes it into the
spec's topics at once as history (each record stamped with its arrival time), then runs
replay-as-live over the days it arrives on: slice by slice of record time (`slice_minutes`), each
slice published into the pipeline's replay topics and flushed before one stream increment over
exactly it, so watermarks advance as they would live and two runs give identical output.
Triggered by hand (or by `joinshift demo`); it is how a team tries the stream on realistic
lateness before pointing it at production topics (`joinshift_replay_as_live` for those).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task


@dag(
    dag_id="joinshift_simulate",
    schedule=None,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "simulation"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "spec": Param("", type="string", description="join spec YAML from the project root; empty: the default"),
        "workload": Param("", type="string", description="workload parameters YAML; empty: the default"),
        "slice_minutes": Param(30, type="number", exclusiveMinimum=0, description="simulated minutes per slice"),
    },
    doc_md=__doc__,
)
def joinshift_simulate():
    @task(retries=0)
    def publish_workload(params=None) -> dict:
        """Generate the workload and publish it into the spec's topics as history."""
        from jobs import airflow_tasks

        return airflow_tasks.publish_workload(params["spec"], params["workload"])

    @task(retries=0)
    def replay_as_live(published: dict, params=None) -> dict:
        """Replay the days it arrives on as live, one increment per slice."""
        from jobs import airflow_tasks

        return airflow_tasks.replay_as_live(params["spec"], published["days"], float(params["slice_minutes"]))

    replay_as_live(publish_workload())


joinshift_simulate()

"""
### joinshift: replay a generated workload as simulated real time

Generates the workload described by a file under `include/workloads/`, publishes it to Kafka
slice by slice (arrival time order, `slice_minutes` of simulated time each) and lets the
streaming join finish each slice before the next, so watermarks advance as they would live.
Triggered by hand (or by `joinshift demo`); it is how a team tries the stream on realistic
lateness before pointing it at production topics.
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
        "slice_minutes": Param(30, type="integer", minimum=1, description="simulated minutes per slice"),
    },
    doc_md=__doc__,
)
def joinshift_simulate():
    @task(retries=0)
    def simulate(params=None) -> dict:
        """Publish the workload slice by slice with the streaming join running."""
        from jobs import airflow_tasks

        return airflow_tasks.simulate(params["spec"], params["workload"], int(params["slice_minutes"]))

    simulate()


joinshift_simulate()

"""
### joinshift: streaming join increments

Every few minutes, run the streaming interval join as an `availableNow` increment: read what
Kafka has beyond the checkpoint, join it, append new rows to the Delta output exactly once,
stop. Watermarks, state and offsets carry over in the checkpoint between increments. Each
increment updates the `joinshift_stream_output` asset, which schedules `joinshift_compare`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, task


@dag(
    dag_id="joinshift_stream",
    schedule=timedelta(minutes=5),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "stream"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={"spec": Param("", type="string", description="join spec YAML from the project root; empty: the default")},
    doc_md=__doc__,
)
def joinshift_stream():
    @task(outlets=[Asset("joinshift_stream_output")])
    def stream_increment(params=None, *, outlet_events=None) -> dict:
        """Process everything available in Kafka, then stop (Spark `availableNow`)."""
        from jobs import airflow_tasks

        outlet_events[Asset("joinshift_stream_output")].extra = {"spec": params["spec"]}  # compare's pipeline
        return airflow_tasks.stream_increment(params["spec"])

    stream_increment()


joinshift_stream()

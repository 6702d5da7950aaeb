"""
### joinshift: replay-as-live, a faithful trial of the stream over any topics' history

Reads the spec's topics (all partitions, both topics) for the arrival days asked, in arrival
order, and admits them slice by slice of record time: each slice is published into the
pipeline's replay topics and flushed before one stream increment over exactly it. Two runs give
identical output tables, and partition skew cannot move the watermark. A trial: the pipeline's
stream checkpoint and output are replaced (refused while it is held or its supervised stream runs).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task


@dag(
    dag_id="joinshift_replay_as_live",
    schedule=None,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "simulation"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "spec": Param("", type="string", description="join spec YAML from the project root; empty: the default"),
        "from_ds": Param("", type="string", description="first arrival day (YYYY-MM-DD); empty: every day held"),
        "to_ds": Param("", type="string", description="last arrival day; empty: from_ds"),
        "slice_minutes": Param(
            30, type="number", exclusiveMinimum=0, description="record-time minutes per slice (1.5: 90 s)"
        ),
    },
    doc_md=__doc__,
)
def joinshift_replay_as_live():
    @task(retries=0)
    def replay_as_live(params=None) -> dict:
        """One increment per slice of record time, over the days asked."""
        from jobs import airflow_tasks

        days = airflow_tasks.days_between(params["from_ds"], params["to_ds"])
        return airflow_tasks.replay_as_live(params["spec"], days, float(params["slice_minutes"]))

    replay_as_live()


joinshift_replay_as_live()

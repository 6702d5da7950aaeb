"""
### joinshift: compare

Scheduled by the `joinshift_batch_outputs` and `joinshift_stream_output` assets (a batch join
or a stream increment finished): for every landed ds whose batch baselines all exist (including
`batch_1d_2d`, which needs the next day landed) and that the stream is done with, write one
metrics row per variant: left events, matched left, match rate, and the window-boundary delta
percentiles, for each pipeline (spec) the triggering events name. Updates
`joinshift_match_metrics` with the [spec, ds] compared. A manual run with a logical date compares
that ds of its `spec`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, task


@dag(
    dag_id="joinshift_compare",
    schedule=Asset("joinshift_batch_outputs") | Asset("joinshift_stream_output"),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "accuracy"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"spec": Param("", type="string", description="join spec YAML from the project root; empty: the default")},
    doc_md=__doc__,
)
def joinshift_compare():
    @task(outlets=[Asset("joinshift_match_metrics")])
    def compare(params=None, ds=None, *, triggering_asset_events=None, outlet_events=None) -> list[list[str]]:
        """Match rates of the four variants and boundary deltas, to the metrics table, for the
        pipelines whose outputs changed; the [spec, ds] compared go on to the gate and report."""
        from jobs import airflow_tasks

        runs = airflow_tasks.compare_runs(params["spec"], ds, triggering_asset_events)
        outlet_events[Asset("joinshift_match_metrics")].extra = {"runs": runs}
        return runs

    compare()


joinshift_compare()

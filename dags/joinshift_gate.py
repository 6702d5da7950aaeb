"""
### joinshift: cut-over gate

Scheduled by the `joinshift_match_metrics` asset (compare wrote a day's match rates): for those
days, check the cut-over SLO (spec `cutover` and `accuracy`): match rate within tolerance of the
baseline, unexplained misses under the limit, no lost left events, p99 output latency within
budget, no restart storm. The evidence goes to the `gate_evidence` Delta table and
`<storage_root>/gate/<pipeline>/state.json` (the UI page). Promotions and rollbacks are people's
decisions: `joinshift gate status|promote|rollback`. A manual run with a logical date checks that ds.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, task


@dag(
    dag_id="joinshift_gate",
    schedule=[Asset("joinshift_match_metrics")],
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "cutover"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"spec": Param("", type="string", description="join spec YAML from the project root; empty: the default")},
    doc_md=__doc__,
)
def joinshift_gate():
    @task
    def days_to_evaluate(params=None, ds=None, *, triggering_asset_events=None) -> list[list[str]]:
        """The run's ds of its spec, or the [spec, ds] compare named in the triggering asset events."""
        from jobs import airflow_tasks

        return airflow_tasks.runs_to_do(params["spec"], ds, triggering_asset_events)

    @task
    def evaluate(runs: list[list[str]]) -> list[dict]:
        """Each day's SLO checks, recorded as evidence; the stage and days met in the log."""
        from jobs import airflow_tasks

        return airflow_tasks.gate_evaluate_runs(runs)

    evaluate(days_to_evaluate())


joinshift_gate()

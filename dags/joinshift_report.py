"""
### joinshift: accuracy report and quality gates

Scheduled by the `joinshift_match_metrics` asset (compare wrote a ds's match rates): for those
days, run the data-quality gates (Great Expectations suites in `expectations/`: raw streams,
join outputs, accuracy against the baseline) and build the day's report: match rate per day,
match rate and memory vs window, PT delay, boundary-delta histograms, miss attribution, the
window recommendation vs the deployed spec, gate results. A failed gate fails its task
(readable summary in the log) and shows red in the report. A manual run with a logical date
reports that ds.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag, task


@dag(
    dag_id="joinshift_report",
    schedule=[Asset("joinshift_match_metrics")],
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "accuracy"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"spec": Param("", type="string", description="join spec YAML from the project root; empty: the default")},
    doc_md=__doc__,
)
def joinshift_report():
    @task
    def days_to_report(params=None, ds=None, *, triggering_asset_events=None) -> list[list[str]]:
        """The run's ds of its spec, or the [spec, ds] compare named in the triggering asset events."""
        from jobs import airflow_tasks

        return airflow_tasks.runs_to_do(params["spec"], ds, triggering_asset_events)

    @task(retries=0)
    def quality_gates(runs: list[list[str]]) -> list[dict]:
        """Great Expectations suites; fails (without retrying) when a gate fails."""
        from jobs import airflow_tasks

        return [r for spec, day in runs for r in airflow_tasks.quality_gates(spec, day)]

    @task(trigger_rule="all_done")
    def accuracy_report(runs: list[list[str]]) -> list[dict]:
        """The HTML + PNG + JSON report, and the window recommendation."""
        from jobs import airflow_tasks

        return [airflow_tasks.report(spec, day) for spec, day in runs]

    @task(trigger_rule="one_failed", retries=0)
    def run_failed() -> None:
        """The run's state: the report runs after a failed gate too, and a run's state is its last tasks'."""
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException("a task of this run failed: see it for why")

    days = days_to_report()
    gates, report = quality_gates(days), accuracy_report(days)
    gates >> report
    [gates, report] >> run_failed()


joinshift_report()

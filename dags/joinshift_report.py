"""
### joinshift: daily accuracy report and quality gates

Once compare has written the ds's match rates, run the data-quality gates (Great Expectations
suites in `expectations/`: raw streams, join outputs, accuracy against the baseline) and build
the day's report: match rate per day, match rate and memory vs window, PT delay, boundary-delta
histograms, miss attribution, the window recommendation vs the deployed spec, gate results.
A failed gate fails its task (readable summary in the log) and shows red in the report.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

SPEC = "include/specs/search_sessions.yaml"


@dag(
    dag_id="joinshift_report",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "accuracy"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={"spec": Param(SPEC, type="string", description="join spec YAML (path from the project root)")},
    doc_md=__doc__,
)
def joinshift_report():
    @task.sensor(poke_interval=600, timeout=3 * 86400, mode="reschedule")
    def wait_for_compare(params=None, ds=None) -> bool:
        """True once compare wrote every variant's match rate for ds."""
        from jobs import airflow_tasks

        return airflow_tasks.metrics_ready(params["spec"], ds)

    @task(retries=0)
    def quality_gates(params=None, ds=None) -> list[dict]:
        """Great Expectations suites; fails (without retrying) when a gate fails."""
        from jobs import airflow_tasks

        return airflow_tasks.quality_gates(params["spec"], ds)

    @task(trigger_rule="all_done")
    def accuracy_report(params=None, ds=None) -> dict:
        """The HTML + PNG + JSON report, and the window recommendation."""
        from jobs import airflow_tasks

        return airflow_tasks.report(params["spec"], ds)

    ready = wait_for_compare()
    ready >> quality_gates() >> accuracy_report()


joinshift_report()

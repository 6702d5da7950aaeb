"""
### joinshift: supervise the continuous streaming join

Every 10 minutes: make sure the continuous join process (`python -m jobs.stream_join`) runs,
starting it if not, then watch it for ~9 minutes (bounded checks). A process that exited or
stalled is restarted from its checkpoint with exponential backoff; a join whose BOTH inputs are
behind (paper §6.4) fails the task, so the failure callback raises the alert. Health samples are
then loaded into the `stream_health` Delta table. While a replay holds the pipeline
(`joinshift_replay`), checks count as `held` and nothing is restarted. Logic: `jobs/supervisor.py`.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

SPEC = "include/specs/search_sessions.yaml"
log = logging.getLogger("joinshift.alerts")


def alert_on_failure(context) -> None:
    ti = context.get("task_instance")
    log.error("ALERT joinshift stream supervision failed: %s (%s)", getattr(ti, "task_id", "?"),
              context.get("exception"))


@dag(
    dag_id="joinshift_supervise",
    schedule=timedelta(minutes=10),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "stream", "supervision"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "on_failure_callback": alert_on_failure},
    params={"spec": Param(SPEC, type="string", description="join spec YAML (path from the project root)"),
            "checks": Param(54, type="integer", minimum=1, description="health checks per run"),
            "interval_s": Param(10, type="number", minimum=0.5, description="seconds between checks")},
    doc_md=__doc__,
)
def joinshift_supervise():
    @task(execution_timeout=timedelta(minutes=12))
    def supervise_stream(params=None) -> dict:
        """Adopt (pid file) or start the stream process; check it; restart on exit/stall."""
        from jobs import orchestration

        return orchestration.supervise(params["spec"], params["checks"], params["interval_s"])

    @task(trigger_rule="all_done")
    def load_health(params=None) -> int:
        """Copy the supervisor's health.jsonl into the `stream_health` Delta table (idempotent)."""
        from jobs import orchestration

        return orchestration.load_health(params["spec"])

    supervise_stream() >> load_health()


joinshift_supervise()

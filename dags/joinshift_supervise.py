"""
### joinshift: supervise the continuous streaming join

Every 10 minutes a sensor watches the continuous join process (`joinshift stream`)
for `watch_minutes`, one check per 10-second poke: it starts the process if none runs, restarts
one that exited or stalled from its checkpoint with exponential backoff (kept across pokes), and
fails, so the failure callback raises the alert, when it gives up restarting or BOTH inputs are
behind (paper §6.4). While a replay holds the pipeline (`joinshift_replay`), pokes count as
`held` and nothing is restarted. Health samples and the join's per-micro-batch progress are then
loaded into the `stream_health` and `stream_progress` Delta tables. Logic: `jobs/operate/supervisor.py`.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pendulum
from airflow.sdk import Param, PokeReturnValue, dag, task

log = logging.getLogger("joinshift.alerts")
#: The longest watch a run may ask for: the sensor times out a minute after it (a timeout is a
#: failure, and the failure callback would raise a false alert on a healthy stream).
WATCH_MAX_MINUTES = 11


def alert_on_failure(context) -> None:
    ti = context.get("task_instance")
    log.error(
        "ALERT joinshift stream supervision failed: %s (%s)", getattr(ti, "task_id", "?"), context.get("exception")
    )


@dag(
    dag_id="joinshift_supervise",
    schedule=timedelta(minutes=10),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "stream", "supervision"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "on_failure_callback": alert_on_failure},
    params={
        "spec": Param("", type="string", description="join spec YAML from the project root; empty: the default"),
        "watch_minutes": Param(
            9, type="number", minimum=0, maximum=WATCH_MAX_MINUTES, description="how long this run watches"
        ),
    },
    doc_md=__doc__,
)
def joinshift_supervise():
    @task.sensor(poke_interval=10, timeout=timedelta(minutes=WATCH_MAX_MINUTES + 1), mode="poke")
    def supervise_stream(params=None, run_id=None) -> PokeReturnValue:
        """Each poke: adopt (pid file) or start the stream process, check it, restart on exit/stall."""
        from jobs import airflow_tasks

        done, summary = airflow_tasks.supervise_poke(params["spec"], run_id, params["watch_minutes"] * 60)
        return PokeReturnValue(is_done=done, xcom_value=summary)

    @task(trigger_rule="all_done")
    def load_health(params=None) -> dict:
        """Health samples and per-micro-batch progress into `stream_health` / `stream_progress`."""
        from jobs import airflow_tasks

        return airflow_tasks.load_health(params["spec"])

    @task(trigger_rule="one_failed", retries=0, on_failure_callback=None)  # the failed task alerted
    def run_failed() -> None:
        """The run's state: `load_health` runs after a failed watch too, and a run's state is its last tasks'."""
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException("a task of this run failed: see it for why")

    watch, health = supervise_stream(), load_health()
    watch >> health
    [watch, health] >> run_failed()


joinshift_supervise()

"""
### joinshift: replay Kafka to rebuild the streaming join's window (manual)

Trigger with a **cut-over** instant (ISO-8601, UTC): the new run owns the output from there on.
`check_retention` finds each stream's replay start (what a live run's state reaches back to at
the cut-over: `replay_start`, per partition via offsets-for-times) and fails, naming the gap, if
Kafka no longer holds it.
`replay` then holds the pipeline (supervision and increments keep off), stops the supervised
stream process, keeps the old checkpoint as `<checkpoint>.bak-<UTC>`, and catches up into a fresh
checkpoint writing each output row once across the switch. The next `joinshift_supervise` run
starts the stream from the new checkpoint. Runbooks: `replay_after_outage`, `change_the_window`,
`recover_broken_checkpoint`. Logic: `jobs/operate/replay.py`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task


@dag(
    dag_id="joinshift_replay",
    schedule=None,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["joinshift", "stream", "recovery"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "spec": Param("", type="string", description="join spec YAML from the project root; empty: the default"),
        "cutover": Param(
            type="string",
            format="date-time",
            description="ISO-8601 instant from which the new run owns the output, e.g. 2026-11-20T06:00:00Z",
        ),
    },
    doc_md=__doc__,
)
def joinshift_replay():
    @task(retries=0)
    def check_retention(params=None) -> dict:
        """Replay start per stream and partition; fails if Kafka no longer retains it."""
        from jobs import airflow_tasks

        return airflow_tasks.replay_plan(params["spec"], params["cutover"])

    @task(retries=0)
    def replay(params=None) -> dict:
        """Stop the stream, keep the old checkpoint, rebuild the window, own the output from cut-over."""
        from jobs import airflow_tasks

        return airflow_tasks.replay(params["spec"], params["cutover"])

    check_retention() >> replay()


joinshift_replay()

"""A DAG run's parameters by the CLI's rules, through Airflow (``dag.test()``): a wrong spec or
parameter fails the task at once, without retries and before any Spark, Kafka or Delta is
touched (so these runs need none), and the task's error is the CLI's one line."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest


def _failed_tasks(dagbag, dag_id: str, **kwargs) -> dict[str, tuple[str, int]]:
    dr = dagbag.get_dag(dag_id).test(**kwargs)
    assert "failed" in str(dr.state).lower()
    return {
        ti.task_id: (str(ti.state).lower().removeprefix("taskinstancestate."), ti.try_number)
        for ti in dr.get_task_instances()
    }


@pytest.mark.parametrize(
    "conf, line",
    [
        # a reversed range meant "every day the topics hold": the pipeline replaced from all its history
        ({"from_ds": "2026-11-20", "to_ds": "2026-11-10"}, "to_ds (2026-11-10) is before from_ds (2026-11-20)"),
        ({"to_ds": "2026-11-10"}, "to_ds needs from_ds (the first arrival day)"),
        ({"from_ds": "2026-13-01"}, "from_ds '2026-13-01' is not a date; use YYYY-MM-DD"),
        ({"from_ds": "9999-12-30"}, "from_ds '9999-12-30': give a day from 1900-01-01 to 9998-12-31"),
        ({"from_ds": "2026-11-20", "slice_minutes": 5000}, "slice_minutes 5000: use a positive duration up to a day"),
        ({"from_ds": "2026-11-20", "slice_minutes": 1440.5}, "slice_minutes 1440.5: use a positive duration"),
    ],
)
def test_a_replay_as_live_with_days_or_a_slice_the_cli_refuses_fails_naming_the_param(dagbag, conf, line):
    from airflow.sdk.exceptions import AirflowFailException

    from jobs import airflow_tasks

    assert _failed_tasks(dagbag, "joinshift_replay_as_live", run_conf=conf) == {"replay_as_live": ("failed", 1)}
    # what the DAG's task calls, with the run's params
    with pytest.raises(AirflowFailException, match=f"^{re.escape(line)}"):
        days = airflow_tasks.days_between(conf.get("from_ds"), conf.get("to_ds"))
        airflow_tasks.replay_as_live("", days, float(conf.get("slice_minutes", 30)))


def test_a_spec_that_does_not_exist_fails_the_task_at_once_not_after_its_retries(dagbag, tmp_path):
    """The report's task retries twice, 10 minutes apart: a missing spec took 20 minutes to fail."""
    from airflow.sdk.exceptions import AirflowFailException

    from jobs import airflow_tasks

    missing = tmp_path / "nope.yaml"
    tasks = _failed_tasks(
        dagbag, "joinshift_report", run_conf={"spec": str(missing)}, logical_date=datetime(2026, 11, 20, tzinfo=UTC)
    )
    assert tasks["quality_gates"] == ("failed", 1) and tasks["accuracy_report"] == ("failed", 1), tasks
    assert tasks["run_failed"] == ("failed", 1), tasks  # the run's last task: it fails the run
    with pytest.raises(AirflowFailException, match=f"^{re.escape(f'join spec {missing} does not exist')}"):
        airflow_tasks.report(str(missing), "2026-11-20")


def test_a_supervision_run_cannot_watch_past_its_sensors_timeout(dagbag):
    """A watch of 30 minutes timed the sensor out at 12: a failure, and a false alert on a healthy stream."""
    import copy
    from datetime import timedelta

    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.get_dag("joinshift_supervise")
    params = copy.deepcopy(dag.params)
    with pytest.raises(ParamValidationError, match="greater than the maximum"):
        params["watch_minutes"] = 30
    longest = dag.params.get_param("watch_minutes").schema["maximum"]
    params["watch_minutes"] = longest
    assert dag.get_task("supervise_stream").timeout > timedelta(minutes=longest).total_seconds()


@pytest.mark.parametrize("dag_id", ["joinshift_replay_as_live", "joinshift_simulate"])
def test_a_slice_of_ninety_seconds_can_be_asked_for_and_none_cannot(dagbag, dag_id):
    """The slice was a whole number of minutes: the CLI's --slice 90s had no DAG equivalent."""
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.get_dag(dag_id).params)
    params["slice_minutes"] = 1.5
    with pytest.raises(ParamValidationError, match="less than or equal to the minimum"):
        params["slice_minutes"] = 0

"""The demo's console under Airflow's own logging: a failed quality gate is one line, not a traceback."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def airflow_structlog(airflow_db):
    """structlog as Airflow configures it for a task runner, restored after the test."""
    import structlog
    from airflow.sdk.execution_time import task_runner  # noqa: F401  (Airflow's logging, as dag.test() has it)

    before = structlog.get_config()["processors"]
    yield structlog.get_logger(logger_name="task")  # the task runner's own logger
    structlog.configure(processors=before)


def _task_failed(log, exc: Exception) -> None:
    try:
        raise exc
    except Exception:  # noqa: BLE001 - what the task runner does with a task's exception
        log.exception("Task failed with exception")


def test_a_failed_gate_is_one_line_on_the_demos_console_and_other_errors_keep_their_traceback(airflow_structlog, capfd):
    import structlog

    from jobs.local.demo import _gate_failures_in_one_line, gate_failure_in_one_line
    from jobs.quality.gates import GateFailed

    _task_failed(airflow_structlog, GateFailed("1 of 4 data quality gates failed:\njoin_output: 9/10 passed"))
    before = capfd.readouterr()
    assert "Traceback" in before.out + before.err  # what Airflow prints without the demo's processor

    _gate_failures_in_one_line()
    _gate_failures_in_one_line()  # once, however often the demo runs a DAG
    assert structlog.get_config()["processors"].count(gate_failure_in_one_line) == 1

    _task_failed(airflow_structlog, GateFailed("1 of 4 data quality gates failed:\njoin_output: 9/10 passed"))
    gate = capfd.readouterr()
    text = gate.out + gate.err
    assert "Task failed with exception: 1 of 4 data quality gates failed: join_output: 9/10 passed" in text
    assert "Traceback" not in text

    _task_failed(airflow_structlog, ValueError("not a gate"))
    other = capfd.readouterr()
    assert "Traceback" in other.out + other.err and "ValueError: not a gate" in other.out + other.err

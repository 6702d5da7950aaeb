"""Team rules over every DAG file: it imports, and it is wired the way the team agreed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DAG_FILES = sorted((Path(__file__).resolve().parents[2] / "dags").glob("*.py"))
EXPECTED = {
    "joinshift_daily",
    "joinshift_stream",
    "joinshift_compare",
    "joinshift_simulate",
    "joinshift_report",
    "joinshift_supervise",
    "joinshift_replay",
    "joinshift_gate",
    "joinshift_replay_as_live",
}


def test_dagbag_has_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert EXPECTED <= set(dagbag.dag_ids)


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.name for p in DAG_FILES])
def test_dag_files_are_wiring_only(path):
    """No Spark, Kafka or DataFrames at parse time: heavy imports live inside task bodies."""
    tree = ast.parse(path.read_text())
    top_imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top_imports for a in n.names} | {
        (n.module or "").split(".")[0] for n in top_imports if isinstance(n, ast.ImportFrom)
    }
    assert not names & {"pyspark", "kafka", "jobs", "delta", "great_expectations"}, names
    assert len(path.read_text().splitlines()) <= 80


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_policy(dagbag, dag_id):
    dag = dagbag.get_dag(dag_id)
    assert dag.tags and "joinshift" in dag.tags
    assert dag.doc_md and dag.doc_md.strip()
    assert dag.catchup is False
    assert str(dag.start_date.tzinfo) in ("UTC", "Timezone('UTC')") or dag.start_date.utcoffset().total_seconds() == 0
    assert dag.default_args.get("retries", 0) >= 2
    assert "spec" in dag.params


def test_parsing_makes_no_connections(monkeypatch, airflow_db):
    """The scheduler parses every file every few seconds: no broker, master or Airflow connection
    may be opened then (an import error names what did)."""
    import socket

    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.bases.hook import BaseHook

    def forbidden(what):
        def refuse(*a, **k):
            raise AssertionError(f"{what} during DAG parsing")

        return refuse

    monkeypatch.setattr(BaseHook, "get_connection", forbidden("BaseHook.get_connection()"))
    monkeypatch.setattr(socket.socket, "connect", forbidden("a socket connected"))
    monkeypatch.setattr(socket.socket, "connect_ex", forbidden("a socket connected"))
    monkeypatch.setattr(socket, "create_connection", forbidden("a connection opened"))
    bag = DagBag(dag_folder=str(DAG_FILES[0].parent))
    assert bag.import_errors == {}
    assert EXPECTED <= set(bag.dag_ids)


def test_the_daily_run_at_midnight_lands_the_day_that_ended(dagbag):
    """Airflow 3's "@daily" is a trigger at the day's start whose logical date is that day: the
    run at 2026-11-21T00:00 had ds 2026-11-21 and landed the minutes that had arrived of it."""
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    dag = dagbag.get_dag("joinshift_daily")
    day = pendulum.datetime(2026, 11, 19, tz="UTC")
    run = dag.timetable.next_dagrun_info(
        last_automated_data_interval=DataInterval(day, day.add(days=1)),
        restriction=TimeRestriction(earliest=dag.start_date, latest=None, catchup=True),
    )
    assert run.run_after == pendulum.datetime(2026, 11, 21, tz="UTC")
    assert run.logical_date.date().isoformat() == "2026-11-20"  # the run's ds


def test_a_task_that_runs_after_a_failure_does_not_hide_it(dagbag):
    """A run's state is its last tasks': a task that runs whatever came before (``all_done``) and
    succeeds made a run green whose quality gates, or whose stream supervision, had failed. Such a
    DAG ends with a task that fails the run when any task failed."""
    checked = []
    for dag_id in sorted(EXPECTED):
        dag = dagbag.get_dag(dag_id)
        after_failures = [t for t in dag.tasks if t.trigger_rule == "all_done"]
        if after_failures:
            (last,) = [t for t in dag.tasks if not t.downstream_list]
            watched = {u for t in after_failures for u in t.upstream_task_ids} | {t.task_id for t in after_failures}
            # a failure upstream of the watched reaches it as upstream_failed, which one_failed counts
            assert last.trigger_rule == "one_failed" and last.get_flat_relative_ids(upstream=True) >= watched, dag_id
            checked.append(dag_id)
    assert {"joinshift_report", "joinshift_supervise"} <= set(checked)

"""The main job: two generated days of search sessions through batch and streaming, side by side.

1. start the embedded Kafka broker (KRaft, loopback) unless JOINSHIFT_KAFKA_BOOTSTRAP points elsewhere;
2. ``joinshift_simulate``: generate the workload, publish it into the topics as history, then
   replay it as live (``replay-as-live``: one stream increment per slice of arrival time);
3. ``joinshift_daily`` for every arrival day: land both topics, run the three batch baselines;
4. ``joinshift_compare`` for every generated day;
5. print match rates and boundary deltas, and where the tables and logs are.

Every DAG runs through Airflow (``dag.test()`` against the local SQLite metadata DB), in this
process, so the Spark session is shared and the demo fits a 2-core machine.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import warnings
from collections.abc import MutableMapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobs.local.airflow_env import apply_airflow_env
from jobs.settings import PROJECT_ROOT, settings

console = Console(width=max(140, Console().width))


def _ensure_airflow_db(env: dict) -> None:
    db = Path(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///"))
    if not db.exists():
        console.print("[dim]initialising the Airflow metadata DB[/dim]")
        subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )


def _reset(spec, s, bootstrap: str) -> None:
    """Start clean: the pipeline's topics, tables, checkpoints and progress logs."""
    from jobs.storage import fs
    from jobs.storage.kafka import delete_topics

    delete_topics(bootstrap, [spec.left.topic, spec.right.topic])
    for part in ("tables", "checkpoints", "progress"):
        fs.delete(s.path(part, spec.pipeline))


def _quiet_logs(verbose: bool) -> None:
    """The console shows the demo's progress and results; without -v, library warnings (Airflow's
    deprecations, kafka-python's event-loop notes) go to the log file only. Airflow may reconfigure
    logging when it runs a DAG, so this runs again before every DAG run."""
    for name in ("airflow", "sqlalchemy", "py4j", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.WARNING if verbose else logging.ERROR)
    if not verbose:
        # Airflow re-installs its own warnings hook (to the console) whenever it configures
        # logging, inside dag.test() too, so handlers alone cannot keep libraries' deprecation
        # notes off the demo's screen; a filter on where they come from can (-v shows them).
        warnings.filterwarnings("ignore", module=r"(airflow|sqlalchemy|fastapi|starlette|kafka|alembic)(\.|$)")
        logging.captureWarnings(True)
        to_file = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        for name in ("py.warnings", "kafka"):
            quiet = logging.getLogger(name)
            quiet.propagate = False
            quiet.handlers = list(to_file)


def gate_failure_in_one_line(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor for Airflow's task log on the demo's console: a failed quality gate is
    an outcome the demo reports itself (its closing lines name each failed gate), so the task
    runner's "Task failed" error keeps the gate's message, on one line, and drops the traceback.
    Any other exception keeps its traceback."""
    from jobs.quality.gates import GateFailed

    exc = event.get("exc_info")
    err = sys.exc_info()[1] if exc is True else exc[1] if isinstance(exc, tuple) else exc
    if isinstance(err, GateFailed):
        del event["exc_info"]
        event["event"] = f"{event.get('event')}: " + " ".join(line.strip() for line in str(err).splitlines())
    return event


def _gate_failures_in_one_line() -> None:
    """Put :func:`gate_failure_in_one_line` first in structlog's chain, as Airflow configured it
    (once: Airflow keeps its configuration across ``dag.test()`` runs)."""
    import structlog

    processors = structlog.get_config()["processors"]
    if gate_failure_in_one_line not in processors:
        structlog.configure(processors=[gate_failure_in_one_line, *processors])


def run_demo(
    spec_file: str, workload_file: str, slice_minutes: int = 60, keep: bool = False, verbose: bool = False
) -> int:
    import os

    if not verbose:  # Airflow's per-task logs only with -v: the progress bars say what runs
        os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    env = apply_airflow_env()
    _quiet_logs(verbose)
    _ensure_airflow_db(env)
    from jobs import airflow_tasks
    from jobs.spec import load_spec, spec_path
    from jobs.workload.params import load_workload

    s = settings()
    spec = load_spec(spec_path(spec_file))
    params = load_workload(spec_path(workload_file))
    days = [params.start_date + timedelta(days=i) for i in range(params.days)]
    # late arrivals spill past the last generated day: land that day too
    arrival_days = [*days, days[-1] + timedelta(days=1)]
    started = time.monotonic()
    console.rule(f"[bold]joinshift demo[/bold] · pipeline [cyan]{spec.pipeline}[/cyan] · window {spec.window.label()}")

    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.storage.kafka import bootstrap_servers

    if s.kafka_bootstrap:
        bootstrap = s.kafka_bootstrap
        console.print(f"Kafka: external broker {bootstrap}")
    else:
        with console.status("starting the embedded Kafka broker"):
            bootstrap = EmbeddedKafka(s).start()
        console.print(f"Kafka: embedded broker on {bootstrap} (data in {s.kafka_home})")
    if not keep:
        _reset(spec, s, bootstrap_servers(s))

    with console.status("starting Spark and loading the DAGs"):
        _quiet_logs(verbose)
        from airflow.dag_processing.dagbag import DagBag

        from jobs.storage.spark import get_spark

        # one driver for every DAG, the stream's too; each DAG's steps run to their end
        get_spark("joinshift-demo", classic=True, throughput=True)
        bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags"))
        if bag.import_errors:
            console.print(f"[red]DAG import errors:[/red] {bag.import_errors}")
            return 1
        _quiet_logs(verbose)
    conf = {"spec": spec_file}

    def run_dag(dag_id: str, logical: date | None, run_conf: dict, must_succeed: bool = True) -> bool:
        dag = bag.get_dag(dag_id)
        when = datetime.combine(logical, datetime.min.time(), UTC) if logical else None
        if not verbose:  # -v: every traceback, as Airflow logs it
            _gate_failures_in_one_line()
        run = dag.test(logical_date=when, run_conf=run_conf)
        state = str(getattr(run, "state", "")).lower()
        if "success" not in state and must_succeed:
            raise SystemExit(f"DAG {dag_id} ({logical}) ended {state}; see the task log above")
        return "success" in state

    console.print(
        f"[bold]1/4[/bold] simulated real time: {params.days} days of arrivals, "
        f"published as history, replayed as live in {slice_minutes}-minute slices ([cyan]joinshift_simulate[/cyan])"
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task_id = progress.add_task("stream ⟵ publishing", total=None)

        def on_slice(done: int, total: int, end_ms: int) -> None:
            label = datetime.fromtimestamp(end_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            progress.update(task_id, completed=done, total=total, description=f"stream ⟵ arrivals to {label}")

        class SliceProgress(logging.Handler):  # the simulation logs every slice with its position
            def emit(self, record: logging.LogRecord) -> None:
                if hasattr(record, airflow_tasks.SLICE_PROGRESS):
                    on_slice(*getattr(record, airflow_tasks.SLICE_PROGRESS))

        handler, task_log = SliceProgress(), logging.getLogger(airflow_tasks.log.name)
        level, propagate = task_log.level, task_log.propagate
        task_log.addHandler(handler)
        task_log.setLevel(logging.INFO)  # whatever level Airflow's logging set for the console
        task_log.propagate = verbose  # the bar shows the slices; -v prints them too
        try:
            run_dag("joinshift_simulate", None, {**conf, "workload": workload_file, "slice_minutes": slice_minutes})
        finally:
            task_log.removeHandler(handler)
            task_log.setLevel(level)
            task_log.propagate = propagate

    console.print(
        f"[bold]2/4[/bold] daily landing + batch baselines ([cyan]joinshift_daily[/cyan]) "
        f"for {', '.join(map(str, arrival_days))}"
    )
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        t = progress.add_task("batch", total=len(arrival_days))
        for ds in arrival_days:
            progress.update(t, description=f"batch ds={ds}")
            run_dag("joinshift_daily", ds, conf)
            progress.advance(t)

    console.print(f"[bold]3/4[/bold] compare ([cyan]joinshift_compare[/cyan]) for {', '.join(map(str, days))}")
    for ds in days:
        with console.status(f"compare ds={ds}"):
            run_dag("joinshift_compare", ds, conf)

    console.print(
        f"[bold]4/4[/bold] quality gates, accuracy report and window recommendation "
        f"([cyan]joinshift_report[/cyan]) for {', '.join(map(str, days))}"
    )
    for ds in days:
        with console.status(f"report ds={ds}"):
            run_dag("joinshift_report", ds, conf, must_succeed=False)  # a failed gate still gets its report

    from jobs.accuracy.compare import render_table
    from jobs.storage.tables import Tables

    tables = Tables.of(spec, s)
    spark = get_spark()
    metrics_df = spark.read.format("delta").load(tables.match_metrics)
    metrics = [r.asDict() for r in metrics_df.where(metrics_df.ds.isin(days)).collect()]
    from jobs.storage.stream_runs import read_runs

    console.print(render_table(metrics, spec.accuracy.baseline, read_runs(spec, s)))
    q = (
        spark.read.format("delta")
        .load(tables.quarantine)
        .where("stage = 'landing'")
        .groupBy("reason")
        .count()
        .orderBy("reason")
        .collect()
    )
    console.print("quarantined at landing: " + ", ".join(f"{r['reason']} {r['count']}" for r in q))
    from jobs.storage import fs

    rec_file = s.path("recommendations", spec.pipeline, f"{days[-1]}.json")
    if fs.exists(rec_file):
        import json

        console.print(recommendation_line(json.loads(fs.read_text(rec_file))))
    from pyspark.sql import functions as F

    from jobs.quality.gates import gates_path
    from jobs.storage import delta_io

    gates = gates_path(spec, s)
    failed = (
        spark.read.format("delta").load(gates).where(F.col("ds").isin(days) & ~F.col("success")).collect()
        if delta_io.table_exists(spark, gates)
        else []
    )
    lines, closing = gate_verdict([(g.ds, g.suite, g.summary) for g in failed])
    for line in lines:
        console.print(line)
    reports = s.local_path("reports", spec.pipeline)
    console.print(f"\nDone in {time.monotonic() - started:.0f}s.")
    console.print(f"  report:      {reports / str(days[-1]) / 'report.html'} (all days: {reports / 'index.html'})")
    console.print(f"  tables:      {s.path('tables', spec.pipeline)}")
    console.print(f"  checkpoints: {s.path('checkpoints', spec.pipeline)}")
    console.print(f"  logs:        {Path(s.log_dir)} (Kafka), {env['AIRFLOW__LOGGING__BASE_LOG_FOLDER']} (Airflow)")
    console.print("  Airflow UI:  `make airflow-ui`, then http://localhost:8080 (admin / see README)")
    if closing is None:
        return 0
    console.print(closing)
    return 1


def gate_verdict(failed: list[tuple[date, str, str]]) -> tuple[list[str], str | None]:
    """The demo's word on its quality gates, from the failed ones (ds, suite, summary): a line per
    failed gate, and the closing line (None when every gate passed). A failed gate makes the demo
    exit 1 after its report (the report DAG still ran, so the report shows why): data that fail
    their gates are not a successful run, and a script running ``make demo`` must see it."""
    lines = [
        f"[red]quality gate failed[/red] ds={ds}: {summary}" for ds, _, summary in sorted(failed, key=lambda f: f[:2])
    ]
    if not failed:
        return lines, None
    n = len(failed)
    return lines, f"[red]{n} quality gate{'s' if n > 1 else ''} failed[/red]: the demo exits 1 (the report shows why)"


def recommendation_line(rec: dict) -> str:
    """The demo's last word on the recommendation (its saved JSON): the window and what it predicts;
    the native engine's watermark delays, the paced engine's first answers (it has no delays)."""
    from jobs.spec import fmt_duration

    c = rec["chosen"]
    line = (
        f"recommended window {rec['window']} (deployed {rec['deployed_window']}): predicted match rate "
        f"{100 * c['predicted_match_rate']:.2f}% vs {rec['baseline']} {100 * rec['baseline_match_rate']:.2f}%, "
    )
    if c.get("paced"):
        return line + f"first answers {100 * c['first_answer_rate']:.2f}% (the paced engine waits for PTs)"
    left, right = fmt_duration(rec["left_watermark_s"]), fmt_duration(rec["right_watermark_s"])
    return line + f"watermark delays left {left} / right {right}"

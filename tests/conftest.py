"""Shared fixtures: one Spark session, one real Kafka broker, one storage root and one Airflow
metadata DB per test session, all under a temporary folder.

The environment is set here, at import, because Airflow reads it when first imported and the
jobs read ``JOINSHIFT_*`` through ``jobs.settings.settings()``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEST_ROOT = Path(tempfile.mkdtemp(prefix="joinshift-tests-"))
os.environ.update(
    {
        "JOINSHIFT_STORAGE_ROOT": str(TEST_ROOT / "storage"),
        "JOINSHIFT_KAFKA_HOME": str(TEST_ROOT / "kafka"),
        "JOINSHIFT_LOG_DIR": str(TEST_ROOT / "logs"),
        "JOINSHIFT_SPARK_DRIVER_MEMORY": "3g",
        "JOINSHIFT_SPARK_LOG_LEVEL": "ERROR",
        "AIRFLOW_HOME": str(TEST_ROOT / "airflow"),
        # S3A's credentials for the test S3 server (tests/integration/test_storage_s3a.py), read from
        # the environment as in a deployment: set before Spark's JVM starts, which inherits them.
        # Dummy values: no real account is ever used, and no instance metadata is asked for.
        "AWS_ACCESS_KEY_ID": "joinshift-test",
        "AWS_SECRET_ACCESS_KEY": "joinshift-test",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
#: The processes the tests start (CLI commands, supervised and restarted streams, the Spark Connect
#: server) live seconds to a minute, so their JIT stops at C1: C2's compiles of start-up code cost
#: more CPU than they return in so short a life (0.80x the machine's CPU for the restart DAGs' and
#: CLI error paths' modules: BENCHMARKS, "The suite's short-lived JVMs"). The test session's own
#: driver lives the whole run and keeps C2, as does every product process; it runs to the run's
#: end, so on the throughput collector (``spark`` below). A ``JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS``
#: of the caller's reaches both.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"
# a pytest-xdist worker inherits its controller's environment, this line's work included
SESSION_JAVA_OPTIONS = (
    os.environ.get("JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS", "").strip().removeprefix(SHORT_LIVED_JVM).strip()
)
os.environ["JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS"] = f"{SHORT_LIVED_JVM} {SESSION_JAVA_OPTIONS}".strip()
os.environ.pop("AWS_SESSION_TOKEN", None)
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("JOINSHIFT_KAFKA_BOOTSTRAP", None)
os.environ.pop("JOINSHIFT_CONFIG", None)

import logging  # noqa: E402

from suite_order import DEMO_PIPELINE_MODULES, SCOPE_SECONDS, longest_first, recorded_seconds, scope_of, store_seconds  # noqa: E402

from jobs.local.airflow_env import airflow_env, apply_airflow_env  # noqa: E402

# Airflow's settings derived from AIRFLOW_HOME: a pytest-xdist worker inherits its controller's,
# which name the controller's folder, not this process's
for _key in airflow_env():
    if _key.startswith("AIRFLOW__"):
        os.environ.pop(_key, None)
apply_airflow_env()
# py4j logs its shutdown after pytest closed the streams it captured
logging.getLogger("py4j").setLevel(logging.WARNING)


def pytest_sessionfinish(session, exitstatus):
    _store_durations(session.config, exitstatus)
    if exitstatus == 0 and not os.environ.get("JOINSHIFT_KEEP_TEST_DATA"):
        shutil.rmtree(TEST_ROOT, ignore_errors=True)


@pytest.fixture(scope="session")
def test_root() -> Path:
    return TEST_ROOT


@pytest.fixture(scope="session")
def test_settings():
    from jobs.settings import settings

    settings.cache_clear()
    return settings()


#: The test session's Spark: small data, so few partitions, and queries interpreted rather than
#: compiled (Janino compiling whole-stage and expression code costs more than it saves on
#: thousands of rows: 0.86x the CPU of three Spark-heavy modules, BENCHMARKS "The test suite on
#: two workers"); and without adaptive query execution, whose re-planning after each stage buys
#: nothing on two partitions of small data (0.92x the CPU of four driver-heavy modules, the demo
#: pipeline's build 0.96x: BENCHMARKS "The suite test by test"). The processes the tests start
#: (CLI, supervised streams) keep the product's settings, code generation and AQE included.
TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark(test_settings):
    """A small, fast local Spark with Delta, the Kafka connector and RocksDB state."""
    from jobs.storage.spark import get_spark

    own = dataclasses.replace(test_settings, spark_driver_java_options=SESSION_JAVA_OPTIONS)
    # the parallel collector: the demo pipeline's build 0.95x the wall time and 0.94x the machine's
    # CPU of G1's (BENCHMARKS, "The test session's driver on the parallel collector")
    session = get_spark("joinshift-tests", own, extra_conf=TEST_SPARK_CONF, throughput=True)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(test_settings):
    """A real Kafka broker (KRaft, one node, loopback) for the whole test session."""
    from jobs.local.kafka_broker import EmbeddedKafka

    broker = EmbeddedKafka(test_settings)
    bootstrap = broker.start()
    yield bootstrap
    broker.stop()


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata DB (SQLite) in the test folder: a copy of the project's
    when set-up made one, else a fresh `airflow db migrate`."""
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    project_db = ROOT / ".airflow" / "airflow.db"
    if project_db.exists():
        shutil.copy(project_db, home / "airflow.db")
    else:
        subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            check=True,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ),
        )
    return home


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture(scope="session")
def demo_spec():
    """The demo join spec (``jobs.spec.DEFAULT_SPEC``), loaded once. Shared: derive changed
    copies with ``model_copy`` (or :func:`own_pipeline_spec`), never mutate it."""
    from jobs.spec import load_spec, spec_path

    return load_spec(spec_path())


@pytest.fixture(scope="session")
def demo_spec_data():
    """A factory: a fresh deep copy of the demo spec's YAML mapping, to edit and parse or write."""
    import copy

    from jobs.spec import read_yaml, spec_path

    data, _ = read_yaml(spec_path(), "join spec")

    def make() -> dict:
        return copy.deepcopy(data)

    return make


@pytest.fixture(scope="session")
def own_pipeline_spec(demo_spec):
    """A factory: the demo spec as a pipeline of its own, so tests sharing the broker and the
    storage root do not meet. ``name`` becomes the pipeline; the topics are ``<name>_<suffix>``;
    ``side`` updates both sides; other keywords update the spec's top-level fields."""

    def make(name: str, *, topic_suffixes: tuple[str, str] = ("left", "right"), side: dict | None = None, **update):
        def own(s, suffix):
            return s.model_copy(update={"topic": f"{name}_{suffix}", **(side or {})})

        return demo_spec.model_copy(
            update={
                "pipeline": name,
                "left": own(demo_spec.left, topic_suffixes[0]),
                "right": own(demo_spec.right, topic_suffixes[1]),
                **update,
            }
        )

    return make


def pytest_addoption(parser):
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each scope's seconds in this run to {SCOPE_SECONDS.name} (the suite's scheduling order)",
    )


def pytest_collection_modifyitems(config, items):
    unlisted = {
        item.path.name
        for item in items
        if "demo_pipeline" in getattr(item, "fixturenames", ()) and item.path.name not in DEMO_PIPELINE_MODULES
    }
    if unlisted:
        raise pytest.UsageError(f"add {sorted(unlisted)} to DEMO_PIPELINE_MODULES in tests/suite_order.py")
    if hasattr(config, "workerinput"):
        # a pytest-xdist worker: the controller hands out scopes in the order they are collected
        tests_per_scope = Counter(scope_of(item.nodeid) for item in items)  # in collection order
        rank = {scope: i for i, scope in enumerate(longest_first(tests_per_scope, recorded_seconds()))}
        items.sort(key=lambda item: rank[scope_of(item.nodeid)])


_scope_seconds: Counter[str] = Counter()


def pytest_runtest_logreport(report):
    # each process counts its own; the controller (which sees every worker's reports) writes them
    _scope_seconds[scope_of(report.nodeid)] += report.duration


def _store_durations(config, exitstatus) -> None:
    if not config.getoption("--store-durations") or hasattr(config, "workerinput") or exitstatus != 0:
        return
    store_seconds(_scope_seconds, ROOT)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test`` runs two pytest-xdist workers: a test module runs on one worker, so its module
    fixtures are built once, and the demo pipeline's readers share one; the scopes are handed out
    longest first, in the order the workers collected them (``SCOPE_SECONDS``). (Not ``--dist
    loadgroup``: with pytest 9.2 its groups are silently ignored, pytest-xdist issue 1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False  # xdist's own order: the most tests first
    return ModuleScheduling(config, log)

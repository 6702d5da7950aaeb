"""Shared fixtures: one Spark session, one real Kafka broker, one storage root per test session."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def test_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("joinshift")


@pytest.fixture(scope="session")
def test_settings(test_root):
    from jobs.settings import settings

    return dataclasses.replace(
        settings(),
        storage_root=str(test_root / "storage"),
        kafka_home=str(test_root / "kafka"),
        log_dir=str(test_root / "logs"),
        spark_driver_memory="3g",
    )


@pytest.fixture(scope="session")
def spark(test_settings):
    """A small, fast local Spark with Delta, the Kafka connector and RocksDB state."""
    from jobs.spark_session import get_spark

    os.environ.setdefault("JOINSHIFT_SPARK_LOG_LEVEL", "ERROR")
    session = get_spark("joinshift-tests", test_settings,
                        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(test_settings):
    """A real Kafka broker (KRaft, one node, loopback) for the whole test session."""
    from jobs.kafka_broker import EmbeddedKafka

    broker = EmbeddedKafka(test_settings)
    bootstrap = broker.start()
    yield bootstrap
    broker.stop()


@pytest.fixture(scope="session")
def spec():
    from jobs.spec import load_spec

    return load_spec(ROOT / "include" / "specs" / "search_sessions.yaml")

"""The embedded broker, on a real Kafka JVM in a private folder.

Each module run starts its own broker under a temporary kafka_home, so it never
touches a broker someone runs on the project's default folder.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from jobs.cli import main
from jobs.local.kafka_broker import BrokerError, EmbeddedKafka
from jobs.settings import Settings, settings
from jobs.storage.kafka import bootstrap_servers, create_topic

THREE_DAYS_MS = 3 * 24 * 3600 * 1000


def _tmp_settings(folder: Path) -> Settings:
    return dataclasses.replace(
        settings(), kafka_home=str(folder / "kafka"), log_dir=str(folder / "logs"), kafka_bootstrap=""
    )


def _produce(bootstrap: str, topic: str, n: int, ts0: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(topic, key=str(i).encode(), value=f"v{i}".encode(), timestamp_ms=ts0 + i) for i in range(n)
        ]
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)  # raises if the broker refused a record
    finally:
        producer.close()


def _consume_all(bootstrap: str, topic: str, expected: int, **config: object) -> list:
    """Reads ``topic`` from the start until ``expected`` records arrived (or 20 s passed)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **config)
    try:
        deadline = time.monotonic() + 20
        parts = consumer.partitions_for_topic(topic)
        while not parts and time.monotonic() < deadline:
            time.sleep(0.2)
            parts = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(parts or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list = []
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        # One more short poll: more records than expected would be a bug too.
        for batch in consumer.poll(timeout_ms=300).values():
            records.extend(batch)
        return records
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    s = _tmp_settings(tmp_path_factory.mktemp("broker"))
    if not any((Path(s.jar_cache) / "kafka").glob("kafka_2.13-*.jar")):
        pytest.skip(f"Kafka broker jars not resolved into {s.jar_cache}/kafka (run the set-up step)")
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH")
    kafka = EmbeddedKafka(s)
    try:
        kafka.start(timeout=90)
        yield kafka
    finally:
        kafka.stop()


def test_bootstrap_servers_tells_how_to_start_a_broker(tmp_path: Path) -> None:
    s = _tmp_settings(tmp_path)
    with pytest.raises(RuntimeError) as err:
        bootstrap_servers(s)
    msg = str(err.value)
    assert "joinshift kafka start" in msg and "JOINSHIFT_KAFKA_BOOTSTRAP" in msg
    assert bootstrap_servers(dataclasses.replace(s, kafka_bootstrap="kafka1:9092")) == "kafka1:9092"
    assert EmbeddedKafka(s).status()["running"] is False


def test_cli_help_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["kafka", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "start" in out and "stop" in out and "status" in out


def test_records_days_in_the_past_are_kept(broker: EmbeddedKafka) -> None:
    bootstrap = broker.bootstrap_servers
    assert broker.start() == bootstrap  # idempotent while running
    assert bootstrap_servers(broker.settings) == bootstrap
    assert bootstrap.startswith("127.0.0.1:")

    create_topic(bootstrap, "arrivals", partitions=2)
    create_topic(bootstrap, "arrivals", partitions=2)  # idempotent
    ts0 = int(time.time() * 1000) - THREE_DAYS_MS
    _produce(bootstrap, "arrivals", 100, ts0)

    records = _consume_all(bootstrap, "arrivals", 100, auto_offset_reset="earliest")
    assert len(records) == 100
    assert sorted(r.timestamp for r in records) == [ts0 + i for i in range(100)]
    assert {r.timestamp_type for r in records} == {0}  # CreateTime, not LogAppendTime
    assert {r.key: r.timestamp for r in records}[b"42"] == ts0 + 42

    st = broker.status()
    assert st["running"] is True and st["pid"] and st["bootstrap"] == bootstrap
    topic = st["topics"]["arrivals"]
    assert topic["partitions"] == 2
    assert sum(topic["end_offsets"].values()) == 100
    assert Path(st["log_file"]).stat().st_size > 0  # the broker logs to its file


def test_the_oldest_unread_record_is_found_when_producers_clocks_disagree(broker: EmbeddedKafka) -> None:
    """Records of producers whose clocks differ share a partition out of timestamp order: the
    oldest unread one need not be the first (a replay's state reached back from the first)."""
    from jobs.storage.kafka import oldest_unread

    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "disordered", partitions=1)
    ts0 = int(time.time() * 1000) - THREE_DAYS_MS
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i, late_ms in enumerate((60_000, 0, 30_000, 90_000)):  # the second record is the oldest
        producer.send("disordered", key=str(i).encode(), value=b"x", partition=0, timestamp_ms=ts0 + late_ms)
    producer.flush()
    producer.close()
    ends = {"disordered": {0: 4}}
    assert oldest_unread(bootstrap, {"disordered": {0: 0}}, ends) == {"disordered": ts0}
    assert oldest_unread(bootstrap, {"disordered": {0: 2}}, ends) == {"disordered": ts0 + 30_000}
    assert oldest_unread(bootstrap, {"disordered": {0: 4}}, ends) == {}  # nothing unread
    # a poll's 500 records are shared by the lagging partitions: a partition's first share can be a
    # few records, and the oldest comes later (each topic's is its 301st record)
    late = {}
    for topic in ("shared-a", "shared-b"):
        create_topic(bootstrap, topic, partitions=1)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(400):
            producer.send(topic, value=b"x", partition=0, timestamp_ms=ts0 + (0 if i == 300 else 60_000 + i))
        producer.flush()
        producer.close()
        late[topic] = {0: 400}
    assert oldest_unread(bootstrap, {}, late) == {"shared-a": ts0, "shared-b": ts0}


def test_restart_keeps_port_and_data(broker: EmbeddedKafka) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "durable")
    ts0 = int(time.time() * 1000) - THREE_DAYS_MS
    _produce(bootstrap, "durable", 100, ts0)

    broker.stop()
    st = broker.status()
    assert st["running"] is False and "topics" not in st
    with pytest.raises(RuntimeError, match="joinshift kafka start"):
        bootstrap_servers(broker.settings)

    # Someone else on our port: a clear error, not a broker on a different port.
    port = int(bootstrap.rsplit(":", 1)[1])
    squatter = socket.socket()
    try:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(BrokerError, match=f"{port}.*taken"):
            broker.start()
    finally:
        squatter.close()

    assert broker.start(timeout=90) == bootstrap
    records = _consume_all(bootstrap, "durable", 100, auto_offset_reset="earliest")
    assert sorted(r.timestamp for r in records) == [ts0 + i for i in range(100)]
    assert sum(broker.status()["topics"]["durable"]["end_offsets"].values()) == 100


def test_transactional_producer_and_read_committed(broker: EmbeddedKafka) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "txn")
    ts0 = int(time.time() * 1000) - THREE_DAYS_MS
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="joinshift-test-txn")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("txn", value=f"committed{i}".encode(), timestamp_ms=ts0 + i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send("txn", value=f"aborted{i}".encode(), timestamp_ms=ts0 + i)
        producer.abort_transaction()
    finally:
        producer.close()

    records = _consume_all(bootstrap, "txn", 10, auto_offset_reset="earliest", isolation_level="read_committed")
    assert sorted(r.value for r in records) == sorted(f"committed{i}".encode() for i in range(10))
    # A consumer group (offsets topic with one replica) works too.
    group = KafkaConsumer(
        "txn",
        bootstrap_servers=bootstrap,
        group_id="joinshift-test-group",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=10000,
    )
    try:
        seen = []
        for rec in group:
            seen.append(rec)
            if len(seen) == 10:
                break
        group.commit()
    finally:
        group.close()
    assert len(seen) == 10

"""A secured Kafka: a broker that only lets authenticated clients in (SASL_PLAINTEXT, PLAIN), and
joinshift configured for it in one place (a ``client.properties`` file whose password is a
``${file:...}`` secret). Every client reaches it: kafka-python (import, topic creation, health
reads), Spark's batch source (landing) and Spark's streaming source (the join). The password
never appears in a log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.cli import main
from tests.integration.test_bring_your_own_data import DATA, oracle

pytestmark = pytest.mark.integration

SECRET = "alice-s3cret-do-not-log"


@pytest.fixture
def secured_kafka(tmp_path, monkeypatch, test_settings):
    """A SASL broker of its own; settings point every client at it through a properties file."""
    from jobs.local.kafka_broker import EmbeddedKafka
    from jobs.settings import settings

    (tmp_path / "alice.password").write_text(SECRET + "\n")
    props = tmp_path / "client.properties"
    props.write_text(
        "# what a team's client.properties holds\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'    username="alice" password="${{file:{tmp_path / "alice.password"}}}";\n'
    )
    monkeypatch.setenv("JOINSHIFT_KAFKA_PROPERTIES_FILE", str(props))
    monkeypatch.setenv("JOINSHIFT_KAFKA_HOME", str(tmp_path / "kafka"))
    monkeypatch.setenv("JOINSHIFT_LOG_DIR", str(tmp_path / "logs"))
    settings.cache_clear()
    broker = EmbeddedKafka(settings(), sasl_users={"admin": "admin-pw", "alice": SECRET})
    try:
        bootstrap = broker.start()
        monkeypatch.setenv("JOINSHIFT_KAFKA_BOOTSTRAP", bootstrap)
        settings.cache_clear()
        yield bootstrap, tmp_path
    finally:
        broker.stop()
        monkeypatch.undo()
        settings.cache_clear()


def test_every_client_reaches_a_secured_broker_from_one_properties_file(spark, secured_kafka, test_settings, capsys):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    from jobs.settings import settings
    from jobs.storage.tables import Tables

    bootstrap, root = secured_kafka
    with pytest.raises(KafkaError):  # the broker is really secured: a client without credentials is refused
        KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=4000, api_version_auto_timeout_ms=3000)

    data = yaml.safe_load((DATA / "rides.yaml").read_text())
    data["pipeline"] = "rides_secured"
    spec_file = root / "rides_secured.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    args = ["--spec", str(spec_file)]
    files = ["--left", str(DATA / "ride_requests.jsonl"), "--right", str(DATA / "pickups.csv")]
    assert main(["import", *args, *files, "--arrival", "uploaded_at"]) == 0
    _, pick, pairs = oracle()
    assert json.loads(capsys.readouterr().out)["pickups"] == len(pick) + 1
    assert main(["land", *args, "--ds", "2026-11-20", "--to", "2026-11-22"]) == 0
    assert main(["batch", *args, "--ds", "2026-11-20", "--to", "2026-11-21", "--variant", "reference"]) == 0
    assert main(["stream", *args, "--available-now"]) == 0
    capsys.readouterr()
    main(["health", *args, "--json"])  # exit 1 is a threshold warning, not a refused connection
    health = json.loads(capsys.readouterr().out)
    assert health["lag_source"] == "kafka"  # kafka-python read the topics' end offsets through SASL

    from jobs.spec import load_spec

    tables = Tables.of(load_spec(spec_file), settings())

    def pairs_of(variant: str) -> set[tuple]:
        out = spark.read.format("delta").load(tables.output(variant)).where("right_pickup_time IS NOT NULL")
        return {(r.left_request_id, r.right_rider) for r in out.select("left_request_id", "right_rider").collect()}

    assert pairs_of("stream") == pairs_of("reference") == {(r.request_id, r.rider) for r in pairs.itertuples()}
    logs = [p for p in Path(root / "logs").rglob("*") if p.is_file()]
    logs += [p for p in Path(test_settings.log_dir).rglob("*") if p.is_file()]
    assert logs and not [p for p in logs if SECRET in p.read_text(errors="replace")]

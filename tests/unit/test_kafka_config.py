"""Kafka client properties: one place (a client.properties file and/or the config file's
mapping), secrets named not written, and the same properties for Spark and kafka-python."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from jobs.settings import Settings, SettingsError
from jobs.storage.kafka_config import SPARK_SOURCE_DEFAULTS, client_properties, python_client_config, spark_options

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{pw}";'


def test_a_properties_file_overlaid_by_the_config_mapping_with_secrets_resolved(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("from-a-file\n")
    f = tmp_path / "client.properties"
    f.write_text(
        "# comment\n! also a comment\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'  username="alice" password="${{file:{tmp_path / "pw"}}}";\n'
        "bootstrap.servers=ignored:9092\n"
        "request.timeout.ms=45000\n"
    )
    monkeypatch.setenv("TRUST", "/etc/ca.pem")
    s = Settings(
        kafka_properties_file=str(f),
        kafka_properties={"ssl.truststore.location": "${env:TRUST}", "ssl.truststore.type": "PEM"},
    )
    props = client_properties(s)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert 'password="from-a-file"' in props["sasl.jaas.config"] and "bootstrap.servers" not in props
    assert props["ssl.truststore.location"] == "/etc/ca.pem"


@pytest.mark.parametrize(
    "props,named",
    [
        ({"sasl.jaas.config": "${env:JOINSHIFT_TEST_UNSET}"}, "${env:JOINSHIFT_TEST_UNSET}, which is not set"),
        ({"ssl.key.password": "${file:/nonexistent/pw}"}, "cannot be read"),
    ],
)
def test_a_secret_that_cannot_be_found_is_a_settings_error_naming_it(props, named):
    with pytest.raises(SettingsError, match="Kafka property") as exc:
        client_properties(Settings(kafka_properties=props))
    assert named in str(exc.value)


def test_a_missing_properties_file_is_a_settings_error(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        client_properties(Settings(kafka_properties_file=str(tmp_path / "nope.properties")))


def test_spark_gets_every_property_but_those_it_manages():
    opts = spark_options({"security.protocol": "SSL", "auto.offset.reset": "earliest", "client.dns.lookup": "x"})
    assert opts == {
        "kafka.security.protocol": "SSL",
        "kafka.client.dns.lookup": "x",
        **{f"kafka.{k}": v for k, v in SPARK_SOURCE_DEFAULTS.items()},
    }


def test_spark_reads_in_large_polls_and_fetches_unless_the_user_says_otherwise():
    opts = spark_options({})
    assert opts["kafka.max.poll.records"] == "20000"
    assert opts["kafka.max.partition.fetch.bytes"] == str(16 << 20)
    assert spark_options({"max.poll.records": "500"})["kafka.max.poll.records"] == "500"


def test_spark_parks_a_fetch_at_a_partitions_end_briefly_unless_the_user_says_otherwise():
    assert spark_options({})["kafka.fetch.max.wait.ms"] == "20"
    assert spark_options({"fetch.max.wait.ms": "500"})["kafka.fetch.max.wait.ms"] == "500"


def test_kafka_python_gets_the_same_security_translated():
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": JAAS.format(pw='p"w'.replace('"', '\\"')),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/client.pem",
        "ssl.key.password": "kpw",
        "ssl.endpoint.identification.algorithm": "",
        "request.timeout.ms": "45000",
        "linger.ms": "50",
        "ssl.truststore.password": "java-only",
    }
    for cls in (KafkaConsumer, KafkaProducer, KafkaAdminClient):
        cfg = python_client_config(props, set(cls.DEFAULT_CONFIG))
        assert cfg["security_protocol"] == "SASL_SSL" and cfg["sasl_mechanism"] == "PLAIN"
        assert cfg["sasl_plain_username"] == "alice" and cfg["sasl_plain_password"] == 'p"w'
        assert cfg["ssl_cafile"] == "/ca.pem" and cfg["ssl_certfile"] == "/client.pem" and cfg["ssl_password"] == "kpw"
        assert cfg["ssl_check_hostname"] is False and cfg["request_timeout_ms"] == 45000
        assert "ssl_truststore_password" not in cfg
    assert "linger_ms" in python_client_config(props, set(KafkaProducer.DEFAULT_CONFIG))
    assert "linger_ms" not in python_client_config(props, set(KafkaConsumer.DEFAULT_CONFIG))

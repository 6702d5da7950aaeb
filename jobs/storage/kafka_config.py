"""Kafka client properties from one place to every client: Spark's Kafka source, landing and the
kafka-python consumers, producers and admin client (:mod:`jobs.storage.kafka` makes them all).

Properties use Kafka's Java names (what a ``client.properties`` file holds: ``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``, ...). They come from the
settings' ``kafka_properties_file`` (a Java properties file, ``JOINSHIFT_KAFKA_PROPERTIES_FILE``)
overlaid with ``kafka_properties`` (a mapping in the config file). A value may name a secret
instead of holding it: ``${env:NAME}`` (an environment variable) or ``${file:/path}`` (a file's
content); secrets are resolved when a client is made and never logged.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from jobs.settings import SECRET_REFERENCE, Settings, SettingsError

_LONG_MAX = 9223372036854775807
#: The largest record joinshift's producers send, and the topics it creates take (brokers default to 1 MiB).
MAX_RECORD_BYTES = 8 * 1024 * 1024
#: Configs of every topic joinshift creates: days-old records kept and accepted, whatever the cluster's defaults.
TOPIC_CONFIGS: dict[str, str] = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(_LONG_MAX),
    "message.timestamp.after.max.ms": str(_LONG_MAX),
    "max.message.bytes": str(MAX_RECORD_BYTES),
    "cleanup.policy": "delete",  # never compacted: a record's key is its join key, not its identity
}
_JAAS_ARG = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)\"""")
#: Properties Spark's Kafka source sets itself and refuses as options (it would throw).
SPARK_MANAGED = {
    "bootstrap.servers",
    "auto.offset.reset",
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
    "enable.auto.commit",
    "interceptor.classes",
}


def read_properties_file(path: str) -> dict[str, str]:
    """A Java properties file (``key=value`` or ``key: value`` lines, ``#``/``!`` comments,
    ``\\`` continuations)."""
    p = Path(path)
    if not p.is_file():
        raise SettingsError(f"kafka_properties_file {path} does not exist: fix the path or unset it")
    out: dict[str, str] = {}
    pending = ""
    for raw in p.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _resolve(name: str, value: str) -> str:
    def secret(m: re.Match[str]) -> str:
        kind, ref = m.group(1), m.group(2)
        if kind == "env":
            if ref not in os.environ:
                raise SettingsError(f"Kafka property {name} names ${{env:{ref}}}, which is not set")
            return os.environ[ref]
        try:
            return Path(ref).read_text().strip()
        except OSError:
            raise SettingsError(f"Kafka property {name} names ${{file:{ref}}}, which cannot be read") from None

    return SECRET_REFERENCE.sub(secret, value)


def client_properties(s: Settings) -> dict[str, str]:
    """Every client's properties (Java names), secrets resolved. Empty on the embedded default."""
    props = read_properties_file(s.kafka_properties_file) if s.kafka_properties_file else {}
    props.update({str(k): str(v) for k, v in (s.kafka_properties or {}).items()})
    return {k: _resolve(k, v) for k, v in props.items() if k != "bootstrap.servers"}


#: What Spark's Kafka source's consumers read with unless the user's properties say otherwise: up to
#: 20,000 records a poll and 16 MiB a partition a fetch (Kafka's defaults: 500 and 1 MiB). A
#: replay's catch-up took 0.92x the time, its consumers polling and the broker serving fetches
#: fewer times (BENCHMARKS, "Where a cold replay's seconds go"). Spark gives each task's consumer
#: one partition, so it holds at most 16 MiB of fetched records. A fetch the broker parks at a
#: partition's end for at most 20 ms, not Kafka's 500: the consumer fetches ahead, so a task that
#: read a partition to its end leaves such a fetch in flight, and the next micro-batch's task on
#: that cached consumer waited out the rest of the 500 ms before its first record (Spark's Kafka
#: source alone read 2.4x as fast over a backlog; BENCHMARKS, "The Kafka source's parked fetch").
#: A live fetch still returns as soon as a record arrives.
SPARK_SOURCE_DEFAULTS = {
    "max.poll.records": "20000",
    "max.partition.fetch.bytes": str(16 << 20),
    "fetch.max.bytes": str(64 << 20),
    "fetch.max.wait.ms": "20",
}


def spark_options(props: dict[str, str]) -> dict[str, str]:
    """Options for Spark's Kafka source: ``kafka.<property>`` of :data:`SPARK_SOURCE_DEFAULTS`
    overlaid with ``props``, less what Spark manages itself."""
    return {f"kafka.{k}": v for k, v in {**SPARK_SOURCE_DEFAULTS, **props}.items() if k not in SPARK_MANAGED}


def python_client_config(props: dict[str, str], known: set[str]) -> dict[str, Any]:
    """kafka-python keyword arguments for the properties: the security ones translated (JAAS
    credentials, PEM trust and key stores, hostname checking), every other property whose
    ``a.b.c`` -> ``a_b_c`` name the client knows (``known``: its ``DEFAULT_CONFIG`` keys).
    Java-only properties (``ssl.truststore.type``, ...) have no kafka-python meaning and are left out."""
    out: dict[str, Any] = {}
    for k, v in props.items():
        if k == "sasl.jaas.config":
            args = {a: re.sub(r"\\(.)", r"\1", val) for a, val in _JAAS_ARG.findall(v)}  # JAAS escapes
            if "username" in args:
                out["sasl_plain_username"], out["sasl_plain_password"] = args["username"], args.get("password", "")
        elif k == "ssl.truststore.location" and props.get("ssl.truststore.type", "").upper() == "PEM":
            out["ssl_cafile"] = v
        elif k == "ssl.keystore.location" and props.get("ssl.keystore.type", "").upper() == "PEM":
            out["ssl_certfile"] = v
        elif k == "ssl.key.password":
            out["ssl_password"] = v
        elif k == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = v.strip().lower() == "https"
        elif (name := k.replace(".", "_")) in known:
            out[name] = v if not v.lstrip("-").isdigit() else int(v)
    return out

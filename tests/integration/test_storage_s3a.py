"""The storage root on an object store: S3A against an S3-compatible server (moto's, from PyPI),
set by configuration only. Landing, a batch join, two streaming increments (the second a restart
from the checkpoint on S3A), and the checkpoint tools run on ``s3a://``; the stream's output must
equal the pairs computed here from the records and the batch join's, with nothing lost or
duplicated. No AWS account and no network: the server listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml

from jobs.local.kafka_setup import free_ports

pytestmark = pytest.mark.integration

BUCKET = "joinshift-test"
DS = date(2026, 11, 20)


@pytest.fixture(scope="module")
def s3_endpoint(test_root):
    """``moto_server`` on a free loopback port, with an empty bucket; stopped after the module."""
    port = free_ports(1)[0]
    log = open(test_root / "moto_server.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"moto_server did not start; see {log.name}") from None
                time.sleep(0.1)
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def s3_settings(s3_endpoint, test_root, test_settings):
    """The settings a deployment on S3 would use, from a config file: the storage root and
    S3A's endpoint; credentials come from the environment (tests/conftest.py sets dummy ones)."""
    from jobs.settings import load_settings

    config = test_root / "joinshift-s3a.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage_root": f"s3a://{BUCKET}/joinshift",
                "spark_conf": {
                    "spark.hadoop.fs.s3a.endpoint": s3_endpoint,
                    "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                    "spark.hadoop.fs.s3a.path.style.access": "true",
                    "spark.hadoop.fs.s3a.aws.credentials.provider": (
                        "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
                    ),
                    # S3A's smallest parts, so that a 6 MB object goes up in a multipart upload
                    "spark.hadoop.fs.s3a.multipart.size": "5M",
                    "spark.hadoop.fs.s3a.multipart.threshold": "5M",
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "JOINSHIFT_STORAGE_ROOT"}
    with pytest.MonkeyPatch.context() as mp:  # the config file is found through the environment
        mp.setenv("JOINSHIFT_CONFIG", str(config))
        s = load_settings(env)
    assert s.storage_root == f"s3a://{BUCKET}/joinshift" and s.jar_cache == test_settings.jar_cache
    return s


def _spec():
    from jobs.spec import parse_spec
    from tests.unit.tiny_spec import tiny_spec_data

    data = tiny_spec_data(pipeline="s3a_tiny", join={"type": "inner", "cardinality": "1-to-n"})
    for side in ("left", "right"):
        data[side]["topic"] = f"s3a_tiny_{side}"
        data[side]["watermark_delay"] = "1d"  # no record is late: the output cannot depend on batching
    return parse_spec(data)


def _records() -> pd.DataFrame:
    """60 left and 80 right events over the day's morning, keys k0..k9; arrival = event time + 7 s."""
    t0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    rows = []
    for i in range(60):
        rows.append(("left", f"L{i}", f"k{i % 10}", t0 + timedelta(minutes=3 * i)))
    for j in range(80):
        rows.append(("right", f"R{j}", f"k{(j * 3) % 10}", t0 + timedelta(minutes=2 * j + 1)))
    return pd.DataFrame(rows, columns=["side", "id", "k", "t"])


def _expected_pairs(recs: pd.DataFrame) -> set[tuple[str, str]]:
    """The window [-10m, +5m] by hand: every (left, right) of one key with r.t - l.t in it."""
    left, right = recs[recs.side == "left"], recs[recs.side == "right"]
    pairs = left.merge(right, on="k", suffixes=("_l", "_r"))
    gap = pairs.t_r - pairs.t_l
    hit = pairs[(gap >= timedelta(minutes=-10)) & (gap <= timedelta(minutes=5))]
    return set(zip(hit.id_l, hit.id_r))


def _publish(kafka, spec, recs: pd.DataFrame) -> None:
    from jobs.workload.publisher import publish

    frame = pd.DataFrame(
        {
            "topic": [spec.side(side).topic for side in recs.side],
            "key": list(recs.k),
            "value": [
                json.dumps({"event_id": i, "k": k, "t": t.isoformat()}) for i, k, t in zip(recs.id, recs.k, recs.t)
            ],
            "arrival_ms": [int((t + timedelta(seconds=7)).timestamp() * 1000) for t in recs.t],
        }
    ).sort_values("arrival_ms", kind="stable")
    publish(frame, kafka)


def _pairs(df) -> list[tuple[str, str]]:
    return [(r.left_event_id, r.right_event_id) for r in df.select("left_event_id", "right_event_id").collect()]


def test_land_batch_stream_and_restart_on_s3a(spark, kafka, s3_settings, test_root):
    import boto3

    from jobs.operate.checkpoint import backup_checkpoint
    from jobs.operate.checkpoint_validate import validate_checkpoint
    from jobs.steps.batch import run_variant
    from jobs.steps.landing import land_day
    from jobs.steps.stream import run_increment
    from jobs.storage import fs
    from jobs.storage.checkpoints import checkpoint_query_id
    from jobs.storage.kafka import create_topic
    from jobs.storage.progress import read_progress
    from jobs.storage.spark import get_spark
    from jobs.storage.stream_runs import read_runs
    from jobs.storage.tables import Tables

    s, spec = s3_settings, _spec()
    assert get_spark("s3a-test", s) is spark  # the running session takes the S3A settings
    tables = Tables.of(spec, s)
    for st in (spec.left, spec.right):
        create_topic(kafka, st.topic)
    recs = _records()
    expected = _expected_pairs(recs)
    assert len(expected) > 40
    half = recs.t < datetime(2026, 11, 20, 9, 30, tzinfo=UTC)

    # a streaming increment over the first half, then a restart from its checkpoint on S3A over the rest
    _publish(kafka, spec, recs[half])
    first = run_increment(spark, spec, bootstrap=kafka, s=s)
    cp = tables.checkpoint("stream_join")
    assert cp.startswith("s3a://") and fs.exists(fs.join(cp, "commits", str(first["last_batch"])))
    query_id = checkpoint_query_id(cp)
    _publish(kafka, spec, recs[~half])
    second = run_increment(spark, spec, bootstrap=kafka, s=s)
    assert second["last_batch"] > first["last_batch"]
    assert checkpoint_query_id(cp) == query_id  # the same query, resumed
    batch_ids = [p["batchId"] for p in read_progress(tables.progress_log("stream_join"))]
    assert batch_ids == list(range(second["last_batch"] + 1)), batch_ids  # each batch once, logged on S3
    assert read_runs(spec, s)  # the run's provenance, on S3 too

    got = _pairs(spark.read.format("delta").load(tables.output("stream")))
    assert len(got) == len(set(got)), "duplicated output rows"
    assert set(got) == expected

    # landing and a batch join of the same day, on S3A: the same pairs
    land_day(spark, spec, DS, s, bootstrap=kafka)
    run_variant(spark, spec, "batch_1d_windowed", DS, s)
    assert set(_pairs(spark.read.format("delta").load(tables.output("batch_1d_windowed")))) == expected

    # the checkpoint tools read it where it is; a copy and a rename (S3: copy then delete) keep it whole
    health = validate_checkpoint(cp, spec=spec)
    assert health.ok and health.last_committed_batch == second["last_batch"], health.render()
    copy = str(backup_checkpoint(cp))
    moved = copy + "-moved"
    fs.rename(copy, moved)
    assert not fs.exists(copy) and validate_checkpoint(moved, spec=spec).ok

    # a 6 MB object: a multipart upload (two 5 MB parts at most) through S3A, read back whole
    big = "".join(f"{i:09d}\n" for i in range(600_000))
    fs.write_text(s.path("scratch", "big.txt"), big)
    assert fs.read_text(s.path("scratch", "big.txt")) == big and fs.size(s.path("scratch", "big.txt")) == len(big)

    # everything under the storage root is in the bucket; nothing landed on local disk by mistake
    client = boto3.client("s3", endpoint_url=s.spark_conf["spark.hadoop.fs.s3a.endpoint"], region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    keys = {o["Key"] for page in pages for o in page.get("Contents", [])}
    for prefix in ("tables/s3a_tiny/out/_delta_log/", "checkpoints/s3a_tiny/stream_join/commits/", "progress/s3a_tiny"):
        assert any(k.startswith(f"joinshift/{prefix}") for k in keys), prefix
    assert not Path("s3a:").exists() and not (Path.cwd() / f"s3a:/{BUCKET}").exists()

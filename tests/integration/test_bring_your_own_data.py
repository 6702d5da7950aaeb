"""README's "Bring your own data", end to end on a data set the project did not make: a ride-hailing
service's requests (nested JSON, epoch-ms times, arrival in a field, a field added mid-way) and its
drivers' pickups (CSV, local Chicago time without an offset, no id), under
``tests/data/byod/``. Every step is the CLI a user runs, on the real broker, Spark and Delta:
import the two files, land, run the batch baselines and the stream, compare, recommend. The
requests again as Avro (Confluent framing, two schema ids exported to ``.avsc`` files, no
registry) join to the same pairs.

The oracle is pandas over the two files, written here from the data's own description: a pickup
matches a request of the same rider within [0, +30m]; a request's ds is the UTC day it was
received.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from jobs.cli import main

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parent.parent / "data" / "byod"
DAYS = [date(2026, 11, 20), date(2026, 11, 21)]


def oracle() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(requests, pickups, matched pairs) straight from the files."""
    rows = [json.loads(line) for line in (DATA / "ride_requests.jsonl").read_text().splitlines()]
    req = pd.DataFrame(
        {
            "request_id": [r["request"]["id"] for r in rows],
            "rider": [r["request"]["rider"] for r in rows],
            "requested_at": pd.to_datetime([r["requested_at"] for r in rows], unit="ms", utc=True),
            "ds": pd.to_datetime([r["received_at"] for r in rows], unit="ms", utc=True).date,
            "city": [r["city"] for r in rows],
            "drift": ["app_version" in r for r in rows],
        }
    )
    pick = pd.read_csv(DATA / "pickups.csv", dtype=str, keep_default_na=False)
    pick = pick[pick.pickup_time != "n/a"].copy()
    local = pd.to_datetime(pick.pickup_time, format="%Y-%m-%d %H:%M:%S")
    pick["pickup_time"] = local.dt.tz_localize("America/Chicago").dt.tz_convert("UTC")
    good = req[req.rider.notna()]
    pairs = good.merge(pick, on="rider")
    d = pairs.pickup_time - pairs.requested_at
    pairs = pairs[(d >= pd.Timedelta(0)) & (d <= pd.Timedelta(minutes=30))]
    return req, pick, pairs


def matched(spark, tables, variant: str) -> set[tuple]:
    """(request id, rider, pickup time) of the matched rows a variant wrote."""
    out = spark.read.format("delta").load(tables.output(variant)).where("right_pickup_time IS NOT NULL")
    return {
        (r.left_request_id, r.right_rider, pd.Timestamp(r.right_pickup_time).tz_localize("UTC"))
        for r in out.select("left_request_id", "right_rider", "right_pickup_time").collect()
    }


def test_two_files_of_your_own_reach_the_comparison_and_the_recommendation(
    spark, kafka, test_settings, tmp_path, capsys
):
    from jobs.spec import load_spec
    from jobs.storage.tables import Tables

    spec_file = str(DATA / "rides.yaml")
    spec = load_spec(spec_file)
    req, pick, pairs = oracle()
    args = ["--spec", spec_file]

    assert main(["import", *args, "--left", str(DATA / "ride_requests.jsonl"), "--right", str(DATA / "pickups.csv"),
                 "--arrival", "uploaded_at"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == {"pickups": len(pick) + 1, "ride_requests": len(req)}

    assert main(["land", *args, "--ds", "2026-11-20", "--to", "2026-11-22"]) == 0  # every arrival is in these days
    landed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    left = {r["left"]["ds"]: r["left"] for r in landed}
    assert sum(r["right"]["records"] for r in landed) == len(pick) + 1  # every row accounted for
    assert sum(r["records"] for r in left.values()) == len(req)
    assert sum(r["quarantined"].get("null_key", 0) for r in left.values()) == 1  # the request without a rider
    assert sum(r["right"]["quarantined"].get("bad_event_time", 0) for r in landed) == 1  # "n/a"
    drift = sum(r["schema_drift"].get("app_version", 0) for r in left.values())
    assert drift == int((req.drift & req.rider.notna()).sum()) > 0  # the added field: kept and counted

    assert main(["batch", *args, "--ds", "2026-11-20", "--to", "2026-11-21"]) == 0
    statuses = [json.loads(line)["status"] for line in capsys.readouterr().out.splitlines()]
    assert statuses == ["done"] * 8  # the 22nd has landed: no variant waits

    tables = Tables.of(spec, test_settings)
    expected = {(r.request_id, r.rider, r.pickup_time) for r in pairs.itertuples()}
    assert matched(spark, tables, "reference") == expected
    assert main(["stream", *args, "--available-now"]) == 0
    assert matched(spark, tables, "stream") == expected  # one micro-batch, nothing late: the stream sees every pair
    ids = spark.read.format("delta").load(tables.landed("right")).select("pickup_id").distinct().count()
    assert ids == len(pick)  # the id made from rider, pickup time and driver is unique per pickup

    capsys.readouterr()
    assert main(["compare", *args, "--ds", "2026-11-20", "--to", "2026-11-21"]) == 0
    from jobs.accuracy.compare import compare_ds

    rates = {m["variant"]: m["match_rate"] for m in compare_ds(spark, spec, DAYS[0], test_settings)}
    day0 = req[(req.ds == DAYS[0]) & req.rider.notna()]
    assert rates["reference"] == pytest.approx(day0.request_id.isin(set(pairs.request_id)).mean())
    assert rates["stream"] == rates["reference"]

    capsys.readouterr()
    assert main(["recommend", *args, "--ds", "2026-11-20", "--to", "2026-11-21", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["pipeline"] == "rides" and rec["inputs"]["left_events"] == len(req) - 1
    assert rec["chosen"]["p99_latency_s"] <= 2 * 3600  # the spec's budget
    assert not rec["inputs"]["incomplete"]

    # the batch job's own table, which lacks a request the stream read: each variant is rated over
    # the left events it joined (the stream's over what landed), not the stream over the table
    import yaml

    day0 = day0.assign(dt=day0.ds.astype(str))
    dropped = day0.request_id[day0.request_id.isin(set(pairs.request_id))].iloc[0]
    own = day0[day0.request_id != dropped].rename(columns={"request_id": "req_id", "rider": "rider_id"})
    own[["req_id", "rider_id", "requested_at", "city", "dt"]].to_parquet(
        tmp_path / "requests", partition_cols=["dt"], coerce_timestamps="us", allow_truncated_timestamps=True
    )
    data = yaml.safe_load((DATA / "rides.yaml").read_text())
    data["left"]["batch_table"] = {"format": "parquet", "ds_column": "dt", "path": str(tmp_path / "requests"),
                                   "columns": {"request_id": "req_id", "rider": "rider_id"}}  # fmt: skip
    (tmp_path / "rides_own.yaml").write_text(yaml.safe_dump(data))
    assert main(["batch", "--spec", str(tmp_path / "rides_own.yaml"), "--ds", "2026-11-20"]) == 0
    own_rates = {
        m["variant"]: m for m in compare_ds(spark, load_spec(tmp_path / "rides_own.yaml"), DAYS[0], test_settings)
    }
    assert own_rates["stream"]["match_rate"] == rates["stream"]  # unchanged: the stream read Kafka
    assert own_rates["stream"]["left_events"] == len(day0)
    assert own_rates["reference"]["left_events"] == len(own)
    assert own_rates["reference"]["match_rate"] == pytest.approx(own.req_id.isin(set(pairs.request_id)).mean())
    # a ds that has not landed (here: its landed rows deleted): the stream too is rated over the table,
    # rather than the ds having no stream rate at all
    from jobs.storage import delta_io

    landed_left = tables.landed("left")
    before = delta_io.latest_commit(landed_left)
    delta_io.delete_where(spark, landed_left, "ds = '2026-11-20'")
    try:
        unlanded = {
            m["variant"]: m for m in compare_ds(spark, load_spec(tmp_path / "rides_own.yaml"), DAYS[0], test_settings)
        }
    finally:
        spark.sql(f"RESTORE TABLE {delta_io.table_ref(landed_left)} TO VERSION AS OF {before}")
    assert unlanded["stream"]["left_events"] == len(own)
    assert unlanded["stream"]["match_rate"] == own_rates["reference"]["match_rate"]


def test_the_batch_side_reads_the_batch_jobs_own_tables_without_landing(spark, tmp_path, capsys):
    """The team's existing daily tables (Parquet, other column names, a string ds column) are the
    batch input: no import, no landing; the baselines computed from them equal the oracle."""
    import yaml

    from jobs.spec import load_spec

    req, pick, pairs = oracle()
    own = req[req.rider.notna()].rename(columns={"request_id": "req_id", "rider": "rider_id"})
    own = own.assign(dt=own.ds.astype(str))[["req_id", "rider_id", "requested_at", "city", "dt"]]
    own.to_parquet(
        tmp_path / "requests", partition_cols=["dt"], coerce_timestamps="us", allow_truncated_timestamps=True
    )
    uploaded = pd.to_datetime(pick.uploaded_at).dt.tz_localize("America/Chicago").dt.tz_convert("UTC")
    picks = pick.assign(
        pickup_uuid=pick.rider + "|" + pick.pickup_time.astype(str) + "|" + pick.driver,
        fare=pick.fare.astype(float),
        uploaded=uploaded,
        dt=uploaded.dt.date.astype(str),
    )
    picks.to_parquet(
        tmp_path / "pickups", partition_cols=["dt"], coerce_timestamps="us", allow_truncated_timestamps=True
    )

    def spec_file(name: str, left_columns: dict) -> str:
        data = yaml.safe_load((DATA / "rides.yaml").read_text())
        data["pipeline"] = name
        table = {"format": "parquet", "ds_column": "dt"}
        data["left"]["batch_table"] = {**table, "path": str(tmp_path / "requests"), "columns": left_columns}
        data["right"]["batch_table"] = {
            **table,
            "path": str(tmp_path / "pickups"),
            "columns": {"pickup_id": "pickup_uuid"},
            "arrival_column": "uploaded",
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
        return str(tmp_path / f"{name}.yaml")

    path = spec_file("rides_own_tables", {"request_id": "req_id", "rider": "rider_id"})
    assert main(["batch", "--spec", path, "--ds", "2026-11-20", "--to", "2026-11-21"]) == 0
    assert [json.loads(line)["status"] for line in capsys.readouterr().out.splitlines()] == ["done"] * 8

    from jobs.settings import settings
    from jobs.storage.tables import Tables

    out = spark.read.format("delta").load(Tables.of(load_spec(path), settings()).output("reference"))
    got = {
        (r.left_request_id, r.right_rider, pd.Timestamp(r.right_pickup_time).tz_localize("UTC"))
        for r in out.where("right_pickup_time IS NOT NULL").collect()
    }
    assert got == {(r.request_id, r.rider, r.pickup_time) for r in pairs.itertuples()}

    bad_path = spec_file("rides_unmapped", {})
    with pytest.raises(SystemExit) as exc:
        main(["batch", "--spec", bad_path, "--ds", "2026-11-20"])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and "has no column request_id, rider" in err and "batch_table.columns" in err


def test_avro_requests_under_two_schema_ids_join_like_the_json_ones(spark, kafka, test_settings, tmp_path, capsys):
    """The requests as Avro in Confluent framing with no registry: servers still on schema id 1
    and servers on id 2 (which added ``app_version``) write the same topic, in arrival order, with
    three values a registry-aware consumer would choke on; the pickups come in by ``joinshift
    import`` as JSON. A landed day, its batch_1d_windowed and the stream equal the oracle, drift is
    counted as from JSON, the three are quarantined as ``malformed_avro`` with their bytes, and
    ``joinshift import`` writes the v2 records byte for byte as a v2 producer does."""
    import base64
    import io
    import shutil
    import struct

    import fastavro
    import yaml

    from jobs.spec import load_spec
    from jobs.steps.importing import read_rows, to_records
    from jobs.storage import kafka as kafka_io
    from jobs.storage.tables import Tables

    req, pick, pairs = oracle()
    (tmp_path / "schemas").mkdir()
    for v in (1, 2):
        shutil.copy(DATA / f"ride_request_v{v}.avsc", tmp_path / "schemas")
    data = yaml.safe_load((DATA / "rides.yaml").read_text())
    data["pipeline"] = "rides_avro"
    data["left"]["topic"], data["right"]["topic"] = "ride_requests_avro", "pickups_avro"
    data["left"]["format"].pop("time_format")  # timestamp-millis decodes to ISO times
    data["left"]["format"]["encoding"] = "avro"
    data["left"]["format"]["avro"] = {  # relative to the spec's folder
        "schema": "schemas/ride_request_v2.avsc",
        "framing": "confluent",
        "schemas": {v: f"schemas/ride_request_v{v}.avsc" for v in (1, 2)},
    }
    (tmp_path / "rides_avro.yaml").write_text(yaml.safe_dump(data))
    args = ["--spec", str(tmp_path / "rides_avro.yaml")]
    spec = load_spec(tmp_path / "rides_avro.yaml")
    tables = Tables.of(spec, test_settings)

    rows = [json.loads(line) for line in (DATA / "ride_requests.jsonl").read_text().splitlines()]
    writers = {v: fastavro.parse_schema(json.loads((DATA / f"ride_request_v{v}.avsc").read_text())) for v in (1, 2)}

    def framed(row: dict, schema_id: int) -> bytes:
        out = io.BytesIO()
        out.write(struct.pack(">bi", 0, schema_id))
        fastavro.schemaless_writer(out, writers[schema_id], row)
        return out.getvalue()

    sent = [(r["received_at"], framed(r, 2 if "app_version" in r else 1)) for r in rows]
    broken = [  # a record written as JSON, one under an id nobody exported, one cut short
        json.dumps(rows[0]).encode(),
        struct.pack(">bi", 0, 7) + sent[1][1][5:],
        sent[2][1][:-6],
    ]
    sent += [(rows[i]["received_at"] + 1, value) for i, value in enumerate(broken)]
    producer = kafka_io.producer(kafka)
    for ts, value in sorted(sent, key=lambda x: x[0]):
        producer.send("ride_requests_avro", key=b"k", value=value, timestamp_ms=ts)
    producer.flush()
    producer.close()
    assert main(["import", *args, "--right", str(DATA / "pickups.csv"), "--arrival", "uploaded_at"]) == 0

    imported = to_records(read_rows(spark, str(DATA / "ride_requests.jsonl")), spec, "left", None).collect()
    by_arrival = {r.arrival_ms: bytes(r.value) for r in imported}
    assert all(by_arrival[r["received_at"]] == framed(r, 2) for r in rows if "app_version" in r)

    # one day, both sides: what batch_1d_windowed reads (a short test; the JSON one lands every day)
    capsys.readouterr()
    assert main(["land", *args, "--ds", "2026-11-20"]) == 0
    landed = json.loads(capsys.readouterr().out)["left"]
    day = req[req.ds == DAYS[0]]
    assert landed["records"] == len(day) + len(broken)
    assert landed["quarantined"] == {"malformed_avro": 3}
    assert landed["schema_drift"] == {"app_version": int(day.drift.sum())}  # as from JSON: counted where set
    q = spark.read.format("delta").load(tables.quarantine).where("reason = 'malformed_avro'").collect()
    assert sorted(base64.b64decode(r.raw_value) for r in q) == sorted(broken)  # the bytes as sent
    assert sorted(r.detail.split(":")[0] for r in q) == [
        "magic byte 0x7b, not 0x00",
        "schema id 7 not in avro.schemas (1, 2)",
        "truncated",
    ]
    landed_times = spark.read.format("delta").load(tables.landed("left")).select("request_id", "requested_at")
    assert {r.request_id: pd.Timestamp(r.requested_at).tz_localize("UTC") for r in landed_times.collect()} == dict(
        zip(day.request_id, day.requested_at)
    )  # timestamp-millis read as the instants the JSON's epoch milliseconds are

    assert main(["batch", *args, "--ds", "2026-11-20", "--variant", "batch_1d_windowed"]) == 0
    assert main(["stream", *args, "--available-now"]) == 0

    uploaded = pd.to_datetime(pairs.uploaded_at).dt.tz_localize("America/Chicago").dt.tz_convert("UTC").dt.date
    same_day = pairs[(pairs.ds == DAYS[0]) & (uploaded == DAYS[0])]  # both arrived on the ds
    assert matched(spark, tables, "batch_1d_windowed") == {
        (r.request_id, r.rider, r.pickup_time) for r in same_day.itertuples()
    }
    assert matched(spark, tables, "stream") == {(r.request_id, r.rider, r.pickup_time) for r in pairs.itertuples()}

"""Land a Kafka topic into its Hive-style daily Delta table, partitioned by *arrival* ds.

A warehouse partitions logs by when they arrived, so the daily cut-off is real: a click that
happens at 23:59 and arrives at 00:10 lands in the next ds. Bad records go to the quarantine
table with the reason and the raw payload; every record of the ds is accounted for
(``records == landed + quarantined``). Rerunning a ds replaces that ds only, and only from a topic
that still holds all of it (else :class:`jobs.storage.kafka.RetentionGap`, the landed day kept).

Run one ds::

    joinshift land --ds 2026-11-20
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.join.records import good_events, mark_duplicates, parse_records, quarantine_rows
from jobs.settings import Settings
from jobs.spec import JoinSpec, StreamSpec
from jobs.storage import delta_io, kafka
from jobs.storage.tables import Tables

log = logging.getLogger("joinshift.landing")


@dataclass
class LandingResult:
    side: str
    ds: date
    records: int
    landed: int
    quarantined: dict[str, int] = field(default_factory=dict)
    #: fields the schema does not name -> records that carried them (kept: ``unknown_fields: keep``)
    schema_drift: dict[str, int] = field(default_factory=dict)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())


def land_records(raw: DataFrame, stream: StreamSpec, spec: JoinSpec, seen_ids: DataFrame | None = None) -> DataFrame:
    """Pure core: one ds of raw Kafka rows -> parsed rows with ``_reason`` (duplicates flagged)."""
    return mark_duplicates(parse_records(raw, stream, spec), stream, seen_ids)


def ds_bounds_ms(ds: date, timezone: str) -> tuple[int, int]:
    """[start, end) of a ds in epoch milliseconds."""
    tz = ZoneInfo(timezone)
    start = datetime.combine(ds, time(0), tz)
    end = datetime.combine(ds + timedelta(days=1), time(0), tz)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


def read_ds(spark: SparkSession, spec: JoinSpec, side: str, ds: date, tables: Tables, bootstrap: str) -> DataFrame:
    """One stream's ds read from Kafka and parsed (:func:`land_records`), re-sends of the previous
    landed day flagged as duplicates: what :func:`land_ds` writes, not yet computed."""
    stream = spec.side(side)
    raw = kafka.read_range(spark, bootstrap, stream.topic, *_record_time_ms(spec, side, ds))
    landed_path = tables.landed(side)
    seen = None
    if delta_io.table_exists(spark, landed_path):
        # duplicates are re-sends minutes apart: the previous day is enough to catch them
        seen = spark.read.format("delta").load(landed_path).where(F.col("ds") == F.lit(ds - timedelta(days=1)))
    return land_records(raw, stream, spec, seen).where(F.col("ds") == F.lit(ds))


def _record_time_ms(spec: JoinSpec, side: str, ds: date) -> tuple[int, int]:
    """[start, end) of the record timestamps a ds's landing reads: the day, and with the arrival
    from a field (the ds is the field's) the ``arrival_slack`` around it."""
    start_ms, end_ms = ds_bounds_ms(ds, spec.timezone)
    fmt = spec.side(side).format
    slack_ms = int(fmt.arrival_slack.total_seconds() * 1000) if fmt.arrival_field else 0
    return start_ms - slack_ms, end_ms + slack_ms


def _holds_what_landed(spark: SparkSession, spec: JoinSpec, side: str, ds: date, path: str, bootstrap: str) -> None:
    """Landing a ds again replaces it: only from a topic that still holds all of it. Kafka's
    retention (or a deleted topic) would otherwise turn a landed day into its remains, silently
    (:class:`jobs.storage.kafka.RetentionGap`)."""
    if not delta_io.table_exists(spark, path) or delta_io.read_table(spark, path).where(F.col("ds") == ds).isEmpty():
        return
    stream = spec.side(side)
    start = datetime.fromtimestamp(_record_time_ms(spec, side, ds)[0] / 1000, UTC)
    keep = f"ds {ds} of {stream.name} stays as it was landed; land again only days the topic still holds"
    kafka.offsets_for_time(bootstrap, stream.topic, start, advice=keep)


def land_ds(
    spark: SparkSession, spec: JoinSpec, side: str, ds: date, s: Settings | None = None, bootstrap: str | None = None
) -> LandingResult:
    """I/O shell: land one stream's ds from Kafka into Delta, quarantine the bad records."""
    tables = Tables.of(spec, s)
    stream = spec.side(side)
    landed_path = tables.landed(side)
    bootstrap = bootstrap or kafka.bootstrap_servers(tables.settings)
    _holds_what_landed(spark, spec, side, ds, landed_path, bootstrap)
    parsed = read_ds(spark, spec, side, ds, tables, bootstrap).persist()
    try:
        delta_io.replace_partitions(
            quarantine_rows(parsed, stream, "landing"),
            tables.quarantine,
            {"stage": ["landing"], "stream": [stream.name], "ds": [ds]},
            partition_by=("ds",),
        )
        counts, drift = _accounted(parsed)
        # last: ``parsed`` reads this table (the previous day's ids), so the write drops its cache,
        # and anything after it would parse the day again (6.5 s -> 5.3 s a landing: python -m bench.landing)
        delta_io.replace_partitions(good_events(parsed, stream), landed_path, {"ds": [ds]})
    finally:
        parsed.unpersist()
    landed = counts.get(None, 0)
    quarantined = {reason: counts[reason] for reason in sorted(r for r in counts if r is not None)}
    result = LandingResult(side, ds, sum(counts.values()), landed, quarantined, drift)
    _log_landing(spark, tables, stream, result)
    log.info(
        "landed %s ds=%s: %d records, %d landed, %d quarantined %s, schema drift %s",
        stream.topic,
        ds,
        result.records,
        landed,
        result.quarantined_total,
        result.quarantined,
        result.schema_drift,
    )
    return result


def _accounted(parsed: DataFrame) -> tuple[dict[str | None, int], dict[str, int]]:
    """Records per quarantine reason (None: landed), and landed records per field the schema does
    not name, in one job: rows grouped by reason and by a landed row's unknown fields (a few sets)."""
    fields = F.when(F.col("_reason").isNull(), F.col("_drift")).alias("fields")
    counts: dict[str | None, int] = {}
    drift: dict[str, int] = {}
    for r in parsed.groupBy("_reason", fields).agg(F.count("*").alias("n")).collect():
        counts[r["_reason"]] = counts.get(r["_reason"], 0) + r["n"]
        for name in r["fields"].split(",") if r["fields"] else ():
            drift[name] = drift.get(name, 0) + r["n"]
    return counts, dict(sorted(drift.items()))


def _log_landing(spark: SparkSession, tables: Tables, stream: StreamSpec, r: LandingResult) -> None:
    row = spark.createDataFrame(
        [(r.side, stream.name, r.ds, r.records, r.landed, r.quarantined_total, datetime.now(ZoneInfo("UTC")))],
        "side string, stream string, ds date, records long, landed long, quarantined long, landed_at timestamp",
    )
    delta_io.replace_partitions(row, tables.landing_log, {"side": [r.side], "ds": [r.ds]}, partition_by=())


def land_day(
    spark: SparkSession, spec: JoinSpec, ds: date, s: Settings | None = None, bootstrap: str | None = None
) -> dict[str, dict]:
    """Land both streams for one ds."""
    return {side: asdict(land_ds(spark, spec, side, ds, s, bootstrap)) for side in ("left", "right")}

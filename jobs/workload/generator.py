"""A realistic, deterministic workload for a join spec, and a Kafka publisher for it.

The generator is pure (numpy, no Spark, no Kafka): :func:`generate` turns a
:class:`WorkloadParams` and a :class:`~jobs.spec.JoinSpec` into a :class:`Workload` holding

* ``records`` -- one row per Kafka record, sorted by arrival (the Kafka record timestamp):
  ``side, topic, key, value, arrival_ms, event_id, expected_reason``;
* ``left`` / ``right`` -- the good events a correct parser lands (typed);
* ``links`` -- the generative truth: ``(left_event_id, right_event_id)`` for every right event
  generated *for* a left event (a join by key and window may find more or fewer pairs).

The model follows the paper's search-session query (VLDB 2018, §3 and §7.1): the server logs a
search response (left) with a session id; the client then logs clicks (right) with the same id.

* Left events: ``left_events_per_day`` per day, grouped into sessions (the join key). Each of
  ``distinct_keys_per_day`` keys gets one search and the remaining searches go to keys by a Zipf
  law on rank (most sessions have one search, a few are hot: paper §6.6). A session starts at a
  time drawn from a diurnal curve in the spec's time zone (nothing before the first local
  midnight) and its searches spread over ``size × session_gap``. Server logs arrive seconds
  late, nearly in order, with rare stragglers.
* Right events: a share of left events gets no click (``unmatched_share``); the others get
  1 + geometric clicks (mean ``right_per_match_mean``). A click's event time is the search's plus
  an offset: mostly seconds to minutes after, a share up to ``right_before_max`` *before* (clock
  skew, prefetch), and a share *beyond the window's upper bound* so that the window matters.
  A few clicks belong to no generated search (``right_orphan_share``). Client logs arrive with a
  heavy-tailed delay: a lognormal body (seconds to minutes) mixed with a lognormal tail (hours),
  both larger at night in the spec's time zone (phones sleep, uploads wait for the morning).
* Bad records (paper §6.7 and the landing contract), each with exactly one problem and the
  quarantine reason the landing job must give it (``expected_reason``): see :data:`BAD_CLASSES`.
  Bad records are *extra* records (fresh event ids, payloads copied from a good event), except
  ``duplicate_event_id``: an exact re-send of an earlier good record, arriving a little later.
  So ``left``/``right``/``links`` are exactly the good records and the truth of the join.

Deterministic: the same parameters and spec give byte-identical ``records`` (each aspect draws
from its own random stream, seeded by ``seed`` and the aspect's name).

Not generated: ``null_id`` (the landing job's extra reason). Under ``unknown_fields: ignore`` the
``unexpected_field`` records are good events (in ``left``/``right``, not in ``links``).

The publisher (:func:`publish`) is a thin kafka-python shell: it sends ``records`` in arrival order
with the Kafka record timestamp set to ``arrival_ms``.

Example::

    from jobs.spec import load_spec
    from jobs.workload.generator import generate, load_workload, publish
    spec = load_spec("include/specs/search_sessions.yaml")
    wl = generate(load_workload("include/workloads/search_sessions.yaml"), spec)
    publish(wl.records, "localhost:9092")

Command line::

    python -m jobs.workload --spec include/specs/search_sessions.yaml \\
        --workload include/workloads/search_sessions.yaml [--publish localhost:9092]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jobs.spec import Duration, JoinSpec, SpecError, StreamSpec, UnknownFields, read_yaml, validate_model

log = logging.getLogger("joinshift.workload")

#: Quarantine reason codes the generator produces, one class of bad record each.
BAD_CLASSES = (
    "malformed_json",        # the value is not a JSON object
    "null_key",              # a join-key column is null or missing
    "bad_event_time",        # the event time is missing or unparsable
    "event_time_too_old",    # event_time < arrival - timestamp_validity.max_past
    "event_time_in_future",  # event_time > arrival + timestamp_validity.max_future
    "duplicate_event_id",    # same event id as a record that arrived earlier on the topic
    "bad_type",              # a (non-string, non-key, non-id, non-event-time) field of the wrong type
    "unexpected_field",      # a JSON field not in the schema
)

RECORD_COLUMNS = ("side", "topic", "key", "value", "arrival_ms", "event_id", "expected_reason")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _share(default: float, description: str) -> Any:
    return Field(default=default, ge=0.0, le=1.0, description=description)


class BadShares(_Strict):
    """Share of all records on a topic that are bad, per quarantine reason (each side alike)."""

    malformed_json: float = _share(0.002, "value is not a JSON object (truncated, text, array, scalar)")
    null_key: float = _share(0.002, "a join-key column is JSON null or missing (Kafka key null)")
    bad_event_time: float = _share(0.002, "event time missing, null or unparsable")
    event_time_too_old: float = _share(0.002, "event time older than arrival - max_past")
    event_time_in_future: float = _share(0.002, "event time later than arrival + max_future")
    duplicate_event_id: float = _share(0.002, "exact re-send of an earlier good record, a little later")
    bad_type: float = _share(0.002, "a typed field with a value of the wrong type, e.g. position: 'abc'")
    unexpected_field: float = _share(0.002, "an extra JSON field not in the schema")

    @model_validator(mode="after")
    def _total(self) -> BadShares:
        total = sum(self.as_dict().values())
        if total >= 0.5:
            raise ValueError(f"bad shares sum to {total:.3f}; keep the total below 0.5")
        return self

    def as_dict(self) -> dict[str, float]:
        return {c: float(getattr(self, c)) for c in BAD_CLASSES}


class WorkloadParams(_Strict):
    """Parameters of the generated workload; every field has a sensible default."""

    seed: int = Field(default=20261119, description="random seed; same seed and params -> same records")
    start_date: date = Field(default=date(2026, 11, 19), description="first day (midnight in the spec's time zone)")
    days: int = Field(default=2, ge=1, le=366, description="number of days of left traffic")
    left_events_per_day: int = Field(default=20_000, ge=1, description="left (search) events per day")

    # traffic shape
    diurnal_amplitude: float = Field(
        default=0.6, ge=0.0, lt=1.0,
        description="rate(h) ∝ 1 + a·cos(2π(h − peak)/24): 0 = flat, 0.6 = 4x day/night ratio")
    diurnal_peak_hour: float = Field(default=20.0, ge=0.0, lt=24.0, description="local hour of peak traffic")
    night_hours: tuple[int, int] = Field(
        default=(0, 6), description="[start, end) local hours of the night (wraps, e.g. [22, 6])")

    # keys and sessions
    distinct_keys_per_day: int | None = Field(
        default=None, ge=1,
        description="session keys per day, at most left_events_per_day (default: 85% of it); each key "
                    "gets one left event and the rest go to keys by a Zipf law")
    key_zipf_exponent: float = Field(
        default=0.7, ge=0.0, le=3.0, description="Zipf exponent of the extra left events per key (0 = uniform)")
    session_gap: Duration = Field(
        default=timedelta(minutes=2), description="a session's searches spread over size × gap")
    session_max_duration: Duration = Field(
        default=timedelta(hours=12), description="cap on a session's spread")

    # right events per left event, and their event times
    unmatched_share: float = Field(default=0.08, ge=0.0, le=1.0, description="share of left events with no right event")
    right_per_match_mean: float = Field(
        default=1.5, ge=1.0, le=50.0, description="mean right events per matched left (1 + geometric)")
    right_per_match_max: int = Field(default=20, ge=1, description="cap on right events per left event")
    right_offset_median: Duration = Field(
        default=timedelta(seconds=20), description="median right.event_time − left.event_time (lognormal body)")
    right_offset_sigma: float = Field(default=1.5, gt=0.0, le=5.0, description="lognormal sigma of that offset")
    right_before_share: float = _share(0.03, "share of right events *before* their left event")
    right_before_max: Duration = Field(default=timedelta(minutes=10), description="how far before, uniform")
    right_late_share: float = _share(0.02, "share of right events beyond the spec window's upper bound")
    right_late_mean: Duration = Field(
        default=timedelta(minutes=40), description="mean excess beyond the upper bound (exponential)")
    right_orphan_share: float = _share(
        0.01, "right events with a key no left event has (lost server logs), per linked right event")

    # arrival delays (arrival = Kafka record timestamp)
    left_delay_median: Duration = Field(default=timedelta(seconds=2), description="server log delay, lognormal median")
    left_delay_sigma: float = Field(default=0.7, gt=0.0, le=5.0, description="lognormal sigma of the left delay")
    left_straggler_share: float = _share(0.001, "left events from a lagging server")
    left_straggler_max: Duration = Field(default=timedelta(minutes=30), description="straggler delay, uniform from 1m")
    right_delay_median: Duration = Field(default=timedelta(seconds=30), description="client log delay body, lognormal median")
    right_delay_sigma: float = Field(default=1.3, gt=0.0, le=5.0, description="lognormal sigma of the body")
    right_tail_share_day: float = _share(0.025, "share of right events in the hours-long tail, by day")
    right_tail_share_night: float = _share(0.08, "the same at night (local time of the event)")
    right_tail_median: Duration = Field(default=timedelta(minutes=45), description="tail delay, lognormal median")
    right_tail_sigma: float = Field(default=1.2, gt=0.0, le=5.0, description="lognormal sigma of the tail")
    night_delay_factor: float = Field(default=2.0, ge=1.0, le=100.0, description="body delay multiplier at night")
    right_delay_max: Duration = Field(
        default=timedelta(hours=24), description="cap on a good right delay (also kept below max_past)")

    bad: BadShares = Field(default_factory=BadShares, description="bad-record shares per quarantine reason")

    @field_validator("night_hours")
    @classmethod
    def _hours(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not all(0 <= h <= 24 for h in v):
            raise ValueError("hours must be between 0 and 24")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadParams:
        positive = ("session_gap", "session_max_duration", "right_offset_median", "right_late_mean",
                    "left_delay_median", "left_straggler_max", "right_delay_median", "right_tail_median",
                    "right_delay_max")
        for name in positive:
            if getattr(self, name).total_seconds() <= 0:
                raise ValueError(f"{name}: must be positive")
        if self.right_before_max.total_seconds() < 0:
            raise ValueError("right_before_max: must be zero or positive")
        if self.left_straggler_max < timedelta(minutes=1):
            raise ValueError("left_straggler_max: must be at least 1m")
        if self.distinct_keys_per_day is not None and self.distinct_keys_per_day > self.left_events_per_day:
            raise ValueError(
                f"distinct_keys_per_day: must not exceed left_events_per_day ({self.left_events_per_day})")
        if self.right_before_share + self.right_late_share > 1:
            raise ValueError("right_before_share + right_late_share: must not exceed 1")
        return self

    @property
    def keys_per_day(self) -> int:
        return self.distinct_keys_per_day or max(1, round(self.left_events_per_day * 0.85))


def parse_workload(data: Any, source: str = "<workload>") -> WorkloadParams:
    """Validate a mapping (parsed YAML) into :class:`WorkloadParams`; errors name every bad field."""
    return validate_model(WorkloadParams, {} if data is None else data, source, "workload")


def load_workload(path: str | Path) -> WorkloadParams:
    """Read and validate a workload YAML file (an empty file means all defaults)."""
    data, source = read_yaml(path, "workload file")
    return parse_workload(data, source=source)


# --------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """Generated records and the truth about them."""

    #: One row per Kafka record, sorted by ``arrival_ms``: see :data:`RECORD_COLUMNS`.
    records: pd.DataFrame
    #: Good left events: event_id, key, event_time, arrival_time and the payload columns.
    left: pd.DataFrame
    #: Good right events, same shape.
    right: pd.DataFrame
    #: ``left_event_id, right_event_id`` for every right event generated for a left event.
    links: pd.DataFrame
    params: WorkloadParams
    spec: JoinSpec

    def summary(self) -> dict[str, Any]:
        """Realized statistics: records per topic per arrival day, bad records, delays, matching."""
        r = self.records
        ds = _ds_of(r["arrival_ms"].to_numpy(), self.spec.timezone)
        per_day = (
            pd.DataFrame({"topic": r["topic"].to_numpy(), "ds": ds})
            .groupby(["topic", "ds"]).size()
        )
        per_topic_day = {t: {str(d): int(n) for (tt, d), n in per_day.items() if tt == t}
                         for t in sorted(set(r["topic"]))}
        bad = r["expected_reason"].value_counts().to_dict()

        def q(td: pd.Series) -> dict[str, float]:
            s = td.dt.total_seconds().to_numpy()
            if not len(s):
                return {}
            p = np.percentile(s, [50, 90, 99, 99.9])
            return {"p50_s": round(p[0], 1), "p90_s": round(p[1], 1), "p99_s": round(p[2], 1),
                    "p99.9_s": round(p[3], 1), "max_s": round(float(s.max()), 1)}

        lt = self.left
        linked_left = set(self.links["left_event_id"])
        return {
            "records": int(len(r)),
            "records_per_topic_per_day": per_topic_day,
            "bad_records": {c: int(bad.get(c, 0)) for c in BAD_CLASSES},
            "good_left": int(len(lt)),
            "good_right": int(len(self.right)),
            "links": int(len(self.links)),
            "left_unmatched_share": round(1 - len(linked_left) / max(1, len(lt)), 4),
            "distinct_keys_left": int(lt["key"].nunique()),
            "max_left_per_key": int(lt["key"].value_counts().max()) if len(lt) else 0,
            "left_delay": q(lt["arrival_time"] - lt["event_time"]),
            "right_delay": q(self.right["arrival_time"] - self.right["event_time"]),
        }


# --------------------------------------------------------------------------------------------
# Time helpers
# --------------------------------------------------------------------------------------------


def _ms(td: timedelta) -> int:
    return int(round(td.total_seconds() * 1000))


def _local_midnight_ms(d: date, tz: str) -> int:
    return int(datetime.combine(d, dtime(0), ZoneInfo(tz)).timestamp() * 1000)


class _Clock:
    """Local time of epoch milliseconds in one zone, via a per-minute lookup table."""

    STEP = 60_000

    def __init__(self, tz: str, lo_ms: int, hi_ms: int):
        self.g0 = (lo_ms // self.STEP - 1) * self.STEP
        n = int((hi_ms - self.g0) // self.STEP + 2)
        grid = self.g0 + np.arange(n, dtype=np.int64) * self.STEP
        idx = pd.DatetimeIndex(grid.astype("datetime64[ms]")).tz_localize("UTC").tz_convert(tz)
        self.local_minute = (idx.hour * 60 + idx.minute).to_numpy().astype(np.int64)
        self.grid = grid

    def hour(self, ms: np.ndarray) -> np.ndarray:
        """Fractional local hour of day, in [0, 24)."""
        i = np.clip((ms - self.g0) // self.STEP, 0, len(self.local_minute) - 1)
        return (self.local_minute[i] + (ms - self.grid[i]) / self.STEP) / 60.0


def _is_night(hours: np.ndarray, night: tuple[int, int]) -> np.ndarray:
    a, b = night
    if a == b:
        return np.zeros(hours.shape, dtype=bool)
    if a < b:
        return (hours >= a) & (hours < b)
    return (hours >= a) | (hours < b)


def _ds_of(ms: np.ndarray, tz: str) -> np.ndarray:
    """Arrival date (ds) in the spec's zone, as 'YYYY-MM-DD' strings."""
    idx = pd.DatetimeIndex(np.asarray(ms, dtype=np.int64).astype("datetime64[ms]")).tz_localize("UTC")
    return idx.tz_convert(tz).strftime("%Y-%m-%d").to_numpy()


# Fast text: fixed-width byte matrices, decoded in one go and split into Python strings.

_DIGITS4 = np.array([list(f"{i:04d}".encode()) for i in range(10_000)], dtype=np.uint8)
_HMS = np.array([list(f"{h:02d}:{m:02d}:{s:02d}".encode())
                 for h in range(24) for m in range(60) for s in range(60)], dtype=np.uint8)
_MILLIS = np.array([list(f".{i:03d}Z".encode()) for i in range(1000)], dtype=np.uint8)


def _texts(mat: np.ndarray) -> np.ndarray:
    """Rows of an ASCII byte matrix -> object array of str."""
    n, w = mat.shape
    if n == 0:
        return np.array([], dtype=object)
    buf = np.empty((n, w + 1), dtype=np.uint8)
    buf[:, :w] = mat
    buf[:, w] = 10
    return np.array(buf.tobytes().decode("ascii").split("\n")[:-1], dtype=object)


def _digit_matrix(x: np.ndarray, width: int) -> np.ndarray:
    """Zero-padded decimal digits of non-negative ints, ``width`` columns (must be wide enough)."""
    x = np.asarray(x, dtype=np.int64)
    cols = -(-width // 4) * 4
    out = np.empty((len(x), cols), dtype=np.uint8)
    for j in range(cols // 4):
        out[:, cols - 4 * (j + 1): cols - 4 * j] = _DIGITS4[(x // 10 ** (4 * j)) % 10_000]
    return out[:, cols - width:]


def fixed_ids(prefix: str, x: np.ndarray, width: int) -> np.ndarray:
    """``prefix`` + zero-padded ``x`` (e.g. "L000000123"), as an object array of str."""
    x = np.asarray(x, dtype=np.int64)
    width = max(width, len(str(int(x.max()))) if len(x) else 1)
    p = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    mat = np.empty((len(x), len(p) + width), dtype=np.uint8)
    mat[:, : len(p)] = p
    mat[:, len(p):] = _digit_matrix(x, width)
    return _texts(mat)


def iso_ms(ms: np.ndarray) -> np.ndarray:
    """Epoch ms -> ISO-8601 UTC strings with milliseconds and 'Z' (object array of str)."""
    ms = np.asarray(ms, dtype=np.int64)
    if not len(ms):
        return np.array([], dtype=object)
    day = ms // 86_400_000
    rem = ms - day * 86_400_000
    d0 = int(day.min())
    days = np.arange(d0, int(day.max()) + 1).astype("datetime64[D]")
    dtab = np.frombuffer("".join(f"{d}T" for d in days).encode("ascii"), dtype=np.uint8)
    if len(dtab) != 11 * len(days):  # years outside 0000..9999
        return np.array([_iso1(int(v)) for v in ms], dtype=object)
    mat = np.empty((len(ms), 24), dtype=np.uint8)
    mat[:, :11] = dtab.reshape(-1, 11)[day - d0]
    mat[:, 11:19] = _HMS[rem // 1000]
    mat[:, 19:] = _MILLIS[rem % 1000]
    return _texts(mat)


def _iso1(ms: int) -> str:
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _formatter(parts: list[tuple[str, bool]]) -> Callable[..., list[str]]:
    """A fast row formatter for compact JSON objects: ``f(*columns) -> [json, ...]``.

    ``parts`` are (column name, quoted) in order; column names are plain identifiers (the spec
    checks) and quoted values are generated text that needs no JSON escaping.
    """
    for name, _ in parts:
        assert _IDENT.match(name), name
    fields = ",".join(f'"{name}":' + ('"{c%d}"' % i if quoted else "{c%d}" % i)
                      for i, (name, quoted) in enumerate(parts))
    args = ", ".join(f"c{i}" for i in range(len(parts)))
    src = f"lambda *cols: [f'{{{{{fields}}}}}' for {args}{',' if len(parts) == 1 else ''} in zip(*cols)]"
    return eval(src)  # noqa: S307 - built from identifiers only


# --------------------------------------------------------------------------------------------
# Payload vocabularies (column-name aware, with a fallback by type)
# --------------------------------------------------------------------------------------------

_QUERY_WORDS = (
    "cheap flights", "weather", "pizza near me", "news", "football scores", "recipes", "jobs",
    "hotels", "movie times", "python tutorial", "translate", "maps", "bank login", "stock price",
    "running shoes", "laptop deals", "concert tickets", "pharmacy hours", "car rental", "yoga",
    "electric bikes", "holiday gifts", "black friday", "tax calculator", "coffee shop", "gym",
    "vegan cake", "winter jacket", "train schedule", "phone repair", "dentist", "museum",
    "book club", "garden tools", "dog food", "piano lessons", "ski resort", "sushi", "camping",
    "headphones", "thanksgiving recipes", "flu symptoms", "used cars", "apartment rent",
)
_QUERY_MODIFIERS = ("", "best ", "cheap ", "how to ", "open now ", "2026 ", "reviews ")
_ACTIONS = (("click", 0.70), ("dwell", 0.14), ("back", 0.08), ("save", 0.05), ("share", 0.03))
_EXTRA_FIELDS = (("debug", "true"), ("client_version", '"9.4.1"'), ("experiment_id", '"exp_42"'),
                 ("trace_id", '"7f3a9c"'), ("app_build", "20261118"))
_BAD_VALUES = {
    "int": ('"abc"', '"n/a"', '"twelve"', '"12abc"', '"1O"'),
    "long": ('"abc"', '"n/a"', '"twelve"', '"12abc"'),
    "double": ('"abc"', '"n/a"', '"1,5"', '"12abc"'),
    "boolean": ('"maybe"', '"n/a"', '"yes please"'),
    "timestamp": ('"not-a-time"', '"2026-13-45T25:61:00.000Z"'),
}
#: Unparsable event times (JSON literals); None = the field is missing.
_BAD_TIMES = ('"not-a-time"', '"2026-13-45T25:61:00.000Z"', '"20/11/2026 10:15:30"', '""', "null", None)


def _zipf_pick(rng: np.random.Generator, size: int, n: int, exponent: float = 1.0) -> np.ndarray:
    w = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(w)
    return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), size - 1)


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Side:
    """Good events of one side, in event-time order (event ids follow that order)."""

    name: str
    stream: StreamSpec
    event_ms: np.ndarray                       # int64
    arrival_ms: np.ndarray                     # int64
    ids: np.ndarray                            # event id as text (object str)
    kafka_key: np.ndarray                      # object str
    typed: dict[str, np.ndarray]               # schema column -> typed values (ms for timestamps)
    text: dict[str, tuple[Any, bool]]          # schema column -> (values to print, quoted)
    values: list[str]                          # the JSON payloads


class _Generator:
    def __init__(self, params: WorkloadParams, spec: JoinSpec):
        self.p = params
        self.spec = spec
        self.tz = spec.timezone
        self.bounds = np.array(
            [_local_midnight_ms(params.start_date + timedelta(days=d), self.tz) for d in range(params.days + 1)],
            dtype=np.int64)
        self.t0, self.t_end = int(self.bounds[0]), int(self.bounds[-1])
        margin = 3 * 86_400_000
        self.clock = _Clock(self.tz, self.t0 - margin, self.t_end + margin)
        # diurnal weights per minute of the generated days
        self.minutes = np.arange(self.t0, self.t_end, 60_000, dtype=np.int64)
        h = self.clock.hour(self.minutes)
        w = 1.0 + params.diurnal_amplitude * np.cos(2 * np.pi * (h - params.diurnal_peak_hour) / 24.0)
        self.cum = np.concatenate([[0.0], np.cumsum(w)])
        self.day_minute = np.searchsorted(self.minutes, self.bounds)  # minute index of each midnight
        self.max_past_ms = _ms(spec.timestamp_validity.max_past)
        self.max_future_ms = _ms(spec.timestamp_validity.max_future)

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.p.seed, zlib.crc32(name.encode())])

    # -- time draws -------------------------------------------------------------------------

    def diurnal(self, rng: np.random.Generator, day: np.ndarray | None, n: int) -> np.ndarray:
        """``n`` event times following the diurnal curve, within ``day`` (per draw) or all days."""
        if day is None:
            lo, hi = self.cum[0], self.cum[-1]
        else:
            lo, hi = self.cum[self.day_minute[day]], self.cum[self.day_minute[day + 1]]
        u = lo + rng.random(n) * (hi - lo)
        m = np.clip(np.searchsorted(self.cum, u, side="right") - 1, 0, len(self.minutes) - 1)
        return self.minutes[m] + rng.integers(0, 60_000, n)

    @staticmethod
    def lognormal_ms(rng: np.random.Generator, median: timedelta, sigma: float, n: int) -> np.ndarray:
        return np.exp(rng.normal(np.log(max(_ms(median), 1)), sigma, n))

    # -- left -------------------------------------------------------------------------------

    def left_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.p
        rng = self.rng("left.sessions")
        n, days, k = p.left_events_per_day, p.days, p.keys_per_day
        # every key gets one event; the other n - k events go to keys by a Zipf law on rank
        rank = _zipf_pick(rng, k, (n - k) * days, p.key_zipf_exponent)
        day = np.repeat(np.arange(days), n - k)
        perm = rng.permuted(np.tile(np.arange(k, dtype=np.int64), (days, 1)), axis=1)
        key_idx = np.concatenate([np.arange(days * k, dtype=np.int64), day * k + perm[day, rank]])
        size = np.bincount(key_idx, minlength=days * k)
        start = self.diurnal(rng, np.arange(days * k) // k, days * k)
        spread = np.minimum(size * _ms(p.session_gap), _ms(p.session_max_duration))
        event_ms = start[key_idx] + np.floor(rng.random(len(key_idx)) * spread[key_idx]).astype(np.int64)
        order = np.argsort(event_ms, kind="stable")
        event_ms, key_idx = event_ms[order], key_idx[order]

        rng = self.rng("left.delay")
        delay = self.lognormal_ms(rng, p.left_delay_median, p.left_delay_sigma, len(event_ms))
        straggler = rng.random(len(event_ms)) < p.left_straggler_share
        delay[straggler] = rng.uniform(60_000, _ms(p.left_straggler_max), int(straggler.sum()))
        arrival_ms = event_ms + np.maximum(np.rint(delay).astype(np.int64), 1)
        return event_ms, arrival_ms, key_idx

    # -- right ------------------------------------------------------------------------------

    def right_events(self, left_ms: np.ndarray, left_key: np.ndarray):
        p = self.p
        rng = self.rng("right.links")
        n_left = len(left_ms)
        matched = rng.random(n_left) >= p.unmatched_share
        mult = np.minimum(rng.geometric(1.0 / p.right_per_match_mean, n_left), p.right_per_match_max)
        mult = np.where(matched, mult, 0)
        li = np.repeat(np.arange(n_left), mult)
        n = len(li)

        rng = self.rng("right.offset")
        upper = self.spec.window.upper_seconds * 1000
        off = self.lognormal_ms(rng, p.right_offset_median, p.right_offset_sigma, n)
        if upper > 0:
            over = off > upper
            off[over] = rng.uniform(0, upper, int(over.sum()))
        kind = rng.random(n)
        before = kind < p.right_before_share
        late = (kind >= p.right_before_share) & (kind < p.right_before_share + p.right_late_share)
        off[before] = -rng.uniform(1, max(_ms(p.right_before_max), 1), int(before.sum()))
        off[late] = upper + 1000 + rng.exponential(_ms(p.right_late_mean), int(late.sum()))
        off = np.rint(off).astype(np.int64)
        off = np.where(left_ms[li] + off < self.t0, -off, off)  # nothing happens before the first day
        event_ms = left_ms[li] + off
        key_idx = left_key[li]

        rng = self.rng("right.orphans")
        n_orphan = int(round(p.right_orphan_share * n))
        orphan_ms = self.diurnal(rng, None, n_orphan)
        orphan_key = p.days * p.keys_per_day + np.arange(n_orphan, dtype=np.int64)

        event_ms = np.concatenate([event_ms, orphan_ms])
        key_idx = np.concatenate([key_idx, orphan_key])
        li = np.concatenate([li, np.full(n_orphan, -1)])
        order = np.argsort(event_ms, kind="stable")
        event_ms, key_idx, li = event_ms[order], key_idx[order], li[order]

        rng = self.rng("right.delay")
        m = len(event_ms)
        night = _is_night(self.clock.hour(event_ms), p.night_hours)
        body = self.lognormal_ms(rng, p.right_delay_median, p.right_delay_sigma, m)
        body = body * np.where(night, p.night_delay_factor, 1.0)
        tail_p = np.where(night, p.right_tail_share_night, p.right_tail_share_day)
        tail = rng.random(m) < tail_p
        tail_delay = self.lognormal_ms(rng, p.right_tail_median, p.right_tail_sigma, m)
        delay = np.where(tail, tail_delay, body)
        cap = max(1000, min(_ms(p.right_delay_max), self.max_past_ms - 15 * 60_000))
        over = delay > cap
        delay[over] = rng.uniform(cap / 2, cap, int(over.sum()))
        arrival_ms = event_ms + np.clip(np.rint(delay).astype(np.int64), 1, cap)
        return event_ms, arrival_ms, key_idx, li

    # -- payloads ---------------------------------------------------------------------------

    def build_side(self, name: str, event_ms: np.ndarray, arrival_ms: np.ndarray, key_idx: np.ndarray,
                   n_keys: int, extra: dict[str, np.ndarray | None]) -> _Side:
        stream = self.spec.side(name)
        n = len(event_ms)
        rng = self.rng(f"{name}.payload")
        typed: dict[str, np.ndarray] = {}
        text: dict[str, tuple[Any, bool]] = {}
        string_id = stream.schema_[stream.id] == "string"
        ids = _ids(name, np.arange(n, dtype=np.int64), string_id)
        key_width = max(6, len(str(n_keys)))
        key_text: list[np.ndarray] = []
        for col, typ in stream.schema_.items():
            if col == stream.id:
                typed[col] = ids if string_id else np.arange(n, dtype=np.int64) + 1
                text[col] = (ids, string_id)
            elif col in stream.key:
                j = stream.key.index(col)
                if typ == "string":
                    table = fixed_ids("s" if j == 0 else f"{col[:1]}{j}_", np.arange(n_keys), key_width)
                    typed[col] = table[key_idx]
                    text[col] = (typed[col], True)
                    key_text.append(typed[col])
                else:
                    typed[col] = key_idx * (j + 1) + 1
                    text[col] = (typed[col].tolist(), False)
                    key_text.append(np.array([str(v) for v in text[col][0]], dtype=object))
            elif typ == "timestamp":
                ms = event_ms if col == stream.event_time else event_ms + rng.integers(0, 1000, n)
                typed[col] = ms
                text[col] = (iso_ms(ms), True)
            else:
                typed[col], text[col] = self.payload_column(rng, col, typ, n, extra)
        kafka_key = key_text[0]
        for more in key_text[1:]:
            kafka_key = np.array([f"{a}|{b}" for a, b in zip(kafka_key, more)], dtype=object)
        values = _formatter([(c, text[c][1]) for c in stream.schema_])(*(text[c][0] for c in stream.schema_))
        return _Side(name, stream, event_ms, arrival_ms, ids, kafka_key, typed, text, values)

    def payload_column(self, rng: np.random.Generator, col: str, typ: str, n: int,
                       extra: dict[str, np.ndarray | None]) -> tuple[np.ndarray, tuple[Any, bool]]:
        """Typed values and (printable values, quoted) of one payload column."""
        if col == "query" and typ == "string":
            vocab = np.array([f"{m}{w}" for w in _QUERY_WORDS for m in _QUERY_MODIFIERS], dtype=object)
            vocab = vocab[rng.permutation(len(vocab))]  # popularity rank
            val = vocab[_zipf_pick(rng, len(vocab), n, 1.0)]
            return val, (val, True)
        if col == "result_count" and typ in ("int", "long"):
            val = np.clip(np.rint(np.exp(rng.normal(np.log(120), 1.2, n))), 1, 100_000).astype(np.int64)
            matched = extra.get("matched")
            if matched is not None:  # zero-result searches get no clicks
                val[(~matched) & (rng.random(n) < 0.35)] = 0
            return val, (val.tolist(), False)
        if col == "action" and typ == "string":
            names = np.array([a for a, _ in _ACTIONS], dtype=object)
            val = names[rng.choice(len(_ACTIONS), size=n, p=[w for _, w in _ACTIONS])]
            return val, (val, True)
        if col == "position" and typ in ("int", "long"):
            val = np.minimum(rng.geometric(0.35, n), 50).astype(np.int64)
            cap = extra.get("max_position")
            if cap is not None:  # a click's position is within the results shown
                val = np.minimum(val, np.maximum(cap, 1))
            return val, (val.tolist(), False)
        # fallback by type
        if typ == "string":
            names = np.array([f"{col}_{i:02d}" for i in range(100)], dtype=object)
            val = names[_zipf_pick(rng, 100, n, 1.0)]
            return val, (val, True)
        if typ in ("int", "long"):
            val = rng.integers(0, 1000, n).astype(np.int64)
            return val, (val.tolist(), False)
        if typ == "double":
            val = np.round(rng.random(n) * 100, 3)
            return val, (val.tolist(), False)
        if typ == "boolean":
            val = rng.random(n) < 0.5
            return val, (np.where(val, "true", "false").astype(object), False)
        raise AssertionError(f"unhandled type {typ}")  # pragma: no cover

    # -- bad records ------------------------------------------------------------------------

    def bad_records(self, s: _Side) -> tuple[dict[str, list], dict[str, list]]:
        """Bad (and, under ``unknown_fields: ignore``, extra-field good) records of one side."""
        p, stream = self.p, s.stream
        rng = self.rng(f"{s.name}.bad")
        shares = p.bad.as_dict()
        eligible = [c for c, t in stream.schema_.items()
                    if t != "string" and c not in (stream.id, stream.event_time, *stream.key)]
        if not eligible:
            shares["bad_type"] = 0.0
        n_good = len(s.event_ms)
        total = n_good / max(1e-9, 1.0 - sum(shares.values()))
        counts = {c: int(round(shares[c] * total)) for c in BAD_CLASSES}
        # templates leave room for a later arrival without breaking timestamp validity
        slack = self.max_past_ms - (s.arrival_ms - s.event_ms)
        candidates = np.flatnonzero(slack > 12 * 60_000)
        need = sum(counts.values())
        if need > len(candidates):
            raise ValueError(f"{s.name}: not enough events to derive {need} bad records from")
        templates = rng.choice(candidates, size=need, replace=False)
        cols = list(stream.schema_)
        string_id = stream.schema_[stream.id] == "string"
        new_ids = _ids(s.name, np.arange(n_good, n_good + need), string_id)
        unknown_ignored = self.spec.unknown_fields == UnknownFields.ignore
        out: dict[str, list] = {c: [] for c in ("key", "value", "arrival_ms", "event_id", "expected_reason")}
        extra_good: dict[str, list] = {"template": [], "id": [], "arrival_ms": []}

        def literal(col: str, i: int) -> str:
            vals, quoted = s.text[col]
            return f'"{vals[i]}"' if quoted else str(vals[i])

        for pos, cls in enumerate(c for c in BAD_CLASSES for _ in range(counts[c])):
            t = int(templates[pos])
            key: str | None = s.kafka_key[t]
            if cls == "duplicate_event_id":
                out["key"].append(key)
                out["value"].append(s.values[t])
                out["arrival_ms"].append(int(s.arrival_ms[t]) + int(rng.integers(1000, 600_000)))
                out["event_id"].append(s.ids[t])
                out["expected_reason"].append(cls)
                continue
            new_id = new_ids[pos]
            arrival = int(s.arrival_ms[t]) + int(rng.integers(0, 60_000))
            fields: dict[str, str | None] = {c: literal(c, t) for c in cols}
            fields[stream.id] = f'"{new_id}"' if string_id else new_id
            event_id: str | None = new_id
            reason: str | None = cls
            if cls == "null_key":
                fields[stream.key[0]] = "null" if rng.random() < 0.6 else None
                key = None
            elif cls == "bad_event_time":
                fields[stream.event_time] = _BAD_TIMES[int(rng.integers(len(_BAD_TIMES)))]
            elif cls == "event_time_too_old":
                et = arrival - self.max_past_ms - int(rng.integers(3_600_000, 10 * 86_400_000))
                fields[stream.event_time] = f'"{_iso1(et)}"'
            elif cls == "event_time_in_future":
                et = arrival + self.max_future_ms + int(rng.integers(600_000, 3 * 86_400_000))
                fields[stream.event_time] = f'"{_iso1(et)}"'
            elif cls == "bad_type":
                col = eligible[int(rng.integers(len(eligible)))]
                choices = _BAD_VALUES[stream.schema_[col]]
                fields[col] = choices[int(rng.integers(len(choices)))]
            elif cls == "unexpected_field":
                extras = [(k, v) for k, v in _EXTRA_FIELDS if k not in stream.schema_]
                k, v = extras[int(rng.integers(len(extras)))]
                fields[k] = v
                if unknown_ignored:  # not a problem under this spec: a good event
                    reason = None
                    extra_good["template"].append(t)
                    extra_good["id"].append(new_id if string_id else int(new_id))
                    extra_good["arrival_ms"].append(arrival)
            text = "{" + ",".join(f'"{c}":{v}' for c, v in fields.items() if v is not None) + "}"
            if cls == "malformed_json":
                text, event_id = _malform(text, fields, rng), None
            out["key"].append(key)
            out["value"].append(text)
            out["arrival_ms"].append(arrival)
            out["event_id"].append(event_id)
            out["expected_reason"].append(reason)
        return out, extra_good


def _ids(side: str, seq: np.ndarray, string_id: bool) -> np.ndarray:
    """Event ids as text: "L000000123" / "R000000456" for string ids, 1-based numbers otherwise."""
    if string_id:
        return fixed_ids("L" if side == "left" else "R", seq, 9)
    return np.array([str(v + 1) for v in np.asarray(seq).tolist()], dtype=object)


def _malform(text: str, fields: dict[str, str | None], rng: np.random.Generator) -> str:
    """A value that is not a JSON object: truncated, form-encoded text, an array or a scalar."""
    u = rng.random()
    if u < 0.5:
        return text[: int(rng.integers(1, len(text) - 1))]
    plain = {k: json.loads(v) for k, v in fields.items() if v is not None}
    if u < 0.7:
        return "&".join(f"{k}={v}" for k, v in plain.items())
    if u < 0.85:
        return json.dumps(list(plain.values()), separators=(",", ":"))
    return ("null", '"server restarted"', "42", "")[int(rng.integers(4))]


def _good_frame(s: _Side, extra: dict[str, list]) -> pd.DataFrame:
    """Typed good events in arrival order (plus extra-field events kept under ``ignore``)."""
    stream = s.stream
    tmpl = np.asarray(extra["template"], dtype=np.int64)
    string_id = stream.schema_[stream.id] == "string"
    arrival = np.concatenate([s.arrival_ms, np.asarray(extra["arrival_ms"], dtype=np.int64)])
    event = np.concatenate([s.event_ms, s.event_ms[tmpl]])
    order = np.lexsort((event, arrival))

    def col(values: np.ndarray, extra_values: np.ndarray | None = None) -> np.ndarray:
        ev = values[tmpl] if extra_values is None else extra_values
        return np.concatenate([values, ev])[order]

    def ts(ms: np.ndarray) -> pd.Series:
        return pd.Series(ms.astype("datetime64[ms]")).dt.tz_localize("UTC")

    id_col = col(s.typed[stream.id], np.array(extra["id"], dtype=object if string_id else np.int64))
    data: dict[str, Any] = {
        "event_id": id_col,
        "key": col(s.kafka_key),
        "event_time": ts(event[order]),
        "arrival_time": ts(arrival[order]),
    }
    for c, typ in stream.schema_.items():
        if c in data:
            continue
        if c == stream.id:
            data[c] = id_col
        elif typ == "timestamp":
            data[c] = ts(col(s.typed[c]))
        else:
            data[c] = col(s.typed[c])
    return pd.DataFrame(data)


def generate(params: WorkloadParams, spec: JoinSpec) -> Workload:
    """Generate the workload of ``params`` for ``spec`` (pure and deterministic)."""
    g = _Generator(params, spec)
    left_ms, left_arr, left_key = g.left_events()
    right_ms, right_arr, right_key, li = g.right_events(left_ms, left_key)
    n_keys = params.days * params.keys_per_day + int((li < 0).sum())

    matched = np.zeros(len(left_ms), dtype=bool)
    matched[li[li >= 0]] = True
    left = g.build_side("left", left_ms, left_arr, left_key, n_keys, {"matched": matched})
    rc = left.typed.get("result_count")
    max_pos = np.where(li >= 0, rc[np.maximum(li, 0)], 50) if rc is not None and rc.dtype.kind == "i" else None
    right = g.build_side("right", right_ms, right_arr, right_key, n_keys, {"max_position": max_pos})

    cols: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    frames = {}
    for s in (left, right):
        bad, extra = g.bad_records(s)
        n, m = len(s.ids), len(bad["value"])
        cols["side"].append(np.full(n + m, s.name, dtype=object))
        cols["topic"].append(np.full(n + m, s.stream.topic, dtype=object))
        cols["key"].append(np.concatenate([s.kafka_key, np.array(bad["key"], dtype=object)]))
        values = np.empty(n + m, dtype=object)
        values[:n] = s.values
        values[n:] = bad["value"]
        cols["value"].append(values)
        cols["arrival_ms"].append(np.concatenate([s.arrival_ms, np.array(bad["arrival_ms"], dtype=np.int64)]))
        cols["event_id"].append(np.concatenate([s.ids, np.array(bad["event_id"], dtype=object)]))
        cols["expected_reason"].append(np.concatenate([np.full(n, None, dtype=object),
                                                       np.array(bad["expected_reason"], dtype=object)]))
        frames[s.name] = _good_frame(s, extra)

    flat = {c: np.concatenate(v) for c, v in cols.items()}
    side_code = (flat["side"] == "right").astype(np.int8)
    order = np.lexsort((np.arange(len(side_code)), side_code, flat["arrival_ms"]))
    records = pd.DataFrame({c: flat[c][order] for c in RECORD_COLUMNS})

    linked = np.flatnonzero(li >= 0)
    by_left = linked[np.lexsort((linked, li[linked]))]
    links = pd.DataFrame({"left_event_id": left.ids[li[by_left]], "right_event_id": right.ids[by_left]})
    return Workload(records=records, left=frames["left"], right=frames["right"], links=links,
                    params=params, spec=spec)


def iter_slices(records: pd.DataFrame, slice_minutes: float) -> Iterator[tuple[int, pd.DataFrame]]:
    """Cut ``records`` (sorted by ``arrival_ms``) into consecutive arrival-time slices.

    Yields ``(slice_end_ms, frame)`` for every slice from the one holding the first record to
    the one holding the last, empty slices included (simulated real time keeps ticking); a
    slice holds the records with ``slice_end_ms - slice_ms <= arrival_ms < slice_end_ms``.
    Slice boundaries are multiples of the slice length since the epoch.
    """
    if slice_minutes <= 0:
        raise ValueError("slice_minutes must be positive")
    if records.empty:
        return
    step = int(round(slice_minutes * 60_000))
    arr = records["arrival_ms"].to_numpy(dtype=np.int64)
    if np.any(np.diff(arr) < 0):
        raise ValueError("records must be sorted by arrival_ms")
    end = (int(arr[0]) // step + 1) * step
    pos = 0
    while pos < len(arr):
        nxt = int(np.searchsorted(arr, end, side="left"))
        yield end, records.iloc[pos:nxt]
        pos = nxt
        end += step


# --------------------------------------------------------------------------------------------
# Publisher
# --------------------------------------------------------------------------------------------


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """The publisher's KafkaProducer settings: batching, zstd, acks=all, idempotent (ordered)."""
    return {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "compression_type": "zstd",
        "linger_ms": 20,
        "batch_size": 256 * 1024,
        "max_request_size": 8 * 1024 * 1024,
        "enable_idempotence": True,
        "client_id": "joinshift-workload",
        **overrides,
    }


def publish(records: pd.DataFrame, bootstrap: str, *, progress: Callable[[int, int], None] | None = None,
            every: int = 50_000, producer: Any = None) -> dict[str, int]:
    """Send every record to its topic, in arrival order, with ``timestamp_ms = arrival_ms``.

    Keys and values are sent as UTF-8 (a ``None`` key stays null). The producer batches
    (linger, large batches), compresses with zstd, waits for all in-sync replicas
    (``acks='all'``) and is idempotent, so records keep their order within a partition; records
    with the same key go to the same partition (default partitioner). ``progress(sent, total)``
    is called every ``every`` records and at the end. Returns the number of records sent per
    topic; raises ``RuntimeError`` if any record could not be sent.

    Publishing slice after slice? Pass one ``producer=KafkaProducer(**producer_config(bootstrap))``
    to every call (it is flushed, not closed) instead of connecting again for each slice.
    """
    from kafka import KafkaProducer  # the generator does not need Kafka

    if records.empty:
        return {}
    topics = records["topic"].to_numpy()
    keys = [None if k is None else k.encode("utf-8") for k in records["key"].to_numpy()]
    values = [v.encode("utf-8") for v in records["value"].to_numpy()]
    stamps = records["arrival_ms"].to_numpy(dtype=np.int64).tolist()
    total = len(values)
    errors: list[BaseException] = []

    def on_error(exc: BaseException) -> None:
        errors.append(exc)

    own = producer is None
    if own:
        producer = KafkaProducer(**producer_config(bootstrap))
    try:
        for i, (topic, key, value, ts) in enumerate(zip(topics, keys, values, stamps), 1):
            producer.send(topic, value=value, key=key, timestamp_ms=ts).add_errback(on_error)
            if progress is not None and i % every == 0:
                progress(i, total)
        producer.flush()
    finally:
        if own:
            producer.close()
    if errors:
        raise RuntimeError(f"{len(errors)} of {total} records were not sent; first error: {errors[0]!r}")
    if progress is not None:
        progress(total, total)
    counts = pd.Series(topics).value_counts()
    return {str(t): int(n) for t, n in counts.sort_index().items()}


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from jobs.spec import load_spec

    ap = argparse.ArgumentParser(prog="python -m jobs.workload", description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default="include/specs/search_sessions.yaml")
    ap.add_argument("--workload", default="include/workloads/search_sessions.yaml")
    ap.add_argument("--publish", metavar="BOOTSTRAP", help="send the records to this Kafka cluster")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spec, params = load_spec(args.spec), load_workload(args.workload)
    t = time.perf_counter()
    wl = generate(params, spec)
    log.info("generated %d records in %.1fs", len(wl.records), time.perf_counter() - t)
    print(json.dumps(wl.summary(), indent=2))
    if args.publish:
        t = time.perf_counter()
        counts = publish(wl.records, args.publish,
                         progress=lambda i, n: log.info("published %d/%d", i, n))
        dt = time.perf_counter() - t
        log.info("published %s in %.1fs (%.0f records/s)", counts, dt, len(wl.records) / dt)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

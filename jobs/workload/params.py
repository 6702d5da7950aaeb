"""Parameters of a generated workload (:class:`WorkloadParams`, pydantic) and their YAML loading.

Every field has a sensible default; ``include/workloads/<pipeline>.yaml`` overrides some.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jobs.spec import Duration, read_yaml, validate_model

#: Quarantine reason codes the generator produces, one class of bad record each.
BAD_CLASSES = (
    "malformed_json",  # the value is not a JSON object
    "null_key",  # a join-key column is null or missing
    "bad_event_time",  # the event time is missing or unparsable
    "event_time_too_old",  # event_time < arrival - timestamp_validity.max_past
    "event_time_in_future",  # event_time > arrival + timestamp_validity.max_future
    "duplicate_event_id",  # same event id as a record that arrived earlier on the topic
    "bad_type",  # a (non-string, non-key, non-id, non-event-time) field of the wrong type
    "unexpected_field",  # a JSON field not in the schema
)


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


#: Most left events one workload holds (each with its clicks, in memory at once); the benches
#: generate up to 5 M a day.
MAX_LEFT_EVENTS = 100_000_000


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
        default=0.6,
        ge=0.0,
        lt=1.0,
        description="rate(h) ∝ 1 + a·cos(2π(h − peak)/24): 0 = flat, 0.6 = 4x day/night ratio",
    )
    diurnal_peak_hour: float = Field(default=20.0, ge=0.0, lt=24.0, description="local hour of peak traffic")
    night_hours: tuple[int, int] = Field(
        default=(0, 6), description="[start, end) local hours of the night (wraps, e.g. [22, 6])"
    )

    # keys and sessions
    distinct_keys_per_day: int | None = Field(
        default=None,
        ge=1,
        description="session keys per day, at most left_events_per_day (default: 85% of it); each key "
        "gets one left event and the rest go to keys by a Zipf law",
    )
    key_zipf_exponent: float = Field(
        default=0.7, ge=0.0, le=3.0, description="Zipf exponent of the extra left events per key (0 = uniform)"
    )
    session_gap: Duration = Field(
        default=timedelta(minutes=2), description="a session's searches spread over size × gap"
    )
    session_max_duration: Duration = Field(default=timedelta(hours=12), description="cap on a session's spread")

    # right events per left event, and their event times
    unmatched_share: float = Field(default=0.08, ge=0.0, le=1.0, description="share of left events with no right event")
    right_per_match_mean: float = Field(
        default=1.5, ge=1.0, le=50.0, description="mean right events per matched left (1 + geometric)"
    )
    right_per_match_max: int = Field(default=20, ge=1, description="cap on right events per left event")
    right_offset_median: Duration = Field(
        default=timedelta(seconds=20), description="median right.event_time − left.event_time (lognormal body)"
    )
    right_offset_sigma: float = Field(default=1.5, gt=0.0, le=5.0, description="lognormal sigma of that offset")
    right_before_share: float = _share(0.03, "share of right events *before* their left event")
    right_before_max: Duration = Field(default=timedelta(minutes=10), description="how far before, uniform")
    right_late_share: float = _share(0.02, "share of right events beyond the spec window's upper bound")
    right_late_mean: Duration = Field(
        default=timedelta(minutes=40), description="mean excess beyond the upper bound (exponential)"
    )
    right_orphan_share: float = _share(
        0.01, "right events with a key no left event has (lost server logs), per linked right event"
    )

    # arrival delays (arrival = Kafka record timestamp)
    left_delay_median: Duration = Field(default=timedelta(seconds=2), description="server log delay, lognormal median")
    left_delay_sigma: float = Field(default=0.7, gt=0.0, le=5.0, description="lognormal sigma of the left delay")
    left_straggler_share: float = _share(0.001, "left events from a lagging server")
    left_straggler_max: Duration = Field(default=timedelta(minutes=30), description="straggler delay, uniform from 1m")
    right_delay_median: Duration = Field(
        default=timedelta(seconds=30), description="client log delay body, lognormal median"
    )
    right_delay_sigma: float = Field(default=1.3, gt=0.0, le=5.0, description="lognormal sigma of the body")
    right_tail_share_day: float = _share(0.025, "share of right events in the hours-long tail, by day")
    right_tail_share_night: float = _share(0.08, "the same at night (local time of the event)")
    right_tail_median: Duration = Field(default=timedelta(minutes=45), description="tail delay, lognormal median")
    right_tail_sigma: float = Field(default=1.2, gt=0.0, le=5.0, description="lognormal sigma of the tail")
    night_delay_factor: float = Field(default=2.0, ge=1.0, le=100.0, description="body delay multiplier at night")
    right_delay_max: Duration = Field(
        default=timedelta(hours=24), description="cap on a good right delay (also kept below max_past)"
    )

    bad: BadShares = Field(default_factory=BadShares, description="bad-record shares per quarantine reason")

    @field_validator("night_hours")
    @classmethod
    def _hours(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not all(0 <= h <= 24 for h in v):
            raise ValueError("hours must be between 0 and 24")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadParams:
        positive = (
            "session_gap",
            "session_max_duration",
            "right_offset_median",
            "right_late_mean",
            "left_delay_median",
            "left_straggler_max",
            "right_delay_median",
            "right_tail_median",
            "right_delay_max",
        )
        for name in positive:
            if getattr(self, name).total_seconds() <= 0:
                raise ValueError(f"{name}: must be positive")
        if self.right_before_max.total_seconds() < 0:
            raise ValueError("right_before_max: must be zero or positive")
        if self.left_straggler_max < timedelta(minutes=1):
            raise ValueError("left_straggler_max: must be at least 1m")
        if self.distinct_keys_per_day is not None and self.distinct_keys_per_day > self.left_events_per_day:
            raise ValueError(f"distinct_keys_per_day: must not exceed left_events_per_day ({self.left_events_per_day})")
        if self.right_before_share + self.right_late_share > 1:
            raise ValueError("right_before_share + right_late_share: must not exceed 1")
        if self.days * self.left_events_per_day > MAX_LEFT_EVENTS:  # it was an allocation error's traceback
            raise ValueError(
                f"days x left_events_per_day: {self.days * self.left_events_per_day:,} left events; the generator "
                f"builds a workload in memory, at most {MAX_LEFT_EVENTS:,}: generate and publish it in parts"
            )
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

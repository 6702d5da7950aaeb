"""The report's input: a typed, versioned model of one pipeline-day (JSON round-trip).

:func:`jobs.report.assemble.build_report` fills it from the tables, :func:`ReportData.to_dict`
gives the JSON-able dict the renderer reads and writes as ``report.json``, and
:meth:`ReportData.from_json` reads such a file back. Every section is optional except
``pipeline`` and ``ds``; a missing (or empty) section renders as "Not available yet". Times are
seconds unless the field says ``_ms``; rates are fractions in [0, 1]; durations in ``spec`` are
texts of the duration grammar (``"10m"``, ``"[-3h, +30m]"``).

Terms follow the paper (Facebook, "Providing Streaming Joins as a Service", VLDB 2018): *match
rate* = matched left events / left events (§7.1); the *window* ``[lower, upper]`` is relative to
the left event time; *boundary deltas* are how far matched right events are from the window's
bounds (§6.5); *PT* is the estimated processing time of a stream and *PT delay* the wall clock
minus PT (§5.3, §7.4). Attribution causes: ``late_right`` / ``outside_window`` / ``left_late`` /
``not_yet_processed`` / ``other`` are reasons a left event went unmatched in the stream but not in
the baseline (records quarantined at landing are counted beside them, never joined).
The *account* splits stream − baseline into terms that add up to it: the cut-off gain (matches
through right events that landed on a day the daily baseline does not read) minus the left-late
and right-late losses minus the rest. Older reports may carry ``midnight_gain`` among the
attribution counts: it is not a miss cause and is not shown as one.

The renderer stays lenient: it also takes a plain dict (an older ``report.json``, a hand-made
one) and renders a malformed section as "Not available" with the error.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION: Final = 1


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpecSummary(_Part):
    window: str | None = None  # "[-3h, +30m]"
    left_watermark: str | None = None  # "10m"
    right_watermark: str | None = None
    join_type: str | None = None  # "left_outer"
    cardinality: str | None = None  # "1-to-n"
    baseline: str | None = None  # the variant the stream is held to
    tolerance_pp: float | None = None  # allowed shortfall, percentage points


class MatchRate(_Part):
    """One ds and variant of the history (Fig. 8)."""

    ds: str
    variant: str  # batch_1d_1d | batch_1d_2d | batch_1d_windowed | reference | stream
    left_events: int | None = None
    matched_left: int | None = None
    match_rate: float | None = None
    #: stream rows: how the run was produced ("upper bound (backlog run)", "replay-as-live (30m
    #: slices)"; "" live or unknown), jobs.storage.stream_runs.rate_label
    stream_run: str | None = None


class HourlyMatchRate(_Part):
    """One hour (of the left event time, spec's zone) of the report's ds, for one variant."""

    hour: int  # 0-23
    variant: str
    left_events: int | None = None
    matched_left: int | None = None
    match_rate: float | None = None
    #: stream rows: how the run was produced ("upper bound (backlog run)", "replay-as-live (30m
    #: slices)"; "" live or unknown), jobs.storage.stream_runs.rate_label
    stream_run: str | None = None


class Histogram(_Part):
    edges: list[float]  # len(edges) == len(counts) + 1
    counts: list[int]


class BoundaryDeltas(_Part):
    """Distances of matched right events to the window's bounds (§6.5), per windowed variant."""

    to_lower_p1: float | None = None
    to_lower_p50: float | None = None
    to_lower_p99: float | None = None
    to_upper_p1: float | None = None
    to_upper_p50: float | None = None
    to_upper_p99: float | None = None
    hist_to_lower: Histogram | None = None
    hist_to_upper: Histogram | None = None


class SweepPoint(_Part):
    """One candidate window replayed over the day (Figs. 9, 10)."""

    lower_s: float
    upper_s: float
    match_rate: float | None = None
    batch_match_rate: float | None = None
    predicted_memory_bytes: float | None = None
    output_latency_s: float | None = None
    recovery_s: float | None = None


class PTPoint(_Part):
    """One micro-batch of the PT series (Fig. 12)."""

    batch_end_ms: int
    pt_delay_ms: float | None = None
    window_batches: int | None = None
    accuracy: float | None = None


class PTSeries(_Part):
    left: list[PTPoint] | None = None
    right: list[PTPoint] | None = None


class WatermarkAdvice(_Part):
    recommended_delay_s: float | None = None
    share_behind_pt: float | None = None
    basis: str | None = None


class Attribution(_Part):
    """Why left events went unmatched in the stream but not in the baseline (gains are in ``account``)."""

    counts: dict[str, int] = {}
    by_hour: list[dict[str, int]] = []  # {"hour": 0, "late_right": 10, ...}
    samples: dict[str, list[str]] = {}  # cause -> a few left event ids
    ds: str | None = None
    baseline: str | None = None
    missed_by_stream: int | None = None
    quarantined: dict[str, int] | None = None


class Account(_Part):
    """Stream − baseline of one ds in left events: ``cutoff_gain − left_late − right_late − other
    == stream_matched − baseline_matched``; a term in pp is its count / ``left_events`` × 100.
    ``other`` = outside_window + not_yet_processed + unexplained − other_gain."""

    ds: str | None = None
    baseline: str | None = None
    left_events: int
    stream_matched: int
    baseline_matched: int
    cutoff_gain: int = 0
    left_late: int = 0
    right_late: int = 0
    other: int = 0
    outside_window: int = 0
    not_yet_processed: int = 0
    unexplained: int = 0
    other_gain: int = 0
    difference: int | None = None  # stream_matched − baseline_matched
    samples: dict[str, list[str]] = {}  # cutoff_gain / other_gain -> a few left event ids


class DeployedWindow(_Part):
    window: str | None = None
    match_rate: float | None = None
    memory_bytes: float | None = None
    output_latency_s: float | None = None  # p99 event -> output
    recovery_s: float | None = None
    left_watermark_s: float | None = None
    right_watermark_s: float | None = None
    first_answer_rate: float | None = None  # the paced engine's answers when its windows close


class FrontierPoint(_Part):
    """One candidate on the Pareto frontier (match rate vs p99 latency; memory shown)."""

    lower_s: float
    upper_s: float
    left_watermark_s: float
    right_watermark_s: float
    match_rate: float | None = None
    p99_latency_s: float | None = None
    memory_bytes: float | None = None


class Recommendation(_Part):
    window: str | None = None  # "[-2h, +30m]"
    lower_s: float | None = None
    upper_s: float | None = None
    left_watermark_s: float | None = None
    right_watermark_s: float | None = None
    predicted_match_rate: float | None = None
    baseline_match_rate: float | None = None
    target_share: float | None = None  # of the baseline match rate
    predicted_memory_bytes: float | None = None
    output_latency_s: float | None = None
    recovery_s: float | None = None
    deployed: DeployedWindow | None = None
    reasons: list[str] = []
    lateness: dict[str, dict[str, float | str | None]] | None = None  # per stream, see tradeoff.StreamLateness
    cadence: str | None = None  # what the prediction is for: "live, 1-minute trigger"
    output_latency_budget_s: float | None = None
    state_memory_budget_bytes: float | None = None
    fits_budgets: bool | None = None
    within_tolerance: bool | None = None
    tolerance_pp: float | None = None
    reference_match_rate: float | None = None  # no daily cut-off: the ceiling of a streaming join
    frontier: list[FrontierPoint] = []
    relax: list[str] = []  # which budget to relax, by how much, when nothing fits
    inputs: dict[str, str | None] = {}  # "engine": native / paced (a paced one has no watermark delays)
    chosen: DeployedWindow | None = None  # what the deployed one has of it: the paced engine's first answers


class Gate(_Part):
    suite: str
    success: bool | None = None
    evaluated: int | None = None
    failed: int | None = None
    summary: str | None = None


class Runbook(_Part):
    title: str | None = None
    path: str | None = None  # include/runbooks/<name>.md
    url: str | None = None


class ReportData(_Part):
    """One pipeline-day of the accuracy report."""

    schema_version: Literal[1] = SCHEMA_VERSION
    pipeline: str
    ds: str
    generated_at: str | None = None  # ISO-8601
    spec: SpecSummary | None = None
    match_rates: list[MatchRate] | None = None
    match_rates_hourly: list[HourlyMatchRate] | None = None  # the report's ds, per hour
    boundary_deltas: dict[str, BoundaryDeltas] | None = None
    sweep: list[SweepPoint] | None = None
    pt: PTSeries | None = None
    watermark_advice: dict[str, WatermarkAdvice] | None = None
    attribution: Attribution | None = None
    account: Account | None = None  # added within schema 1: older report.json files simply lack it
    recommendation: Recommendation | None = None
    gates: list[Gate] | None = None
    quarantine: dict[str, dict[str, int]] | None = None  # side -> reason -> count
    runbooks: list[Runbook] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict the renderer reads: the fields that were set, plus the version."""
        return {
            "schema_version": self.schema_version,
            **self.model_dump(mode="json", exclude_unset=True, exclude={"schema_version"}),
        }

    def to_json(self) -> str:
        return self.model_dump_json(exclude_unset=True, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReportData:
        return cls.model_validate_json(text)


#: section name -> its type, for validating sections one at a time (assembly keeps the others
#: when one fails).
SECTION_TYPES = {
    name: f.annotation
    for name, f in ReportData.model_fields.items()
    if name not in ("schema_version", "pipeline", "ds", "generated_at")
}

"""The cut-over gate's pure core: each SLO check, the streak of days met, promotion and rollback."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from jobs.operate import gate
from jobs.operate.gate import FAILED, MET, NOT_MEASURED, GateRefused, Measurements, Slo

SLO = Slo(
    baseline="batch_1d_windowed",
    tolerance_pp=1.5,
    max_unexplained_pp=0.5,
    max_restarts_per_day=3,
    max_latency_s=None,
    days_required=3,
)
D = date(2026, 11, 16)


def good(ds: date, **over) -> Measurements:
    values = dict(
        left_events=1000, stream_rate=0.93, baseline_rate=0.935, unexplained=2, lost=0, late_dropped=1, restarts=1
    )
    return Measurements(ds, **{**values, **over})


def status(m: Measurements, slo: Slo = SLO) -> dict[str, str]:
    return {c.check: c.status for c in gate.evaluate_day(m, slo)}


def test_a_good_day_meets_every_check_and_latency_is_not_measured_without_a_budget():
    checks = gate.evaluate_day(good(D), SLO)
    assert [c.check for c in checks] == list(gate.CHECKS)
    assert status(good(D)) == {
        "match_rate": MET,
        "unexplained_misses": MET,
        "lost_rows": MET,
        "latency_p99": NOT_MEASURED,
        "restarts": MET,
    }
    assert gate.day_met(checks)
    assert "dropped by the watermark (counted)" in next(c.detail for c in checks if c.check == "lost_rows")


def test_match_rate_below_tolerance_fails_with_the_gap_and_the_baseline():
    checks = gate.evaluate_day(good(D, stream_rate=0.914), SLO)
    assert not gate.day_met(checks)
    assert gate.why_not(checks) == "match rate -2.10 pp below batch_1d_windowed (tolerance 1.5)"
    assert status(good(D, stream_rate=0.935 - 0.015))["match_rate"] == MET  # exactly at the tolerance


@pytest.mark.parametrize(
    "over, failing",
    [
        ({"unexplained": 6}, "unexplained_misses"),  # 0.6 pp > 0.5
        ({"lost": 1}, "lost_rows"),
        ({"restarts": 4}, "restarts"),
        ({"stream_rate": None}, "match_rate"),  # not measured: cannot be verified, so not met
        ({"lost": None}, "lost_rows"),
        ({"stream_run": "backlog"}, "match_rate"),  # an upper bound: does not count toward a promotion
    ],
)
def test_each_rule_alone_breaks_the_day(over, failing):
    st = status(good(D, **over))
    assert [c for c, s in st.items() if s == FAILED] == [failing]


def test_a_backlog_day_says_its_rate_is_an_upper_bound_and_a_replay_as_live_day_counts():
    checks = gate.evaluate_day(good(D, stream_run="backlog"), SLO)
    assert gate.why_not(checks).startswith("match rate -0.50 pp is an upper bound (backlog run)")
    assert gate.day_met(gate.evaluate_day(good(D, stream_run="replay-as-live"), SLO))
    assert gate.day_met(gate.evaluate_day(good(D, stream_run="live"), SLO))


def test_a_missing_input_that_fails_several_checks_is_said_once():
    why = "no stream output or landed left events for 2026-11-16"
    notes = {c: why for c in ("unexplained_misses", "lost_rows", "latency_p99")}
    slo = Slo(**{**SLO.__dict__, "max_latency_s": 3600.0})
    m = good(D, unexplained=None, lost=None, notes=notes)
    checks = gate.evaluate_day(m, slo)
    assert [c.check for c in checks if c.status == FAILED] == ["unexplained_misses", "lost_rows", "latency_p99"]
    assert gate.why_not(checks) == why


def test_a_latency_budget_is_checked_and_unmeasured_latency_then_fails():
    slo = Slo(**{**SLO.__dict__, "max_latency_s": 3600.0})
    assert status(good(D, latency_p99_s=1800.0), slo)["latency_p99"] == MET
    assert status(good(D, latency_p99_s=4000.0), slo)["latency_p99"] == FAILED
    assert status(good(D), slo)["latency_p99"] == FAILED
    assert status(good(D, restarts=None))["restarts"] == NOT_MEASURED  # not supervised: no restarts


def days(*met: bool, start: date = D) -> dict:
    out = {}
    for i, ok in enumerate(met):
        ds = start + timedelta(days=i)
        out[ds] = gate.evaluate_day(good(ds) if ok else good(ds, stream_rate=0.914), SLO)
    return out


def test_streak_counts_back_from_the_latest_day_and_stops_at_a_failed_day():
    s = gate.streak(days(True, False, True, True))
    assert s.met == [D + timedelta(days=2), D + timedelta(days=3)]
    assert s.broken_by == D + timedelta(days=1)
    assert "match rate" in s.reason


def test_a_missing_day_breaks_the_streak():
    ev = days(True, True, True, True)
    del ev[D + timedelta(days=1)]
    s = gate.streak(ev)
    assert len(s.met) == 2 and s.broken_by is None and s.reason == f"{D + timedelta(days=1)} not evaluated"


def test_promotion_waits_for_the_required_days_and_says_which_day_failed():
    v = gate.promotion("shadow", days(False, True, True), None, SLO)
    assert not v.allowed and v.to == "canary"
    assert v.message == (
        "promotion to canary needs 3 consecutive days meeting the SLO; 2 met (2026-11-17..18); "
        "2026-11-16 failed: match rate -2.10 pp below batch_1d_windowed (tolerance 1.5)"
    )
    assert gate.promotion("shadow", days(False, True, True, True), None, SLO).allowed


def test_days_before_the_last_decision_do_not_count_again():
    ev = days(True, True, True, True)
    v = gate.promotion("canary", ev, D + timedelta(days=2), SLO)  # the promotion to canary used up to the 18th
    assert not v.allowed and v.days_met == [D + timedelta(days=3)]
    assert gate.promotion("canary", ev, None, SLO).allowed
    assert "no day evaluated after" in gate.promotion("canary", ev, D + timedelta(days=3), SLO).message


def test_stages_serving_and_the_batch_dag():
    assert gate.serving("shadow") == {"public": "batch", "canary": None}
    assert gate.serving("canary") == {"public": "batch", "canary": "stream"}
    assert gate.serving("cutover")["public"] == "stream"
    assert [gate.batch_paused(s) for s in gate.STAGES] == [False, False, False, True]
    assert gate.next_stage("cutover") == "retired" and gate.next_stage("retired") is None
    v = gate.promotion("retired", days(True, True, True), None, SLO)
    assert not v.allowed and v.to is None and "already retired" in v.message


def test_rollback_goes_back_to_shadow_or_to_an_earlier_stage_only():
    assert gate.rollback_target("retired") == "shadow"
    assert gate.rollback_target("retired", "cutover") == "cutover"
    assert gate.rollback_target("shadow") == "shadow"  # safe to repeat
    with pytest.raises(GateRefused, match="after the current stage"):
        gate.rollback_target("canary", "cutover")


def test_the_slo_comes_from_the_spec(demo_spec):
    spec = demo_spec.model_copy(
        update={
            "cutover": demo_spec.cutover.model_copy(update={"days_required": 4}),
            "budgets": demo_spec.budgets.model_copy(update={"output_latency": None}),
            "health": demo_spec.health.model_copy(update={"max_restarts_per_day": 5}),
        }
    )
    slo = Slo.of(spec)
    assert slo.days_required == 4 and slo.tolerance_pp == demo_spec.accuracy.tolerance_pp
    assert slo.baseline == demo_spec.accuracy.baseline and slo.max_latency_s is None
    assert slo.max_restarts_per_day == 5  # one threshold per rule: the health section's
    assert Slo.of(demo_spec).max_latency_s == demo_spec.budgets.output_latency.total_seconds()


def test_the_cutover_section_parses_durations_and_rejects_bad_values(demo_spec_data):
    from jobs.spec import SpecError, parse_spec

    data = demo_spec_data()
    data["cutover"] = {"days_required": 3, "max_unexplained_pp": 0.25}
    assert parse_spec(data).cutover.max_unexplained_pp == 0.25
    data["cutover"] = {"days_required": 0}
    with pytest.raises(SpecError, match="cutover.days_required"):
        parse_spec(data)


def test_the_gates_p99_latency_is_the_recommendations_p99_of_first_answers(spark):
    """990 rows answered after 30 s and 10 after 900 s: the recommendation predicts and verifies
    900 s (its p99, the upper empirical quantile); Spark's interpolated percentile said 38.7 s,
    so the gate passed a 60 s budget the recommendation said nothing fits. A later answer (the
    paced engine's second correction, revision 2) is not a first answer; its first (revision 1)
    replaced a non-match and kept its emitted_at: the non-match's latency, from the left event."""
    from datetime import UTC, datetime

    from tiny_spec import tiny_spec

    from jobs.accuracy.tradeoff import p99
    from jobs.join.columns import EMITTED_AT, REVISION, col_name
    from jobs.operate.gate_measure import latency_p99_s

    spec = tiny_spec()
    t0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    after = [30] * 990 + [900] * 10
    cols = f"{col_name('left', 't')} timestamp, {col_name('right', 't')} timestamp, {EMITTED_AT} timestamp"
    rows = [(t0, None, t0 + timedelta(seconds=s)) for s in after]
    out = spark.createDataFrame(rows, cols)
    assert latency_p99_s(out, spec) == p99(after) == 900.0
    corrected = spark.createDataFrame(
        [(*r, 0) for r in rows] + [(t0, t0, t0 + timedelta(hours=5), 2)] * 20, f"{cols}, {REVISION} int"
    )
    assert latency_p99_s(corrected, spec) == 900.0
    # first answered 60 s after its left event, its click read 4 h later
    replaced = spark.createDataFrame([(t0, t0 + timedelta(hours=4), t0 + timedelta(seconds=60), 1)], corrected.schema)
    assert latency_p99_s(replaced, spec) == 60.0
    assert latency_p99_s(out.drop(EMITTED_AT), spec) is None


def test_a_decision_that_cannot_be_recorded_leaves_the_batch_dag_as_it_was(spark, demo_spec, test_settings, tmp_path):
    """Entering retired pauses joinshift_daily before the decision is appended: when the append
    fails, the stage stays, and so must the batch DAG (a paused DAG under a stage that says it runs
    fed the public view from a table nobody refreshed)."""
    import dataclasses
    from pathlib import Path

    from jobs.operate import gate_store
    from jobs.storage.tables import Tables

    s = dataclasses.replace(test_settings, storage_root=str(tmp_path))
    spec = demo_spec.model_copy(update={"pipeline": "gate_unrecorded"})
    st, version = gate_store._read_for_decision(spark, spec, s)
    table = Path(Tables.of(spec, s).gate_decisions.removeprefix("file:"))
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("a file where the decisions table goes: the append fails")
    calls: list[bool] = []
    with pytest.raises(Exception, match=str(table.name)):
        gate_store._decide(
            spark, spec, st, version=version, action="promote", to="retired", by="t", reason="r", forced=True,
            pause_batch=calls.append, s=s,
        )  # fmt: skip
    assert calls == [True, False]  # paused, then put back

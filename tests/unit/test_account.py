"""The account of a ds (jobs.accuracy.attribution.account_ds) on tiny hand-built frames: every
left event placed in one term by hand, and the terms adding up to stream − baseline."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from tiny_spec import tiny_spec

from jobs.accuracy.attribution import Account, account_ds, check_baseline

DS = date(2026, 11, 20)
ANNOTATED = "event_id string, k string, t timestamp, _batch_id long, _dropped_late boolean"
OUTPUT = "ds date, left_event_id string, right_event_id string, right_arrival_time timestamp"


def ts(hhmm: str, day: int = 20) -> datetime:
    h, m, s = (int(x) for x in hhmm.split(":"))
    return datetime(2026, 11, day, h, m, s, tzinfo=UTC)


def _frames(spark):
    """Window [-10m, +5m]. Nine left events of ds 2026-11-20:

    L1 both match; L2 the stream matches through R2 that arrived after midnight (ds 21);
    L3 the stream matches through R3 (ds 20) and the baseline does not; L4..L7, L9 the baseline
    matches and the stream does not: L4 left behind the watermark, L5 its only partner behind
    it, L6 no partner in the window, L7 partner not read yet, L9 no cause; L8 nobody matches.
    """
    left = spark.createDataFrame(
        [
            (f"L{i}", f"k{i}", ts("12:00:00"), 1, i == 4)  # only L4 is late
            for i in range(1, 10)
        ],
        ANNOTATED,
    )
    right = spark.createDataFrame(
        [
            ("R5", "k5", ts("12:01:00"), 3, True),  # in L5's window, dropped late
            ("R6", "k6", ts("13:00:00"), 3, False),  # outside L6's window
            ("R7", "k7", ts("12:01:00"), None, False),  # in L7's window, not read yet
            ("R9", "k9", ts("12:01:00"), 3, False),  # in L9's window, read, kept
        ],
        ANNOTATED,
    )
    on20, on21 = ts("12:30:00"), ts("00:10:00", day=21)
    stream = spark.createDataFrame(
        [(DS, "L1", "R1", on20), (DS, "L2", "R2", on21), (DS, "L3", "R3", on20)]
        + [(DS, f"L{i}", None, None) for i in (4, 5, 6, 7, 8, 9)],
        OUTPUT,
    )
    baseline = spark.createDataFrame(
        [(DS, "L1", "R1", on20)]
        + [(DS, f"L{i}", f"R{i}", on20) for i in (4, 5, 6, 7, 9)]
        + [(DS, f"L{i}", None, None) for i in (2, 3, 8)],
        OUTPUT,
    )
    return left, right, stream, baseline


@pytest.mark.parametrize(
    "baseline, cutoff_gain, other_gain",
    [
        ("batch_1d_1d", 1, 1),  # reads right ds 20 only: R2 (ds 21) is behind its cut-off
        ("batch_1d_2d", 0, 2),  # reads ds 20 and 21 (upper bound > 0): no cut-off gain
    ],
)
def test_every_left_event_lands_in_one_term_and_the_terms_add_up(spark, baseline, cutoff_gain, other_gain):
    left, right, stream, base = _frames(spark)
    att = account_ds(tiny_spec(), DS, baseline, left, right, stream, base, samples=5)
    a = att.account
    assert (a.left_events, a.stream_matched, a.baseline_matched) == (9, 3, 6)
    assert (a.cutoff_gain, a.other_gain) == (cutoff_gain, other_gain)
    assert (a.left_late, a.right_late, a.outside_window, a.not_yet_processed, a.unexplained) == (1, 1, 1, 1, 1)
    assert a.other == 3 - other_gain
    assert a.difference == -3 == sum(v for _, v in a.terms())
    assert att.counts == {"left_late": 1, "late_right": 1, "outside_window": 1, "not_yet_processed": 1, "other": 1}
    assert att.samples == {
        "left_late": ["L4"],
        "late_right": ["L5"],
        "outside_window": ["L6"],
        "not_yet_processed": ["L7"],
        "other": ["L9"],
    }
    assert a.samples.get("cutoff_gain", []) == (["L2"] if cutoff_gain else [])
    assert "cutoff_gain" not in att.counts and "midnight_gain" not in att.counts
    d = att.to_dict()
    assert d["missed_by_stream"] == 5 and d["account"]["difference"] == -3 and d["account"]["other"] == a.other


def test_a_baseline_match_whose_left_event_did_not_land_on_the_ds_is_an_unexplained_miss(spark):
    """L10 is in the baseline's output of the ds (a batch table whose ds is not the arrival day)
    and not among the ds's landed left events: no cause can be found for it, and it is counted
    as unexplained in the account and in the causes alike, which add up to every miss."""
    left, right, stream, base = _frames(spark)
    base = base.unionByName(spark.createDataFrame([(DS, "L10", "R10", ts("12:30:00"))], OUTPUT))
    att = account_ds(tiny_spec(), DS, "batch_1d_2d", left, right, stream, base, samples=5)
    assert att.account.unexplained == 2 and att.counts["other"] == 2
    assert sum(att.counts.values()) == att.to_dict()["missed_by_stream"] == 6


def test_a_left_event_the_stream_has_not_read_yet_is_not_yet_processed(spark):
    """L10's partner R10 was read on time, but L10 itself not yet (no micro-batch holds it): it was
    called unexplained ("other"), which the gate counts against the stream."""
    left, right, stream, base = _frames(spark)
    left = left.unionByName(spark.createDataFrame([("L10", "k10", ts("12:00:00"), None, False)], ANNOTATED))
    right = right.unionByName(spark.createDataFrame([("R10", "k10", ts("12:01:00"), 3, False)], ANNOTATED))
    base = base.unionByName(spark.createDataFrame([(DS, "L10", "R10", ts("12:30:00"))], OUTPUT))
    stream = stream.unionByName(spark.createDataFrame([(DS, "L10", None, None)], OUTPUT))
    att = account_ds(tiny_spec(), DS, "batch_1d_2d", left, right, stream, base, samples=5)
    assert att.counts["not_yet_processed"] == 2 and sorted(att.samples["not_yet_processed"]) == ["L10", "L7"]
    assert att.counts["other"] == 1 and att.account.unexplained == 1


def test_pp_terms_are_the_counts_over_the_left_events():
    a = Account(
        ds="2026-11-20",
        baseline="batch_1d_windowed",
        left_events=2000,
        stream_matched=1905,
        baseline_matched=1900,
        cutoff_gain=30,
        left_late=4,
        right_late=16,
        outside_window=3,
        not_yet_processed=0,
        unexplained=4,
        other_gain=2,
    )
    assert a.other == 5
    assert [k for k, _ in a.terms()] == ["cutoff_gain", "left_late", "right_late", "other"]
    assert sum(a.pp(v) for _, v in a.terms()) == pytest.approx(a.pp(a.difference)) == pytest.approx(0.25)
    assert Account(**{**a.__dict__, "left_events": 0}).pp(5) == 0.0


@pytest.mark.parametrize("name", ["stream", "batch_1d", ""])
def test_a_baseline_must_be_a_variant_other_than_the_stream(name):
    with pytest.raises(ValueError, match="use one of batch_1d_1d, batch_1d_2d, batch_1d_windowed"):
        check_baseline(name)
    assert check_baseline("batch_1d_2d") == "batch_1d_2d"


def test_the_printed_account_shows_terms_that_sum_to_the_difference():
    from rich.console import Console

    from jobs.accuracy.attribution import Attribution
    from jobs.report.attribution_view import render_account

    a = Account(
        ds="2026-11-20",
        baseline="batch_1d_1d",
        left_events=1000,
        stream_matched=905,
        baseline_matched=920,
        cutoff_gain=12,
        left_late=3,
        right_late=20,
        outside_window=5,
        not_yet_processed=0,
        unexplained=1,
        other_gain=2,
        samples={"cutoff_gain": ["L42"]},
    )
    counts = {"left_late": 3, "late_right": 20, "outside_window": 5, "not_yet_processed": 0, "other": 1}
    att = Attribution(account=a, counts=counts, by_hour=[], samples={"late_right": ["L7"]}).to_dict()
    console = Console(record=True, width=200)
    console.print(render_account(att))
    out = console.export_text()
    for text in ("+12", "-3", "-20", "-4", "= stream − baseline", "-15", "-1.500", "92.000%", "90.500%", "L42", "L7"):
        assert text in out, text
    assert "other_gain" in out and "not a cause" not in out
    causes = out[out.index("miss causes") :]
    assert "gain" not in causes and "L42" not in causes  # gains are account terms, not miss causes


def test_the_paced_engine_is_judged_by_the_right_pt_its_micro_batch_ran_with(spark):
    """A paced run's progress log: no watermark, the PTs in each micro-batch's ``@paced`` entry.
    Window [-10m, +5m]: L1 (12:00) read when the right PT was 12:00 is on time, but its only
    partner R1 was read when the right PT was 12:06, past L1's window end (12:05): late right.
    L2 (12:00) read in that second micro-batch is itself late. L3's partner R3 was read on time."""
    from jobs.accuracy.attribution import classify_misses, stream_view
    from jobs.spec import Engine

    spec = tiny_spec()
    spec = spec.model_copy(update={"streaming": spec.streaming.model_copy(update={"engine": Engine.paced})})
    landed = "event_id string, k string, t timestamp, _partition int, _offset long"
    left = spark.createDataFrame(
        [("L1", "k1", ts("12:00:00"), 0, 0), ("L3", "k3", ts("12:00:00"), 0, 1), ("L2", "k2", ts("12:00:00"), 0, 2)],
        landed,
    )
    right = spark.createDataFrame(
        [("R3", "k3", ts("12:01:00"), 0, 0), ("R1", "k1", ts("12:01:00"), 0, 1), ("R2", "k2", ts("12:01:00"), 0, 2)],
        landed,
    )

    def batch(b: int, left_end: int, right_end: int, right_pt: str) -> dict:
        pt = int(ts(right_pt).timestamp() * 1000)
        start = {"left_topic": {"0": 0 if b == 0 else 2}, "right_topic": {"0": 0 if b == 0 else 1}}
        end = {
            "left_topic": {"0": left_end},
            "right_topic": {"0": right_end},
            "@paced": {"right_pt": pt, "left_pt": pt},
        }
        return {"batchId": b, "eventTime": {}, "sources": [{"startOffset": start, "endOffset": end}]}

    progress = [batch(0, 2, 1, "12:00:00"), batch(1, 3, 3, "12:06:00")]
    lv, rv = stream_view(spark, spec, left, right, progress)
    assert {r.event_id: r._dropped_late for r in lv.collect()} == {"L1": False, "L3": False, "L2": True}
    missed = lv.where(lv.event_id.isin("L1", "L2", "L3"))
    causes = {r.event_id: r.cause for r in classify_misses(spec, missed, rv).collect()}
    assert causes == {"L1": "late_right", "L2": "left_late", "L3": "other"}


def test_a_replays_fresh_checkpoint_does_not_hide_the_old_runs_micro_batches(spark):
    """The progress log holds the old run's micro-batches and then a replay's, whose fresh
    checkpoint numbers its batches from 0 again. Keyed by batch id alone, the replay's batch 0
    replaced the old run's: the records only the old run read (offsets 0, 1) read as unread
    (``not_yet_processed``). Each record gets the batch of the latest checkpoint that read it, once."""
    from jobs.accuracy.attribution import with_processing_watermark

    landed = spark.createDataFrame(
        [(f"E{o}", "k", ts("12:00:00"), 0, o) for o in range(6)],
        "event_id string, k string, t timestamp, _partition int, _offset long",
    )

    def batch(query: str, b: int, start: int, end: int, watermark: str) -> dict:
        return {
            "id": query,
            "batchId": b,
            "eventTime": {"watermark": f"2026-11-20T{watermark}.000Z"},
            "sources": [{"startOffset": {"topic": {"0": start}}, "endOffset": {"topic": {"0": end}}}],
        }

    old_run = [batch("old", 0, 0, 3, "11:00:00"), batch("old", 1, 3, 6, "11:30:00")]
    replay = [batch("replay", 0, 2, 6, "10:00:00")]
    view = with_processing_watermark(spark, landed, "topic", old_run + replay, "t", "current")
    rows = sorted((r.event_id, r._batch_id, r._watermark_ms) for r in view.collect())
    old_wm, replay_wm = (int(ts(w).timestamp() * 1000) for w in ("11:00:00", "10:00:00"))
    assert rows == [("E0", 0, old_wm), ("E1", 0, old_wm)] + [(f"E{o}", 0, replay_wm) for o in range(2, 6)]

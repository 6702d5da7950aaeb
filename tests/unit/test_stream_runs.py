"""Stream provenance: how each ds's stream output was produced, and the label its rate carries."""

from __future__ import annotations

import dataclasses
import json
from datetime import date

from rich.console import Console

from jobs.accuracy.compare import render_table
from jobs.storage.stream_runs import (
    BACKLOG,
    LIVE,
    REPLAY_AS_LIVE,
    rate_label,
    read_runs,
    record_run,
    replay_topics,
    run_of,
    topics_read,
)

D1, D2 = date(2026, 11, 19), date(2026, 11, 20)


def _settings(tmp_path):
    from jobs.settings import settings

    return dataclasses.replace(settings(), storage_root=str(tmp_path))


def test_a_backlog_run_taints_a_day_until_a_replay_as_live_run_replaces_it(tmp_path, demo_spec):
    s = _settings(tmp_path)
    assert read_runs(demo_spec, s) == {} and run_of(demo_spec, D1, s) is None
    record_run(demo_spec, [D1, D2], BACKLOG, s=s)
    record_run(demo_spec, [D2], LIVE, s=s)  # a later live increment does not clear the mark
    assert run_of(demo_spec, D2, s)["kind"] == BACKLOG
    assert rate_label(run_of(demo_spec, D1, s)) == "upper bound (backlog run)"
    record_run(demo_spec, [D2], REPLAY_AS_LIVE, slices=96, slice_minutes=30, replace=True, s=s)
    assert run_of(demo_spec, D1, s) is None  # a replay rewrites the whole output
    assert rate_label(run_of(demo_spec, D2, s)) == "replay-as-live (30m slices)"
    record_run(demo_spec, [D1], LIVE, s=s)
    assert rate_label(run_of(demo_spec, D1, s)) == "" and rate_label(None) == ""


def _metrics(ds, rate):
    return [
        {"ds": ds, "variant": v, "match_rate": rate, "to_lower_p99": 60.0, "to_upper_p99": 30.0}
        for v in ("batch_1d_windowed", "stream")
    ]


def test_compare_table_labels_a_backlog_stream_rate_an_upper_bound(tmp_path, demo_spec):
    s = _settings(tmp_path)
    record_run(demo_spec, [D1], BACKLOG, s=s)
    record_run(demo_spec, [D2], REPLAY_AS_LIVE, slices=48, slice_minutes=60, s=s)
    console = Console(width=240, record=True)
    console.print(render_table([*_metrics(D1, 0.99), *_metrics(D2, 0.93)], runs=read_runs(demo_spec, s)))
    rows = [ln.strip("│ ") for ln in console.export_text().splitlines()]
    lines = {ln.split()[0]: ln for ln in rows if ln.startswith("2026")}
    assert "upper bound (backlog run)" in lines["2026-11-19"]
    assert "replay-as-live (60m slices)" in lines["2026-11-20"]
    plain = Console(width=240, record=True)
    plain.print(render_table(_metrics(D1, 0.99)))
    assert "upper bound" not in plain.export_text()


def _progress(*topics: str) -> dict:
    return {
        "sources": [{"description": f"KafkaV2[Subscribe[{t}]]", "endOffset": json.dumps({t: {"0": 5}})} for t in topics]
    }


def test_the_topics_read_are_the_replay_topics_only_when_a_trial_read_them(demo_spec):
    own = {"left": demo_spec.left.topic, "right": demo_spec.right.topic}
    replay = replay_topics(demo_spec)
    assert topics_read(demo_spec, None) == own  # no micro-batch yet: the spec's topics
    assert topics_read(demo_spec, _progress(*own.values())) == own
    assert topics_read(demo_spec, _progress(*replay.values())) == replay  # a replay-as-live trial
    assert topics_read(demo_spec, _progress(replay["left"], own["right"])) == {
        "left": replay["left"],
        "right": own["right"],
    }

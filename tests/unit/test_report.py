"""The accuracy report renderer: pure, no Spark. Renders the example once per module."""

from __future__ import annotations

import base64
import copy
import json
import re

import pytest

from jobs.report import format as report
from jobs.report.example import example_data
from jobs.report.format import fmt_bytes, fmt_int, fmt_pct, fmt_pp, fmt_timestamp, fmt_window, parse_window
from jobs.report.recommendation_view import recommendation_sentence
from jobs.report.render import PLOTS, SECTIONS, publish_report, render_report, write_latest_pointer
from jobs.spec.duration import fmt_duration

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def data() -> dict:
    return example_data()


@pytest.fixture(scope="module")
def rendered(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "search_sessions" / data["ds"]
    files = render_report(copy.deepcopy(data), out)
    return files, files.html.read_text(encoding="utf-8")


def _section_html(html: str, sid: str) -> str:
    m = re.search(rf'<section class="card" id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"section {sid} missing"
    return m.group(1)


def _minimal(ds: str = "2026-11-20", **extra) -> dict:
    return {"pipeline": "search_sessions", "ds": ds, **extra}


def _light(data: dict, *keep: str) -> dict:
    """The example without its plot-heavy sections (faster), keeping ``keep``."""
    heavy = {"sweep", "pt", "boundary_deltas", "attribution", "match_rates"} - set(keep)
    return {k: copy.deepcopy(v) for k, v in data.items() if k not in heavy}


# ------------------------------------------------------------------ full render


def test_renders_every_file(rendered, data):
    files, _ = rendered
    assert files.html.name == "report.html" and files.json.name == "report.json"
    assert set(files.images) == set(PLOTS)
    for name, path in files.images.items():
        assert path == files.out_dir / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000
    assert json.loads(files.json.read_text(encoding="utf-8")) == data
    assert files.unavailable == ()
    assert files.status == "ok"
    assert set(files.all) == {files.html, files.json, *files.images.values()}


def test_html_is_self_contained(rendered):
    files, html = rendered
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(embedded) == len(PLOTS)
    # the embedded images are exactly the PNG files written next to the HTML
    on_disk = {p.read_bytes() for p in files.images.values()}
    assert {base64.b64decode(e) for e in embedded} == on_disk
    assert not re.search(r'(src|href)="(https?:)?//', html), "no external resources"
    assert "<link" not in html and "<script" not in html


def test_headline_numbers(rendered, data):
    _, html = rendered
    ds = data["ds"]
    rate = {r["variant"]: r["match_rate"] for r in data["match_rates"] if r["ds"] == ds}
    headline = re.search(r'<section class="hero (\w+)" id="headline">(.*?)</section>', html, re.S)
    assert headline and headline.group(1) == "ok"
    top = headline.group(2)
    assert fmt_pct(rate["stream"]) in top
    assert fmt_pct(rate["batch_1d_windowed"]) in top
    assert fmt_pp(100 * (rate["stream"] - rate["batch_1d_windowed"])) in top
    assert "within the 1.50 pp tolerance" in top
    assert fmt_int(next(r["left_events"] for r in data["match_rates"] if r["ds"] == ds)) in top
    # gate badges, all green
    for g in data["gates"]:
        assert f'<span class="badge pass">✓ {g["suite"]}</span>' in top
    assert "badge fail" not in top
    # recommendation in one sentence
    rec = data["recommendation"]
    sentence = recommendation_sentence(rec, data["spec"])
    assert sentence and sentence.startswith("Narrow the window from [-3h, +30m] to " + rec["window"])
    assert sentence in top


def test_every_section_is_rendered(rendered):
    _, html = rendered
    for sid, title in SECTIONS:
        body = _section_html(html, sid)
        assert title in body
        assert "Not available" not in body, sid
        assert f'href="#{sid}"' in html
    assert "Not available" not in html


def test_sections_show_their_numbers(rendered, data):
    _, html = rendered
    # Fig 8 table: every day and variant
    mr = _section_html(html, "match-rate")
    for r in data["match_rates"]:
        assert r["ds"] in mr and fmt_pct(r["match_rate"]) in mr
    # sweep table marks deployed and recommended windows
    sweep = _section_html(html, "window-sweep")
    assert "DEPLOYED" in sweep and "RECOMMENDED" in sweep
    assert f"All {len(data['sweep'])} windows tried" in sweep
    # boundary deltas in durations, p99 per variant
    bd = _section_html(html, "boundary-deltas")
    for v in ("stream", "batch_1d_windowed"):
        assert fmt_duration(data["boundary_deltas"][v]["to_upper_p99"]) in bd
    # PT and watermark advice
    pt = _section_html(html, "pt")
    assert fmt_duration(data["watermark_advice"]["right"]["recommended_delay_s"]) in pt
    # attribution counts and samples
    att = _section_html(html, "attribution")
    assert str(data["attribution"]["counts"]["late_right"]) in att
    assert data["attribution"]["samples"]["late_right"][0] in att
    # recommendation table formats bytes and durations
    rec = _section_html(html, "recommendation")
    assert fmt_bytes(data["recommendation"]["predicted_memory_bytes"]) in rec
    assert fmt_bytes(data["recommendation"]["deployed"]["memory_bytes"]) == "114MiB"
    # quarantine and runbooks
    q = _section_html(html, "quality")
    assert "malformed json" in q
    assert data["runbooks"][0]["path"] in _section_html(html, "runbooks")


def test_every_variant_has_a_label_and_a_colour():
    from jobs.join.variants import VARIANTS

    assert set(report.VARIANT_COLORS) == set(report.VARIANT_LABELS) == set(VARIANTS)


def test_example_data_is_json_and_deterministic():
    a, b = example_data(), example_data()
    assert a == b
    assert json.loads(json.dumps(a)) == a
    rec = a["recommendation"]
    assert rec["predicted_match_rate"] >= rec["target_share"] * rec["baseline_match_rate"]


# ------------------------------------------------------------------ degradation


def test_missing_sections_render_not_available(tmp_path):
    files = render_report(_minimal(), tmp_path)
    html = files.html.read_text(encoding="utf-8")
    assert files.images == {}
    assert not list(tmp_path.glob("*.png"))
    assert set(files.unavailable) == {sid for sid, _ in SECTIONS}
    assert files.status == "unknown"
    for sid, _ in SECTIONS:
        assert "Not available yet" in _section_html(html, sid), sid
    assert "No stream vs baseline match rate for this day yet." in html
    assert json.loads(files.json.read_text()) == _minimal()


def test_one_missing_section_leaves_the_others(tmp_path, data):
    d = copy.deepcopy(data)
    del d["sweep"]
    d["pt"] = {}  # empty counts as missing
    del d["watermark_advice"]
    files = render_report(d, tmp_path)
    html = files.html.read_text(encoding="utf-8")
    assert set(files.unavailable) == {"window-sweep", "pt"}
    assert "match_rate_vs_window" not in files.images and "pt_delay" not in files.images
    assert "Not available yet" in _section_html(html, "window-sweep")
    assert "Not available yet" in _section_html(html, "pt")
    assert "Not available" not in _section_html(html, "match-rate")
    assert (tmp_path / "match_rate_by_day.png").exists()


def test_rerender_removes_stale_plots(tmp_path, data):
    render_report(_light(data, "attribution", "match_rates"), tmp_path)
    assert (tmp_path / "attribution.png").exists()
    d = _light(data, "match_rates")
    files = render_report(d, tmp_path)
    assert not (tmp_path / "attribution.png").exists()
    assert "attribution" not in files.images
    assert (tmp_path / "match_rate_by_day.png").exists()


def test_malformed_section_does_not_crash(tmp_path):
    d = _minimal(
        match_rates=[
            {"ds": "2026-11-20", "variant": "stream", "left_events": 100, "matched_left": 90},
            {"variant": "stream"},
            "junk",
        ],
        boundary_deltas={"stream": {"hist_to_lower": {"edges": [0, 1], "counts": [1, 2, 3]}}},
        sweep=[{"lower_s": "x"}],
        pt={"left": [{"pt_delay_ms": 5}]},
        attribution={"counts": "oops"},
        recommendation={"reasons": ["no window"]},
        gates=[{"suite": "raw_left"}],
        quarantine={"left": "x"},
        runbooks=["not a dict"],
        generated_at="yesterday",
    )
    files = render_report(d, tmp_path)
    html = files.html.read_text(encoding="utf-8")
    # match rate derived from counts when match_rate is absent
    assert "90.00%" in html
    assert "Generated yesterday" in html
    assert files.html.exists()


def test_nan_and_inf_are_written_as_null(tmp_path):
    d = _minimal(
        match_rates=[{"ds": "2026-11-20", "variant": "stream", "match_rate": float("nan")}],
        recommendation={"predicted_match_rate": float("inf")},
    )
    files = render_report(d, tmp_path)
    text = files.json.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["match_rates"][0]["match_rate"] is None


def test_pipeline_and_ds_are_required(tmp_path):
    with pytest.raises(ValueError, match="ds"):
        render_report({"pipeline": "p"}, tmp_path)
    with pytest.raises(ValueError, match="pipeline"):
        render_report({"ds": "2026-11-20"}, tmp_path)


def test_headline_falls_back_to_the_latest_day(tmp_path):
    rows = [
        {"ds": "2026-11-19", "variant": v, "match_rate": r} for v, r in (("stream", 0.91), ("batch_1d_windowed", 0.92))
    ]
    files = render_report(_minimal(match_rates=rows), tmp_path)
    html = files.html.read_text(encoding="utf-8")
    assert "No match rates for 2026-11-20 yet; the numbers below are for 2026-11-19." in html
    assert "91.00%" in html and "-1.00 pp" in html


# ------------------------------------------------------------------ gates and verdict


def test_failed_gates_are_red_and_listed(tmp_path, data):
    d = _light(data)
    d["gates"][1].update(success=False, failed=3, summary="event_id not unique (41 rows)")
    files = render_report(d, tmp_path)
    html = files.html.read_text(encoding="utf-8")
    suite = d["gates"][1]["suite"]
    assert files.status == "attention"
    assert '<section class="hero attention" id="headline">' in html
    assert f'<span class="badge fail">✗ {suite}</span>' in html
    assert f"1 of {len(d['gates'])} data quality gates failed." in html
    q = _section_html(html, "quality")
    row = re.search(r'<tr class="failed">(.*?)</tr>', q, re.S)
    assert row and suite in row.group(1) and "event_id not unique" in row.group(1)
    assert '<span class="badge fail">✗ failed</span>' in row.group(1)
    assert q.count('class="failed"') == 1


def test_stream_outside_tolerance_needs_attention(tmp_path):
    rows = [
        {"ds": "2026-11-20", "variant": v, "match_rate": r} for v, r in (("stream", 0.90), ("batch_1d_windowed", 0.92))
    ]
    files = render_report(_minimal(match_rates=rows, spec={"tolerance_pp": 1.5}), tmp_path)
    html = files.html.read_text(encoding="utf-8")
    assert files.status == "attention"
    assert "2.00 pp below batch 1d, windowed, outside the 1.50 pp tolerance." in html
    assert 'class="value bad">-2.00 pp<' in html


def test_a_backlog_stream_rate_is_labelled_an_upper_bound(tmp_path):
    rows = [
        {"ds": "2026-11-20", "variant": "stream", "match_rate": 0.95, "stream_run": "upper bound (backlog run)"},
        {"ds": "2026-11-20", "variant": "batch_1d_windowed", "match_rate": 0.93},
    ]
    files = render_report(_minimal(match_rates=rows, spec={"tolerance_pp": 1.5}), tmp_path)
    html = files.html.read_text(encoding="utf-8")
    assert '<small class="stream-run">upper bound (backlog run)</small>' in html


# ------------------------------------------------------------------ latest.json and index.html


def test_latest_pointer_and_index_newest_first(tmp_path):
    root = tmp_path / "reports"
    for ds, stream in (("2026-11-19", 0.91), ("2026-11-21", 0.93), ("2026-11-20", 0.92)):
        rows = [
            {"ds": ds, "variant": "stream", "match_rate": stream},
            {"ds": ds, "variant": "batch_1d_windowed", "match_rate": 0.925},
        ]
        files = publish_report(_minimal(ds, match_rates=rows, spec={"tolerance_pp": 1.0}), root)
        assert files.html == root / "search_sessions" / ds / "report.html"
    pdir = root / "search_sessions"
    latest = json.loads((pdir / "latest.json").read_text())
    # a backfill of 2026-11-20 after 2026-11-21 does not move "latest" back
    assert latest == {"pipeline": "search_sessions", "ds": "2026-11-21", "html": "2026-11-21/report.html"}
    assert (pdir / latest["html"]).exists()
    index = (pdir / "index.html").read_text()
    links = re.findall(r'<a href="([^"]+)">', index)
    assert links == ["2026-11-21/report.html", "2026-11-20/report.html", "2026-11-19/report.html"]
    assert all((pdir / link).exists() for link in links)
    assert "93.00%" in index and "+0.50 pp" in index
    assert "needs attention" in index  # 2026-11-19: -1.50 pp, outside a 1.00 pp tolerance


def test_write_latest_pointer_on_its_own(tmp_path):
    latest = write_latest_pointer(tmp_path, "p", "2026-01-02")
    assert json.loads(latest.read_text())["ds"] == "2026-01-02"
    (tmp_path / "p" / "2026-01-05").mkdir()
    (tmp_path / "p" / "2026-01-05" / "report.html").write_text("<html></html>")
    write_latest_pointer(tmp_path, "p", "2026-01-03")
    assert json.loads(latest.read_text())["ds"] == "2026-01-05"
    index = (tmp_path / "p" / "index.html").read_text()
    assert index.index("2026-01-05") < index.index("2026-01-03")
    assert "2026-01-02" not in index  # no report.html there: only rendered days are listed
    assert "no data yet" in index  # 2026-01-05 has no report.json


# ------------------------------------------------------------------ formatting helpers


@pytest.mark.parametrize(
    "v, expected",
    [
        (0.925, "92.50%"),
        (1, "100.00%"),
        (0, "0.00%"),
        (0.92444, "92.44%"),
        (999_999 / 1_000_000, "99.99%"),  # not all: never "100.00%"
        (1 / 10_000_000, "0.01%"),  # not nothing: never "0.00%"
        (None, "—"),
        (float("nan"), "—"),
        ("x", "—"),
    ],
)
def test_fmt_pct(v, expected):
    assert fmt_pct(v) == expected


def test_fmt_pct_digits():
    assert fmt_pct(0.9957, 1) == "99.6%"
    assert fmt_pct(9_999 / 10_000, 1) == "99.9%"


@pytest.mark.parametrize(
    "v, expected",
    [
        (-0.05, "-0.05 pp"),
        (1.2, "+1.20 pp"),
        (0, "+0.00 pp"),
        (-0.001, "+0.00 pp"),
        (None, "—"),
    ],
)
def test_fmt_pp(v, expected):
    assert fmt_pp(v) == expected


@pytest.mark.parametrize(
    "v, expected",
    [
        (9000, "2h 30m"),
        (45, "45s"),
        (0, "0s"),
        (-10800, "-3h"),
        (1800, "30m"),
        (0.25, "250ms"),
        (5.5, "5.5s"),
        (125.4, "2m 5s"),
        (3725, "1h 2m"),
        (8999, "2h 30m"),
        (3599.6, "1h"),
        (86400, "1d"),
        (90000, "1d 1h"),
        (93784, "1d 2h"),
        (3600 * 24 * 7, "7d"),
        (None, "—"),
    ],
)
def test_fmt_duration(v, expected):
    assert fmt_duration(v) == expected


def test_fmt_duration_signed():
    assert fmt_duration(1800, signed=True) == "+30m"
    assert fmt_duration(-3600, signed=True) == "-1h"
    assert fmt_duration(0, signed=True) == "+0s"


@pytest.mark.parametrize(
    "v, expected",
    [
        (1.2e9, "1.12GiB"),
        (1.2e8, "114MiB"),
        (512, "512B"),
        (1536, "1.5KiB"),
        (2**20 - 1, "1024KiB"),
        (2 * 2**40, "2TiB"),
        (0, "0B"),
        (None, "—"),
    ],
)
def test_fmt_bytes(v, expected):
    assert fmt_bytes(v) == expected


def test_fmt_int_window_timestamp():
    assert fmt_int(20000) == "20,000"
    assert fmt_int(None) == "—"
    assert fmt_window(-10800, 1800) == "[-3h, +30m]"
    assert fmt_window(None, 1800) == "—"
    assert fmt_timestamp("2026-11-21T02:00:00Z") == "2026-11-21 02:00 UTC"
    assert fmt_timestamp("2026-11-21T03:00:00+01:00") == "2026-11-21 02:00 UTC"
    assert fmt_timestamp("not a time") == "not a time"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[-3h, +30m]", (-10800.0, 1800.0)),
        ("[-2h 30m, +1h]", (-9000.0, 3600.0)),
        ("[-90s, 0s]", (-90.0, 0.0)),
        ("[-2h, +1h30m]", (-7200.0, 5400.0)),
        ("-3h", None),
        ("[a, b]", None),
        ("[-3x, 1h]", None),
        (None, None),
    ],
)
def test_parse_window(text, expected):
    assert parse_window(text) == expected


def test_a_paced_recommendation_shows_its_first_answers_and_no_watermark_delays():
    """The paced engine waits for PTs: its section has no delays to change (none were chosen), and
    its first answers beside the final match rate."""
    from jobs.report.recommendation_view import frontier_rows, recommendation_model

    point = {"lower_s": -600, "upper_s": 1800, "left_watermark_s": 0, "right_watermark_s": 0, "match_rate": 0.93}
    rec = {
        "window": "[-10m, +30m]",
        **point,
        "predicted_match_rate": 0.93,
        "chosen": {"first_answer_rate": 0.925},
        "deployed": {"window": "[-3h, +30m]", "match_rate": 0.932, "first_answer_rate": 0.929},
        "frontier": [point],
        "inputs": {"engine": "paced"},
    }
    spec = {"window": "[-3h, +30m]", "left_watermark": "10m", "right_watermark": "2h"}
    rows = {r["what"]: r for r in recommendation_model(rec, spec)["rows"]}
    assert "Left watermark" not in rows and "Right watermark" not in rows
    assert (rows["First answers (predicted)"]["deployed"], rows["First answers (predicted)"]["recommended"]) == (
        fmt_pct(0.929),
        fmt_pct(0.925),
    )
    assert [r["watermarks"] for r in frontier_rows(rec, None)] == ["—"]
    native = {r["what"] for r in recommendation_model({**rec, "inputs": {}}, spec)["rows"]}
    assert {"Left watermark", "Right watermark"} <= native and "First answers (predicted)" not in native


def test_recommendation_sentence_verbs():
    spec = {"window": "[-3h, +30m]"}
    assert recommendation_sentence({"window": "[-3h, +30m]"}, spec).startswith("Keep the window at [-3h, +30m]")
    assert recommendation_sentence({"lower_s": -21600, "upper_s": 1800}, spec).startswith(
        "Widen the window from [-3h, +30m] to [-6h, +30m]"
    )
    assert recommendation_sentence({"window": "[-2h, +1h30m]"}, spec).startswith("Shift the window")
    assert recommendation_sentence({"window": "[-2h, +1h]"}, spec).startswith("Narrow the window")
    assert recommendation_sentence({"window": "[-1h, +30m]"}, {}) == "Use the window [-1h, +30m]."
    full = recommendation_sentence(
        {
            "window": "[-2h, +30m]",
            "predicted_match_rate": 0.921,
            "baseline_match_rate": 0.925,
            "target_share": 0.995,
            "predicted_memory_bytes": 8e7,
            "deployed": {"window": "[-3h, +30m]", "memory_bytes": 1.2e8},
        }
    )
    assert full == (
        "Narrow the window from [-3h, +30m] to [-2h, +30m]: predicted match rate 92.10% "
        "vs 92.50% for the baseline (99.6% of it; target 99.5%), memory 114MiB → 76.3MiB."
    )
    assert recommendation_sentence(None) is None
    assert recommendation_sentence({"reasons": []}) is None


# ------------------------------------------------------------------ the typed model


def test_report_model_round_trips_through_json(data, tmp_path):
    from jobs.report.model import SCHEMA_VERSION, ReportData

    model = ReportData.model_validate(data)
    assert model.schema_version == SCHEMA_VERSION and data["schema_version"] == SCHEMA_VERSION
    assert ReportData.from_json(model.to_json()) == model
    assert model.to_dict() == data
    files = render_report(ReportData(pipeline="p", ds="2026-11-20"), tmp_path)
    assert json.loads(files.json.read_text()) == {"schema_version": SCHEMA_VERSION, "pipeline": "p", "ds": "2026-11-20"}
    with pytest.raises(ValueError):
        ReportData.model_validate({"pipeline": "p", "ds": "2026-11-20", "unknown_section": 1})


# ------------------------------------------------------------------ the account (waterfall)


def test_the_waterfall_steps_from_the_baseline_rate_to_the_stream_rate(data):
    from jobs.report.sections import account_steps

    acc = data["account"]
    rate = {r["variant"]: r for r in data["match_rates"] if r["ds"] == data["ds"]}
    steps = account_steps(acc)
    assert [s["key"] for s in steps] == ["baseline", "cutoff_gain", "left_late", "right_late", "other", "stream"]
    n = acc["left_events"]
    assert steps[0]["end"] == pytest.approx(100 * rate[acc["baseline"]]["match_rate"], abs=1e-4)
    assert steps[-1]["end"] == pytest.approx(100 * rate["stream"]["match_rate"], abs=1e-4)
    for prev, step in zip(steps[1:-1], steps[2:-1]):
        assert step["start"] == prev["end"]  # each term starts where the last one ended
    assert steps[-2]["end"] == pytest.approx(steps[-1]["end"], abs=1e-12)
    signed = [acc["cutoff_gain"], -acc["left_late"], -acc["right_late"], -acc["other"]]
    assert [s["count"] for s in steps[1:-1]] == signed
    assert sum(signed) == acc["stream_matched"] - acc["baseline_matched"] == acc["difference"]
    for s, v in zip(steps[1:-1], signed):
        assert s["end"] - s["start"] == pytest.approx(100 * v / n)
        assert s["kind"] == ("gain" if v >= 0 else "loss")


def test_the_account_section_lists_each_term_and_the_difference(rendered, data):
    _, html = rendered
    acc = data["account"]
    body = _section_html(html, "account")
    assert 'alt="waterfall' in body
    for term in ("cut-off gain", "left-late loss", "right-late loss", "other"):
        assert term in body
    assert f"{acc['cutoff_gain']:+,}" in body and f"{-acc['right_late']:+,}" in body
    assert f"{acc['difference']:+,}" in body
    assert f"{100 * acc['difference'] / acc['left_events']:+.3f}" in body
    assert acc["samples"]["cutoff_gain"][0] in body
    # gains are not miss causes
    att = _section_html(html, "attribution")
    assert "gain" not in att.lower()


def test_a_gain_in_an_older_report_is_not_shown_as_a_miss_cause(tmp_path):
    old = _minimal(
        attribution={
            "counts": {"late_right": 7, "midnight_gain": 30},
            "by_hour": [{"hour": 23, "late_right": 7, "midnight_gain": 30}],
            "samples": {"late_right": ["L1"], "midnight_gain": ["L2"]},
        }
    )
    files = render_report(old, tmp_path)
    att = _section_html(files.html.read_text(encoding="utf-8"), "attribution")
    assert "<code>L1</code>" in att and "<code>L2</code>" not in att and "midnight" not in att
    assert "account" in files.unavailable  # no account in an older report: "not available yet"


def test_an_account_whose_terms_do_not_add_up_is_not_drawn(tmp_path):
    acc = {"left_events": 100, "stream_matched": 90, "baseline_matched": 92, "cutoff_gain": 5, "right_late": 1}
    files = render_report(_minimal(account=acc), tmp_path)
    body = _section_html(files.html.read_text(encoding="utf-8"), "account")
    assert "do not add up" in body and "account" not in files.images


def test_the_recommendation_shows_its_frontier_budgets_and_the_pt_evidence(rendered, data, tmp_path):
    files, html = rendered
    assert "pareto" in files.images and files.images["pareto"].stat().st_size > 5000
    rec = _section_html(html, "recommendation")
    rec_data = data["recommendation"]
    assert f"{len(rec_data['frontier'])} candidates on the frontier" in rec
    assert "CHOSEN" in rec  # the chosen settings are on the example's frontier
    assert "live, 1-minute trigger" in rec and "p99 latency ≤ 1h" in rec
    assert "Evidence: the PT method" in rec and "the PT method would allow" in rec
    # nothing fits: the callout says which budget to relax
    hurt = copy.deepcopy(data)
    hurt["recommendation"].update(fits_budgets=False, relax=["latency 1h fits nothing; 1h 40m would"])
    out = render_report(hurt, tmp_path / "r")
    rec = _section_html(out.html.read_text(), "recommendation")
    assert "nothing fits them" in rec and "Relax a budget" in rec and "1h 40m would" in rec


def test_the_reports_quarantine_is_landings_and_the_streams_for_a_day_nothing_landed(
    spark, own_pipeline_spec, test_settings
):
    """A pipeline past its cut-over lands no more days (joinshift_daily is paused): the report's
    quarantine was empty while the stream went on quarantining."""
    from datetime import date

    from jobs.report.assemble import _quarantine
    from jobs.storage.tables import Tables

    spec = own_pipeline_spec("report_quarantine")
    tables = Tables.of(spec, test_settings)
    d1, d2 = date(2026, 11, 20), date(2026, 11, 21)

    def rows(stage: str, ds: date, reason: str, n: int) -> list[tuple]:
        return [(stage, spec.left.name, ds, reason)] * n

    data = rows("landing", d1, "malformed_json", 2) + rows("stream", d1, "malformed_json", 2)
    data += rows("stream", d2, "null_key", 3) + rows("stream", d2, "malformed_json", 1)
    spark.createDataFrame(data, "stage STRING, stream STRING, ds DATE, reason STRING").write.format("delta").mode(
        "overwrite"
    ).save(tables.quarantine)
    assert _quarantine(spark, spec, tables, d1) == {"left": {"malformed_json": 2}}  # the same records, once
    assert _quarantine(spark, spec, tables, d2) == {"left": {"null_key": 3, "malformed_json": 1}}


def test_the_average_over_days_pools_left_events_as_recommend_does():
    """A big day at 95% and a small one at 50%: 94.55% over both (matched ÷ left events), not
    72.5%, the mean of the two days' rates that the footer's gap was taken from."""
    from jobs.report.sections import match_rate_table

    rows = [
        {"ds": "2026-11-19", "variant": "stream", "left_events": 100_000, "matched_left": 95_000},
        {"ds": "2026-11-20", "variant": "stream", "left_events": 1_000, "matched_left": 500},
    ]
    table = match_rate_table({"match_rates": rows})
    assert table["avg"]["stream"] == pytest.approx(95_500 / 101_000)
    no_counts = [{"ds": r["ds"], "variant": "stream", "match_rate": r["matched_left"] / r["left_events"]} for r in rows]
    assert match_rate_table({"match_rates": no_counts})["avg"]["stream"] == pytest.approx(0.725)


def test_a_paced_recommendation_reaches_the_report_as_paced():
    """The report's recommendation section is assembled from recommend's result: the engine and
    the first answers were left behind, so a paced one showed watermark delays "changed" to 0s."""
    from jobs.accuracy.recommend import Candidate, Recommendation
    from jobs.report.assemble import _recommendation
    from jobs.report.model import Recommendation as Section
    from jobs.report.recommendation_view import recommendation_model

    def cand(lo, up, rate, first):
        return Candidate(lo, up, 0, 0, rate, rate, 1800.0, 3e6, paced=True, first_answer_rate=first)

    chosen, deployed = cand(-600, 1800, 0.93, 0.925), cand(-10800, 1800, 0.932, 0.929)
    rec = Recommendation(
        pipeline="p", days=["2026-11-20"], cadence="live", baseline="batch_1d_windowed", baseline_match_rate=0.93,
        reference_match_rate=None, reference_source="", tolerance_pp=1.0, budgets={}, chosen=chosen,
        deployed=deployed, fits_budgets=True, within_tolerance=True, frontier=[chosen], explanation=[],
        inputs={"engine": "paced"},
    )  # fmt: skip
    _, section = _recommendation(rec)
    model = Section(**section).model_dump()  # the report's typed model keeps them
    rows = {r["what"]: r for r in recommendation_model(model, {"window": "[-3h, +30m]"})["rows"]}
    assert "Left watermark" not in rows
    assert (rows["First answers (predicted)"]["deployed"], rows["First answers (predicted)"]["recommended"]) == (
        fmt_pct(0.929),
        fmt_pct(0.925),
    )

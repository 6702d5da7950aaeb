"""The "Join accuracy" page (plugins/joinshift_ui.py), an Airflow 3 UI plugin.

1. The plugin's FastAPI app through ``TestClient``, mounted under ``/joinshift`` like the
   api-server does: the overview's content for reports made by ``jobs.report.publish_report``,
   the daily-report files it links to, path traversal refused, the empty state, a broken report,
   and auth with Airflow's real SimpleAuthManager (no token → 401 or a redirect to the login page,
   a bad token → 401/403, a real JWT → 200, no permission → 403).
2. For real: ``airflow standalone`` on a free port with a temporary AIRFLOW_HOME and reports in a
   temporary storage root, headless Chromium driven by Playwright logs in through Airflow's
   login form, opens the "Join accuracy" nav entry (the page in the UI's iframe),
   checks what it shows, opens a daily report from it and takes a screenshot.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_FILE = ROOT / "plugins" / "joinshift_ui.py"
DAYS = ("2026-11-18", "2026-11-19", "2026-11-20")
PIPELINE = "search_sessions"
NEWEST = DAYS[-1]
PCT = re.compile(r"\b\d{1,3}\.\d{2}%")

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin():
    """The plugin module, loaded from its file the way Airflow's plugin manager does."""
    name = "joinshift_ui"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(PLUGIN_FILE):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PLUGIN_FILE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory) -> Path:
    """A storage root with three days of reports and a file next to (outside) the reports root."""
    from jobs.local.airflow_ui import write_example_reports

    root = tmp_path_factory.mktemp("ui-storage")
    write_example_reports(root, DAYS)
    (root / "secret.html").write_text("TOP-SECRET outside the reports root")
    (root / "reports" / PIPELINE / "escape.html").symlink_to(root / "secret.html")
    _write_gate_state(root)
    return root


def _write_gate_state(root: Path) -> None:
    """The cut-over gate's state.json as `joinshift gate` writes it: shadow, two days met of seven,
    the day before failed on its match rate."""
    from datetime import date

    from jobs.operate import gate
    from jobs.operate.gate_store import GateStatus
    from jobs.spec import load_spec, spec_path

    spec = load_spec(spec_path())
    # p99 latency 10 min: within the demo spec's budgets.output_latency
    m = {d: gate.Measurements(d, 1000, 0.93, 0.935, 1, 0, 0, 600.0, 0) for d in map(date.fromisoformat, DAYS)}
    m[date.fromisoformat(DAYS[0])] = gate.Measurements(date.fromisoformat(DAYS[0]), 1000, 0.91, 0.935, 1, 0, 0, 600.0)
    days = {d: gate.evaluate_day(x, gate.Slo.of(spec)) for d, x in m.items()}
    st = GateStatus(PIPELINE, "shadow", gate.promotion("shadow", days, None, gate.Slo.of(spec)), days, [], {
        "public": {"variant": "batch_1d_windowed", "table": "t"}, "canary": None})  # fmt: skip
    (root / "gate" / PIPELINE).mkdir(parents=True)
    (root / "gate" / PIPELINE / "state.json").write_text(json.dumps(st.as_dict(), default=str))


@pytest.fixture(scope="module")
def reports_root(storage_root) -> Path:
    return storage_root / "reports"


def _client(plugin, reports_root, *, authenticated: bool = True):
    """The plugin app mounted under /joinshift in a parent app, as the api-server mounts it."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    sub = plugin.create_app(reports_root)
    if authenticated:
        sub.dependency_overrides[plugin.require_user] = lambda: "test-user"
    parent = FastAPI()
    parent.mount(plugin.URL_PREFIX, sub)
    return TestClient(parent, follow_redirects=False)


@pytest.fixture()
def client(plugin, reports_root):
    with _client(plugin, reports_root) as c:
        yield c


@pytest.fixture()
def auth_manager(airflow_db, monkeypatch):
    """Airflow's configured auth manager (SimpleAuthManager), initialised in this process."""
    from airflow.api_fastapi.app import init_auth_manager, purge_cached_app

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "x" * 64)  # the generated one is short
    am = init_auth_manager()
    yield am
    purge_cached_app()


def _links(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


# --------------------------------------------------------------------------------------------
# 1. The FastAPI app
# --------------------------------------------------------------------------------------------


def test_plugin_registers_a_fastapi_app_and_a_nav_entry(plugin):
    from airflow.api_fastapi.app import RESERVED_URL_PREFIXES
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse
    from airflow.plugins_manager import AirflowPlugin

    cls = plugin.JoinshiftUIPlugin
    assert issubclass(cls, AirflowPlugin) and cls.name == "joinshift_ui"
    (app,) = cls.fastapi_apps
    assert app["url_prefix"] == "/joinshift" and app["app"] is plugin.app
    assert not any(app["url_prefix"].startswith(p) for p in RESERVED_URL_PREFIXES)
    (view,) = cls.external_views
    parsed = ExternalViewResponse(**view)  # what /api/v2/plugins serves to the UI
    assert parsed.name == "Join accuracy" and parsed.destination == "nav"
    assert parsed.url_route == "join-accuracy" and parsed.href == "joinshift/"
    assert not parsed.href.startswith("/")  # relative to the UI's base URL


def test_overview_shows_each_pipeline(client, reports_root):
    r = client.get("/joinshift/")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    data = json.loads((reports_root / PIPELINE / NEWEST / "report.json").read_text())

    assert f'data-pipeline="{PIPELINE}"' in html and f"latest report <b>{NEWEST}</b>" in html
    # latest match rates of every variant (the reference too), as the report formats them
    from jobs.join.variants import VARIANTS
    from jobs.report.render import fmt_pct

    latest = {r["variant"]: r["match_rate"] for r in data["match_rates"] if r["ds"] == NEWEST}
    assert set(latest) == set(VARIANTS)
    for variant, rate in latest.items():
        assert f'data-variant="{variant}"' in html
        assert fmt_pct(rate) in html
    assert '<svg class="trend"' in html and html.count("<path d=") == len(VARIANTS)  # one line per variant
    # the stream's gap to the spec's baseline and to the reference with no daily cut-off
    from jobs.report.render import fmt_pp

    baseline = data["spec"]["baseline"]
    for vs in (baseline, "reference"):
        gap = re.search(rf'data-gap="{vs}"><b>([^<]+)</b>', html)
        assert gap and gap.group(1) == fmt_pp(100 * (latest["stream"] - latest[vs])), vs
    # the newest day per hour: every hour of the report, with the stream's rate as the report formats it
    hourly = [r for r in data["match_rates_hourly"] if r["variant"] == "stream"]
    assert hourly and all(f'data-hour="{r["hour"]:02d}"' in html for r in hourly)
    row = re.search(rf'data-hour="{hourly[-1]["hour"]:02d}">(.*?)</tr>', html).group(1)
    assert fmt_pct(hourly[-1]["match_rate"]) in row
    # recommendation vs deployed window
    rec = data["recommendation"]
    assert rec["deployed"]["window"] in html and rec["window"] in html
    assert "Narrow the window from" in html
    # gates: green badges for passed suites
    for g in data["gates"]:
        assert re.search(rf'class="badge pass"[^>]*data-gate="{g["suite"]}"', html)
    # daily reports, newest first, and the pipeline's index
    day_links = [h for h in _links(html) if h.endswith("/report.html")]
    assert day_links[0] == f"reports/{PIPELINE}/{NEWEST}/report.html"  # the "open latest" button
    assert [f"reports/{PIPELINE}/{d}/report.html" for d in reversed(DAYS)] == day_links[1:]
    assert f'href="reports/{PIPELINE}/index.html"' in html
    # runbooks from the report
    for rb in data["runbooks"]:
        name = rb["path"].removeprefix("include/runbooks/")
        assert f'href="runbooks/{name}?pipeline={PIPELINE}"' in html and rb["title"] in html
    assert "No accuracy reports yet" not in html


def test_a_backlog_stream_rate_is_labelled_an_upper_bound_on_the_page(plugin):
    from jobs.report import render

    rates = [
        {"ds": "2026-11-20", "variant": "stream", "match_rate": 0.95, "stream_run": "upper bound (backlog run)"},
        {"ds": "2026-11-20", "variant": "batch_1d_windowed", "match_rate": 0.93},
    ]
    mr = plugin._match_rates({"match_rates": rates, "spec": {"baseline": "batch_1d_windowed"}}, render)
    stream = next(r for r in mr["rows"] if r["variant"] == "stream")
    assert stream["label"].endswith(" · upper bound (backlog run)")
    assert [(g["vs"], g["pp"]) for g in mr["gaps"]] == [("batch_1d_windowed", "+2.00 pp")]


def test_overview_draws_the_latest_account_as_a_waterfall(client, reports_root):
    html = client.get("/joinshift/").text
    acc = json.loads((reports_root / PIPELINE / NEWEST / "report.json").read_text())["account"]
    svg = re.search(r'<svg class="waterfall".*?</svg>', html, re.S)
    assert svg, "no waterfall on the page"
    terms = re.findall(r'data-term="(\w+)"', svg.group(0))
    assert terms == ["baseline", "cutoff_gain", "left_late", "right_late", "other", "stream"]
    n = acc["left_events"]
    assert f"{100 * acc['baseline_matched'] / n:.2f}%" in svg.group(0)
    assert f"{100 * acc['stream_matched'] / n:.2f}%" in svg.group(0)
    assert f"{100 * acc['cutoff_gain'] / n:+.2f}" in svg.group(0)
    assert f"{100 * (acc['stream_matched'] - acc['baseline_matched']) / n:+.3f} pp" in html


def test_linked_report_files_are_served(client, reports_root):
    html = client.get("/joinshift/").text
    for href in {h for h in _links(html) if h.startswith("reports/")}:
        r = client.get(f"/joinshift/{href}")
        assert r.status_code == 200, href
        path = reports_root / href.removeprefix("reports/")
        assert r.content == path.read_bytes()
    r = client.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.html")
    assert r.headers["content-type"].startswith("text/html")
    assert "daily accuracy report" in r.text and PIPELINE in r.text
    assert "frame-ancestors 'self'" in r.headers["content-security-policy"]
    r = client.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.json")
    assert r.headers["content-type"] == "application/json" and r.json()["ds"] == NEWEST
    r = client.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/match_rate_by_day.png")
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")
    assert client.get(f"/joinshift/reports/{PIPELINE}/latest.json").json()["ds"] == NEWEST


@pytest.mark.parametrize(
    "path",
    [
        "..%2Fsecret.html",
        "%2E%2E/secret.html",
        f"{PIPELINE}/..%2F..%2Fsecret.html",
        f"{PIPELINE}/{NEWEST}/%2e%2e/%2e%2e/%2e%2e/secret.html",
        "..%5Csecret.html",
        "%2Fetc%2Fpasswd",
        "%2F%2Fetc/passwd",
        f"{PIPELINE}/escape.html",  # a symlink out of the reports root
        f"{PIPELINE}/{NEWEST}/.report.json.tmp",  # hidden file
        f"{PIPELINE}/{NEWEST}",  # a folder
        f"{PIPELINE}/{NEWEST}/nope.html",  # missing
        "%00",
    ],
)
def test_path_traversal_and_other_files_are_refused(client, path):
    r = client.get(f"/joinshift/reports/{path}")
    assert r.status_code == 404, (path, r.status_code)
    assert "TOP-SECRET" not in r.text and "root:" not in r.text


def test_safe_file_rejects_dot_dot_before_touching_the_disk(plugin, reports_root):
    from fastapi import HTTPException

    for rel in ("../secret.html", f"{PIPELINE}/../../secret.html", "/etc/passwd", "a/./b.html", "a//b.html"):
        with pytest.raises(HTTPException) as e:
            plugin.safe_file(reports_root, rel, plugin.SERVED_TYPES)
        assert e.value.status_code == 404
    ok = plugin.safe_file(reports_root, f"{PIPELINE}/{NEWEST}/report.html", plugin.SERVED_TYPES)
    assert ok == (reports_root / PIPELINE / NEWEST / "report.html").resolve()
    (reports_root / "notes.txt").write_text("not a report file")
    with pytest.raises(HTTPException):
        plugin.safe_file(reports_root, "notes.txt", plugin.SERVED_TYPES)


def test_a_runbook_opened_from_a_pipeline_is_filled_with_its_values(client):
    """The page served the runbook as written: `joinshift replay --spec {spec_file}` was what people copied."""
    from jobs.operate import runbooks
    from jobs.spec import DEFAULT_SPEC

    filled = client.get(f"/joinshift/runbooks/change_the_window.md?pipeline={PIPELINE}")
    assert filled.status_code == 200
    assert "{spec_file}" not in filled.text and "{checkpoint}" not in filled.text
    assert f"--spec {DEFAULT_SPEC}" in filled.text
    first_command = runbooks.commands(runbooks.render("change_the_window", DEFAULT_SPEC))[0].line
    assert first_command.split("<")[0].strip() in filled.text
    for asked in ("", "?pipeline=nobody"):
        raw = client.get(f"/joinshift/runbooks/change_the_window.md{asked}")
        assert raw.status_code == 200 and "Shown as written" in raw.text and "{spec_file}" in raw.text
        assert "joinshift runbook change_the_window --spec &lt;your spec&gt;" in raw.text
    odd = client.get("/joinshift/runbooks/change_the_window.md?pipeline=[x](javascript:alert(1))")
    assert odd.status_code == 200 and "javascript" not in odd.text and "(not a pipeline name)" in odd.text


def test_runbook_route_serves_only_markdown_under_include_runbooks(client):
    assert client.get("/joinshift/runbooks/..%2F..%2Fpyproject.toml").status_code == 404
    assert client.get("/joinshift/runbooks/%2E%2E/specs/search_sessions.yaml").status_code == 404
    r = client.get("/joinshift/runbooks/does_not_exist.md", headers={"accept": "text/html"})
    assert r.status_code == 404 and "Join accuracy" in r.text


def test_empty_state_and_missing_folder(plugin, tmp_path):
    for root in (tmp_path / "empty", tmp_path / "missing"):
        if root.name == "empty":
            root.mkdir()
        with _client(plugin, root) as c:
            r = c.get("/joinshift/")
            assert r.status_code == 200
            assert "No accuracy reports yet — run joinshift demo or the joinshift_report DAG" in r.text
            assert c.get("/joinshift/reports/x/report.html").status_code == 404


def test_cutover_gate_panel_shows_stage_days_met_and_why_not(plugin, monkeypatch, storage_root, reports_root):
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", str(storage_root))
    settings.cache_clear()
    try:
        with _client(plugin, reports_root) as c:
            html = c.get("/joinshift/").text
    finally:
        settings.cache_clear()
    assert 'data-gate-stage="shadow"' in html
    assert re.search(r"<b data-gate-days>2/7</b>", html)
    assert f"{DAYS[0]} failed: match rate -2.50 pp below batch_1d_windowed (tolerance 1.5)" in html
    assert plugin.cutover_gate("no_such_pipeline") is None


def test_reports_root_from_settings(plugin, monkeypatch, tmp_path):
    from jobs.settings import settings

    monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", str(tmp_path / "store"))
    settings.cache_clear()
    try:
        assert plugin.default_reports_root() == tmp_path / "store" / "reports"
        # a storage root on an object store: the reports stay on this machine's disk (the local root)
        monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", "s3a://bucket/joinshift")
        monkeypatch.setenv("JOINSHIFT_LOCAL_ROOT", str(tmp_path / "local"))
        settings.cache_clear()
        assert plugin.default_reports_root() == tmp_path / "local" / "reports"
    finally:
        settings.cache_clear()


def test_a_broken_report_does_not_hide_the_others(plugin, reports_root, tmp_path):
    import shutil

    root = tmp_path / "reports"
    shutil.copytree(reports_root / PIPELINE, root / PIPELINE, symlinks=True)
    broken = root / "broken_pipeline" / NEWEST
    broken.mkdir(parents=True)
    (broken / "report.json").write_text("{not json")
    (root / "new_pipeline").mkdir()  # a folder without reports yet
    odd = root / "odd_pipeline" / NEWEST  # valid JSON, wrong shapes, markup in values
    odd.mkdir(parents=True)
    (odd / "report.json").write_text(
        json.dumps(
            {
                "pipeline": "odd_pipeline",
                "ds": NEWEST,
                "gates": {"raw_left": True},
                "runbooks": "x.md",
                "recommendation": {"window": "<b>wide</b>", "reasons": "not a list"},
                "match_rates": [
                    {"ds": "<script>alert(1)</script>", "variant": "stream", "match_rate": 0.9},
                    {"ds": NEWEST, "variant": "stream", "match_rate": "n/a"},
                    "junk",
                ],
            }
        )
    )
    with _client(plugin, root) as c:
        r = c.get("/joinshift/")
    assert r.status_code == 200
    assert 'data-pipeline="broken_pipeline"' in r.text and "could not be read" in r.text
    assert 'data-pipeline="new_pipeline"' in r.text and "no reports in this folder yet" in r.text
    assert f'data-pipeline="{PIPELINE}"' in r.text and PCT.search(r.text)
    assert 'data-pipeline="odd_pipeline"' in r.text
    assert "<script>" not in r.text and "<b>wide</b>" not in r.text and "&lt;b&gt;wide" in r.text


def test_auth_with_airflows_auth_manager(plugin, reports_root, auth_manager):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    with _client(plugin, reports_root, authenticated=False) as c:
        # no credentials: 401 for API clients, the login page for a browser, for every route
        for path in (
            "/joinshift/",
            f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.html",
            "/joinshift/reports/..%2Fsecret.html",
            "/joinshift/runbooks/backfill.md",
        ):
            r = c.get(path)
            assert r.status_code == 401, path
            assert "TOP-SECRET" not in r.text and "search_sessions" not in r.text
        r = c.get("/joinshift/", headers={"accept": "text/html,application/xhtml+xml"})
        assert r.status_code == 307
        assert r.headers["location"].startswith("/auth/login")
        assert "next=%2Fjoinshift%2F" in r.headers["location"]
        # a forged token
        r = c.get("/joinshift/", headers={"authorization": "Bearer not-a-jwt"})
        assert r.status_code in (401, 403)
        c.cookies.set("_token", "not-a-jwt")
        assert c.get("/joinshift/").status_code in (401, 403)
        c.cookies.clear()

        # a real JWT from the auth manager, as the login form sets it (cookie) or as an API client
        token = auth_manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
        r = c.get("/joinshift/", headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 200 and f'data-pipeline="{PIPELINE}"' in r.text
        c.cookies.set("_token", token)
        r = c.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.html")
        assert r.status_code == 200 and "daily accuracy report" in r.text
        assert c.get("/joinshift/reports/..%2Fsecret.html").status_code == 404

        # authenticated but not allowed to read DAG runs: a user with no role (SimpleAuthManager
        # authorizes no one without one)
        c.cookies.clear()
        nobody = auth_manager.generate_jwt(SimpleAuthManagerUser(username="nobody", role=None))
        assert c.get("/joinshift/", headers={"authorization": f"Bearer {nobody}"}).status_code == 403
        c.cookies.set("_token", nobody)
        assert c.get("/joinshift/").status_code == 403


def test_stream_health_renders_when_kafka_is_down(plugin, reports_root, tmp_path, monkeypatch):
    """A broker nobody answers at: the page still renders, with the lag the supervisor's health
    log last recorded (said so) beside the thresholds, and PT unknown."""
    from jobs.operate.health import health_log
    from jobs.settings import settings
    from jobs.spec import load_spec, spec_path

    spec = load_spec(spec_path())
    monkeypatch.setenv("JOINSHIFT_STORAGE_ROOT", str(tmp_path / "store"))
    monkeypatch.setenv("JOINSHIFT_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # nothing listens there
    settings.cache_clear()
    try:
        progress = tmp_path / "store" / "progress" / PIPELINE / "stream_join.jsonl"
        progress.parent.mkdir(parents=True)
        progress.write_text(
            json.dumps(
                {
                    "batchId": 7,
                    "timestamp": "2026-11-22T10:00:00.000Z",
                    "numInputRows": 200,
                    "durationMs": {"triggerExecution": 1000},
                    "sources": [],
                    "stateOperators": [
                        {"numRowsTotal": 1234, "memoryUsedBytes": 56789, "numRowsDroppedByWatermark": 3}
                    ],
                    "eventTime": {"watermark": "2026-11-22T07:00:00.000Z"},
                }
            )
            + "\n"
        )
        log = health_log(spec)
        log.parent.mkdir(parents=True)
        log.write_text(json.dumps({"sampled_at": "2026-11-22T10:00:05Z", "lag_left": 4321, "lag_right": 0}) + "\n")
        with _client(plugin, reports_root) as c:
            r = c.get("/joinshift/")
        assert r.status_code == 200
        html = r.text
        block = html[html.index(f'data-health="{PIPELINE}"') :]
        assert "lag from the supervisor&#39;s health log, sampled" in block
        assert "Kafka not reachable from here" in block and "PT unknown without Kafka" in block
        for check, stream, value, threshold in (
            ("lag_records", "left", "4,321", "≤ 10,000"),
            ("state_rows", "", "1,234", "≤ 5,000,000"),
            ("state_bytes", "", "55.5KiB", "≤ 1GB"),  # the spec's threshold as it is written
            ("late_drop_rate", "", "1.50%", "≤ 1.00%"),
        ):
            row = re.search(rf'data-check="{check}" data-stream="{stream}" data-status="(\w+)">(.*?)</tr>', block, re.S)
            assert row, check
            assert f'<td class="value">{value}</td><td class="threshold">{threshold}</td>' in row.group(2)
        assert 'data-check="late_drop_rate" data-stream="" data-status="warn"' in block
        assert 'data-check="pt_margin" data-stream="left" data-status="unknown"' in block
        assert f'data-pipeline="{PIPELINE}"' in html and PCT.search(html)  # the report sections too
    finally:
        settings.cache_clear()


# --------------------------------------------------------------------------------------------
# 2. Real Airflow, real browser
# --------------------------------------------------------------------------------------------


@pytest.fixture()
def standalone(airflow_db, storage_root, tmp_path, request):
    """``airflow standalone`` on a free port; always stopped (process group) at the end."""
    from jobs.local.airflow_ui import AirflowStandalone

    af = AirflowStandalone(tmp_path / "airflow-home", storage_root, password="testpass", db=airflow_db / "airflow.db")
    request.addfinalizer(af.stop)
    af.start()
    af.wait_healthy(timeout=180)
    return af


def _real_progress(request, storage_root) -> None:
    """The demo pipeline's real progress log (its streaming join over two generated days), copied
    into the UI's storage root: the page's stream health reads it (and the session's broker)."""
    import shutil

    from jobs.storage.tables import Tables

    request.getfixturevalue("demo_pipeline")  # read only
    spec, s = request.getfixturevalue("demo_spec"), request.getfixturevalue("test_settings")
    target = storage_root / "progress" / PIPELINE / "stream_join.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(Tables.of(spec, s).progress_log(), target)


def _shown_health(frame) -> dict:
    """What the page shows in its stream-health block: ``{(check, stream): (value, threshold, status)}``."""
    out = {}
    block = frame.locator(f'[data-health="{PIPELINE}"]')
    rows = block.locator("tr[data-check]")
    for i in range(rows.count()):
        row = rows.nth(i)
        key = (row.get_attribute("data-check"), row.get_attribute("data-stream"))
        cells = (row.locator("td.value").inner_text(), row.locator("td.threshold").inner_text())
        out[key] = (*cells, row.get_attribute("data-status"))
    for fact in ("last_batch_id", "watermark", "pt_left", "pt_right"):
        out[fact] = block.locator(f'[data-fact="{fact}"]').inner_text()
    return out


@pytest.mark.usefixtures("demo_pipeline")  # its real progress log (``_real_progress``)
def test_page_in_real_airflow_ui_with_chromium(storage_root, tmp_path, request):
    from jobs.local.airflow_ui import (
        chromium_page,
        cookies,
        find_chromium,
        login,
        open_plugin_in_ui,
        plugin_frame,
    )

    if not find_chromium():
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    t0 = time.monotonic()

    def lap(what: str) -> None:
        print(f"  {time.monotonic() - t0:5.1f}s {what}", flush=True)

    _real_progress(request, storage_root)
    lap("demo pipeline's progress log in place")
    af = request.getfixturevalue("standalone")
    base = af.url
    lap(f"airflow standalone healthy on {base}")

    # without logging in: nothing of the page, a 401 or the way to the login page
    with httpx.Client(base_url=base, follow_redirects=False, timeout=30, trust_env=False) as http:
        r = http.get("/joinshift/")
        assert r.status_code == 401 and PIPELINE not in r.text
        r = http.get("/joinshift/", headers={"accept": "text/html"})
        assert r.status_code == 307 and "/auth/login" in r.headers["location"]
        r = http.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.html")
        assert r.status_code == 401 and "daily accuracy report" not in r.text

    with chromium_page(width=1440, height=1000) as page:
        lap("chromium up")
        login(page, base, "admin", "testpass")
        lap("logged in")
        # the nav entry, then the page inside the UI's iframe
        nav = page.locator('a[href$="plugin/join-accuracy"]').first
        nav.wait_for(state="attached", timeout=30_000)
        nav_text = nav.text_content()
        assert "Join accur" in nav_text
        text = open_plugin_in_ui(page, base)
        lap("page open in the UI")
        assert "Join accuracy" in text and PIPELINE in text
        assert PCT.search(text), text[:500]
        frame = plugin_frame(page)
        assert frame.locator(".badge.pass[data-gate]").count() == 4
        assert frame.locator('.badge.pass[data-gate="raw_left"]').count() >= 1
        assert frame.locator("svg.trend path").count() == 5  # three baselines, the reference, the stream
        assert frame.locator('[data-gate-stage="shadow"] [data-gate-days]').inner_text() == "2/7"
        assert "failed: match rate" in frame.locator('[data-gate-stage="shadow"] [data-gate-why]').inner_text()
        assert frame.locator("svg.waterfall rect[data-term]").count() == 6  # the latest day's account
        # stream health: the demo's real stream, live from Kafka, the same values as a snapshot here
        from jobs.operate.stream_health import snapshot
        from jobs.report.health_view import health_view
        from jobs.settings import Settings

        shown = _shown_health(frame)
        spec = request.getfixturevalue("demo_spec")
        test_settings = request.getfixturevalue("test_settings")
        s = Settings(storage_root=str(storage_root), kafka_home=test_settings.kafka_home)
        expected = health_view(snapshot(spec, s, kafka_timeout_s=10))
        assert "Kafka, now" in frame.locator(f'[data-health="{PIPELINE}"] h3').inner_text()
        for r in expected["rows"]:
            if r["name"] == "batch_age":  # grows with the clock
                continue
            assert shown[(r["name"], r["stream"])] == (r["value"], r["threshold"], r["status"]), r
        for fact, value in (
            ("last_batch_id", expected["last_batch_id"]),
            ("watermark", expected["watermark"]),
            ("pt_left", expected["pt"]["left"]),
            ("pt_right", expected["pt"]["right"]),
        ):
            assert shown[fact] == value, fact
        assert shown["last_batch_id"] != "—" and shown["pt_left"] != "—" and shown["pt_right"] != "—"
        # the last micro-batch and its watermark as Spark's own checkpoint has them, not the product's reading
        from datetime import UTC, datetime

        from jobs.storage.progress import JOIN_QUERY
        from jobs.storage.tables import Tables

        ckpt = Path(Tables.of(spec, test_settings).checkpoint(JOIN_QUERY))
        committed = max(int(f.name) for f in (ckpt / "commits").iterdir() if f.name.isdigit())
        ran_with = json.loads((ckpt / "offsets" / str(committed)).read_text().splitlines()[1])
        assert shown["last_batch_id"] == str(committed)
        assert datetime.fromisoformat(shown["watermark"]) == datetime.fromtimestamp(
            ran_with["batchWatermarkMs"] / 1000, UTC
        )
        assert shown[("state_rows", "")][0] not in ("—", "0")  # the join's window state is not empty
        assert shown[("lag_records", "left")][0] == "0"  # the demo's stream read everything
        lap("stream health as the snapshot says: " + "; ".join(f"{k}={v}" for k, v in shown.items()))

        shot = tmp_path / "join_accuracy.png"
        page.screenshot(path=str(shot))
        assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000

        # a daily report link opens (inside the iframe, through the plugin, with the login cookie)
        link = frame.locator('table.days a[href$="/report.html"]').first
        href = link.get_attribute("href")
        assert href == f"reports/{PIPELINE}/{NEWEST}/report.html"
        link.click()
        page.wait_for_function(
            "(() => { try { const d = document.querySelector('iframe').contentDocument;"
            f" return d.location.pathname.endsWith('/{NEWEST}/report.html') && d.readyState === 'complete'"
            " && d.body.textContent.includes('daily accuracy report'); } catch (e) { return false; } })()",
            timeout=30_000,
        )
        page.screenshot(path=str(tmp_path / "daily_report.png"))
        lap("daily report open")

        # the same page on its own, and the API with the browser's session token
        page.goto(f"{base}/joinshift/")
        body = page.inner_text("body")
        assert PIPELINE in body and "Data quality gates".upper() in body.upper()
        page.screenshot(path=str(tmp_path / "join_accuracy_full.png"), full_page=True)
        token = cookies(page)["_token"]
    with httpx.Client(base_url=base, cookies={"_token": token}, timeout=30, trust_env=False) as http:
        assert http.get("/joinshift/").status_code == 200
        assert http.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.json").json()["ds"] == NEWEST
        for bad in ("..%2Fsecret.html", f"{PIPELINE}/..%2F..%2Fsecret.html", f"{PIPELINE}/escape.html"):
            r = http.get(f"/joinshift/reports/{bad}")
            assert r.status_code == 404 and "TOP-SECRET" not in r.text
    print(f"\nscreenshots in {tmp_path} ({time.monotonic() - t0:.0f}s with Airflow start-up)")


def test_unreadable_settings_and_unknown_paths_are_pages_that_say_so(plugin, tmp_path, monkeypatch):
    """A report file with the settings unreadable was an HTTP 500 (the overview said why); a path no
    route has was Starlette's JSON, not the page."""
    from jobs.settings import settings

    bad = tmp_path / "bad.yaml"
    bad.write_text("storage_root: [unclosed\n")
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(bad))
    settings.cache_clear()
    try:
        with _client(plugin, None) as c:
            html = {"accept": "text/html"}
            assert "The joinshift settings could not be read" in c.get("/joinshift/", headers=html).text
            r = c.get(f"/joinshift/reports/{PIPELINE}/{NEWEST}/report.html", headers=html)
            assert r.status_code == 404 and "The joinshift settings could not be read" in r.text, r.text
            r = c.get("/joinshift/nope", headers=html)
            assert (
                r.status_code == 404 and "Join accuracy" in r.text and r.headers["content-type"].startswith("text/html")
            )
    finally:
        monkeypatch.delenv("JOINSHIFT_CONFIG")
        settings.cache_clear()

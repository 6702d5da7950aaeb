"""Join accuracy: a page in the Airflow UI with the latest accuracy report of every pipeline.

An Airflow 3 plugin (``AirflowPlugin``, Airflow >= 3.1):

* ``fastapi_apps``: a FastAPI app mounted by the api-server under ``/joinshift``:

  - ``GET /joinshift/`` the overview: one section per ``<reports_root>/<pipeline>/`` folder with
    the newest day's match rates and their trend, the stream-vs-baseline verdict, the window
    recommendation against the deployed window, the data quality gates, links to the daily
    reports and to the runbooks;
  - a "Stream health" block per pipeline whose spec is in ``include/specs/``: the live snapshot
    of :mod:`jobs.operate.stream_health` (lag, state, last micro-batch, restarts, watermark vs
    PT, late drops) against the spec's ``health`` thresholds; Kafka is asked with short
    timeouts, and without it the lag the supervisor's health log last recorded is shown;
  - ``GET /joinshift/reports/<pipeline>/<ds>/report.html`` (and ``report.json``, the plot PNGs,
    ``<pipeline>/index.html``, ``latest.json``): the files ``jobs.report.publish_report``
    wrote, served read-only from the reports root; anything resolving outside it (``..``,
    absolute paths, symlinks out), hidden files and other file types are refused;
  - ``GET /joinshift/runbooks/<name>.md``: a runbook from ``include/runbooks/``, rendered.

* ``external_views``: a "Join accuracy" entry on the Airflow nav bar that opens ``joinshift/``
  inside the Airflow UI (an iframe at ``/plugin/join-accuracy``).

Auth: every route of the app depends on :func:`require_user`, which resolves the caller with
Airflow's own ``airflow.api_fastapi.core_api.security.get_user`` (a ``Authorization: Bearer``
JWT, else the UI's ``_token`` cookie, validated by the configured auth manager) and then asks
the auth manager whether the user may read DAG runs (``is_authorized_dag(GET, RUN)``: the
reports summarise the joinshift DAGs' runs). No token: 401, or for a browser (``Accept:
text/html``) a redirect to the auth manager's login page that comes back here; invalid or
expired token: 401/403; not allowed: 403.

The reports root is ``jobs.settings.settings().local_path("reports")`` (``<storage_root>/reports``
for a local storage root; reports stay on local disk for a URI root), read on each request. The
module imports only FastAPI and Airflow's plugin base class: the plugin is imported by every
Airflow process and must never break the api-server, so the project's modules are imported
inside the request handlers, and a missing reports folder, an unreadable report or a missing
project module renders as a message on the page.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

URL_PREFIX = "/joinshift"
TEMPLATE_DIR = Path(__file__).resolve().parent / "joinshift_ui_templates"
#: Days of match-rate history drawn in the trend (from the newest report's ``match_rates``).
TREND_DAYS = 14
#: Daily reports listed per pipeline (the rest through the pipeline's ``index.html``).
RECENT_REPORTS = 7
#: File types served from the reports root (what ``jobs.report`` writes).
SERVED_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
EMPTY_STATE = "No accuracy reports yet — run joinshift demo or the joinshift_report DAG."
#: Served pages are self-contained (inline CSS, data: images, no scripts); framed only by Airflow.
_CSP = (
    "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# --------------------------------------------------------------------------------------------
# Auth: Airflow's own user resolution and authorization
# --------------------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False)


async def require_user(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Any:
    """The logged-in Airflow user allowed to read DAG runs; else 401/403.

    Imported lazily: ``core_api.security`` pulls in the ORM models, which only the api-server
    (where it is already loaded) needs.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user

    user = await get_user(request=request, _oauth_token=None, bearer_credentials=bearer)
    if not get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, user=user):
        raise HTTPException(status_code=403, detail="Forbidden: reading DAG runs is required")
    return user


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


async def _auth_error(request: Request, exc: HTTPException) -> Response:
    """401 for a browser: to the login page, back here afterwards; everything else as JSON."""
    if exc.status_code == 401 and request.method == "GET" and _wants_html(request):
        try:
            from airflow.api_fastapi.app import get_auth_manager

            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(get_auth_manager().get_url_login(next_url=target), status_code=307)
        except Exception:  # no auth manager (e.g. the app outside the api-server): plain 401
            log.debug("no login redirect", exc_info=True)
    if exc.status_code == 404 and _wants_html(request):
        return HTMLResponse(
            _message_page(request, "Not found", str(exc.detail)),
            status_code=404,
            headers={"Content-Security-Policy": _CSP},
        )
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


# --------------------------------------------------------------------------------------------
# Where the files are
# --------------------------------------------------------------------------------------------


def default_reports_root() -> Path:
    """Where the report job publishes: ``Settings.local_path("reports")``, on this machine's disk
    whatever the storage root (``<storage_root>/reports`` for a local root)."""
    from jobs.settings import settings

    return settings().local_path("reports")


def _reports_root(request: Request) -> Path | None:
    override = getattr(request.app.state, "reports_root", None)
    return Path(override) if override is not None else default_reports_root()


def _project_root() -> Path:
    from jobs.settings import PROJECT_ROOT

    return Path(PROJECT_ROOT)


def safe_file(root: Path, rel: str, allowed: dict[str, str] | set[str]) -> Path:
    """``root/rel`` if it is an existing regular file inside ``root`` with an allowed suffix;
    else ``HTTPException(404)``. Refuses ``..``, empty and hidden segments, backslashes, NULs
    and absolute paths before touching the disk, and anything whose resolved path (symlinks
    followed) leaves ``root``."""
    parts = rel.split("/")
    if (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or "\x00" in rel
        or any(p in ("", ".", "..") or p.startswith(".") for p in parts)
    ):
        raise HTTPException(status_code=404, detail="No such file")
    try:
        base = root.resolve(strict=True)
        target = (base / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise HTTPException(status_code=404, detail="No such file") from None
    if not target.is_relative_to(base) or not target.is_file() or target.suffix.lower() not in allowed:
        raise HTTPException(status_code=404, detail="No such file")
    return target


# --------------------------------------------------------------------------------------------
# The overview model: reports folders in, plain values for the template out
# --------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A finite float or None (the report's rule; imported here, on request, not at plugin load)."""
    from jobs.report.format import num

    return num(v)


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _svg_number(v: float) -> str:
    return f"{v:.1f}"


def trend_chart(days: list[str], series: list[dict], width: int = 460, height: int = 170) -> dict | None:
    """The trend's geometry for the ``trend`` macro: all variants on one y-scale (percent), ds
    labels at both ends; None without data. Only numbers, the ds labels (escaped by the
    template) and the fixed variant colours go into the markup."""
    vals = [v for s in series for v in s["values"] if v is not None]
    if len(days) < 2 or not vals:
        return None
    lo, hi = min(vals), max(vals)
    margin = max((hi - lo) * 0.12, 0.0005)
    lo, hi = lo - margin, hi + margin
    left, right, top, bottom = 52, 10, 10, 24
    pw, ph = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + pw * i / (len(days) - 1)

    def y(v: float) -> float:
        return top + ph * (1 - (v - lo) / (hi - lo))

    grid = []
    for k in range(4):  # horizontal grid with percent labels
        v = lo + (hi - lo) * k / 3
        grid.append({"y": _svg_number(y(v)), "label_y": _svg_number(y(v) + 4), "label": f"{100 * v:.1f}%"})
    ticks = [
        {"x": _svg_number(x(i)), "anchor": anchor, "text": days[i]}
        for i, anchor in ((0, "start"), (len(days) - 1, "end"))
    ]
    lines = []
    for s in series:
        pts = [(x(i), y(v)) for i, v in enumerate(s["values"]) if v is not None]
        if not pts:
            continue
        d = " ".join(f"{'M' if k == 0 else 'L'}{_svg_number(px)},{_svg_number(py)}" for k, (px, py) in enumerate(pts))
        lines.append(
            {
                "d": d,
                "color": s["color"],
                "width": "2.4" if s["variant"] == "stream" else "1.6",
                "cx": _svg_number(pts[-1][0]),
                "cy": _svg_number(pts[-1][1]),
            }
        )
    return {
        "width": width,
        "height": height,
        "left": left,
        "right": width - right,
        "grid": grid,
        "ticks": ticks,
        "lines": lines,
    }


#: Short x-axis names of the waterfall's steps (the report's labels are too long for the page).
WATERFALL_NAMES = {
    "baseline": "baseline",
    "cutoff_gain": "cut-off gain",
    "left_late": "left late",
    "right_late": "right late",
    "other": "other",
    "stream": "stream",
}


def account_chart(acc: Any, width: int = 460, height: int = 200) -> dict | None:
    """The latest day's account as a waterfall for the ``waterfall`` macro: the baseline's match
    rate, each term as a floating bar from where the last one ended, the stream's rate. Steps
    come from the report's one rule (:func:`jobs.report.sections.account_steps`); the y-axis is
    zoomed to them. None without an account, or with one whose terms do not add up."""
    if not isinstance(acc, dict):
        return None
    from jobs.report.sections import account_steps

    try:
        steps = account_steps(acc)
    except (ValueError, TypeError):
        return None
    if not steps:
        return None
    levels = [v for st in steps for v in ((st["end"],) if st["kind"] == "total" else (st["start"], st["end"]))]
    lo, hi = min(levels), max(levels)
    pad = max((hi - lo) * 0.3, 0.05)
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = 52, 10, 16, 24
    pw, ph = width - left - right, height - top - bottom
    slot = pw / len(steps)

    def y(v: float) -> float:
        return top + ph * (1 - (v - lo) / (hi - lo))

    grid = []
    for k in range(4):
        v = lo + (hi - lo) * k / 3
        grid.append({"y": _svg_number(y(v)), "label_y": _svg_number(y(v) + 4), "label": f"{v:.2f}%"})
    bars, connectors = [], []
    for i, st in enumerate(steps):
        total = st["kind"] == "total"
        y0, y1 = (y(lo), y(st["end"])) if total else (y(st["start"]), y(st["end"]))
        x = left + slot * i + slot * 0.18
        bars.append(
            {
                "key": st["key"],
                "x": _svg_number(x),
                "y": _svg_number(min(y0, y1)),
                "w": _svg_number(slot * 0.64),
                "h": _svg_number(max(abs(y1 - y0), 1.0)),
                "color": st["color"],
                "cx": _svg_number(left + slot * (i + 0.5)),
                "value_y": _svg_number(min(y0, y1) - 4),
                "value": f"{st['end']:.2f}%" if total else f"{st['end'] - st['start']:+.2f}",
                "name": WATERFALL_NAMES.get(st["key"], st["key"]),
            }
        )
        if i + 1 < len(steps):
            connectors.append(
                {"x1": _svg_number(x + slot * 0.64), "x2": _svg_number(x + slot), "y": _svg_number(y(st["end"]))}
            )
    diff = steps[-1]["end"] - steps[0]["end"]
    return {
        "width": width,
        "height": height,
        "left": left,
        "right": width - right,
        "grid": grid,
        "bars": bars,
        "connectors": connectors,
        "baseline": steps[0]["label"],
        "difference": f"{diff:+.3f} pp",
        "ds": acc.get("ds"),
    }


def _q(*parts: str) -> str:
    return "/".join(quote(str(p), safe="") for p in parts)


def _run_note(variant: str, days: list[str], notes: dict[str, str]) -> str:
    """The stream's provenance on its label: " · upper bound (backlog run)" or the replay's slices."""
    shown = sorted({notes[d] for d in days if d in notes}) if variant == "stream" else []
    return f" · {' / '.join(shown)}" if shown else ""


def _match_rates(data: dict, report_mod: Any) -> dict | None:
    """Latest value, change, average and trend per variant over the last ``TREND_DAYS`` ds."""
    by_ds: dict[str, dict[str, float]] = {}
    run_notes: dict[str, str] = {}  # ds -> how the stream run was produced (a backlog rate is an upper bound)
    for r in _list(data.get("match_rates")):
        if not isinstance(r, dict) or r.get("ds") is None or r.get("variant") is None:
            continue
        rate = _num(r.get("match_rate"))
        if rate is None:
            left, matched = _num(r.get("left_events")), _num(r.get("matched_left"))
            rate = matched / left if left and matched is not None else None
        if rate is not None:
            by_ds.setdefault(str(r["ds"]), {})[str(r["variant"])] = rate
        if r.get("variant") == "stream" and r.get("stream_run"):
            run_notes[str(r["ds"])] = str(r["stream_run"])
    if not by_ds:
        return None
    days = sorted(by_ds)[-TREND_DAYS:]
    present = {v for d in days for v in by_ds[d]}
    known = list(report_mod.VARIANTS)
    variants = [v for v in known if v in present] + sorted(present - set(known))
    spec = _dict(data.get("spec"))
    baseline = str(spec.get("baseline") or "batch_1d_windowed")
    rows = []
    for v in variants:
        values = [by_ds[d].get(v) for d in days]
        known_vals = [x for x in values if x is not None]
        latest = values[-1]
        prev = next((x for x in reversed(values[:-1]) if x is not None), None)
        color = report_mod.VARIANT_COLORS.get(v, "#64748b")
        rows.append(
            {
                "variant": v,
                "label": report_mod.VARIANT_LABELS.get(v, v) + _run_note(v, days, run_notes),
                "color": color,
                "values": values,
                "latest": report_mod.fmt_pct(latest),
                "change": report_mod.fmt_pp(100 * (latest - prev)) if latest is not None and prev is not None else "—",
                "change_sign": 0
                if latest is None or prev is None
                else (1 if latest > prev else -1 if latest < prev else 0),
                "avg": report_mod.fmt_pct(sum(known_vals) / len(known_vals)) if known_vals else "—",
                "is_baseline": v == baseline,
                "is_stream": v == "stream",
            }
        )
    last = by_ds[days[-1]]
    gaps = [
        {
            "vs": v,
            "label": report_mod.VARIANT_LABELS.get(v, v),
            "pp": report_mod.fmt_pp(100 * (last["stream"] - last[v])),
        }
        for v in dict.fromkeys((baseline, "reference"))
        if "stream" in last and v in last
    ]
    return {
        "days": days,
        "first": days[0],
        "last": days[-1],
        "rows": rows,
        "gaps": gaps,
        "chart": trend_chart(days, rows),
    }


def _hourly(data: dict, report_mod: Any, baseline: str) -> dict | None:
    """The newest report's match rate per hour of the left event time: stream, baseline, reference."""
    by_hour: dict[int, dict[str, Any]] = {}
    for r in _list(data.get("match_rates_hourly")):
        if not isinstance(r, dict) or r.get("hour") is None or r.get("variant") is None:
            continue
        row = by_hour.setdefault(int(r["hour"]), {"left_events": r.get("left_events")})
        row[str(r["variant"])] = _num(r.get("match_rate"))
    if not by_hour:
        return None
    columns = list(dict.fromkeys(v for v in ("stream", baseline, "reference") if any(v in h for h in by_hour.values())))
    return {
        "columns": [
            {"variant": v, "label": report_mod.VARIANT_LABELS.get(v, v), "color": report_mod.VARIANT_COLORS.get(v)}
            for v in columns
        ],
        "rows": [
            {
                "hour": f"{h:02d}",
                "left_events": report_mod.fmt_int(row.get("left_events")),
                "rates": [report_mod.fmt_pct(row.get(v)) for v in columns],
            }
            for h, row in sorted(by_hour.items())
        ],
    }


def _recommendation(data: dict, report_mod: Any) -> dict | None:
    rec = data.get("recommendation")
    if not isinstance(rec, dict):
        return None
    spec = _dict(data.get("spec"))
    deployed = _dict(rec.get("deployed"))
    new = rec.get("window")
    if not new and _num(rec.get("lower_s")) is not None and _num(rec.get("upper_s")) is not None:
        new = report_mod.fmt_window(rec["lower_s"], rec["upper_s"])
    old = deployed.get("window") or spec.get("window")
    sentence = report_mod.recommendation_sentence(rec, spec)
    verb = sentence.split(" ", 1)[0] if sentence else None
    pred = _num(rec.get("predicted_match_rate"))
    return {
        "deployed": old or "—",
        "recommended": new or "—",
        "change": (verb or "").lower() if verb in ("Narrow", "Widen", "Shift", "Keep") else None,
        "sentence": sentence,
        "rows": [
            ("Match rate", report_mod.fmt_pct(deployed.get("match_rate")), report_mod.fmt_pct(pred)),
            (
                "Memory",
                report_mod.fmt_bytes(deployed.get("memory_bytes")),
                report_mod.fmt_bytes(rec.get("predicted_memory_bytes")),
            ),
            (
                "Output latency",
                report_mod.fmt_duration(deployed.get("output_latency_s")),
                report_mod.fmt_duration(rec.get("output_latency_s")),
            ),
        ],
        "reasons": [str(r) for r in _list(rec.get("reasons")) if r],
    }


def _gates(data: dict) -> list[dict]:
    out = []
    for g in _list(data.get("gates")):
        if not isinstance(g, dict):
            continue
        ok = g.get("success") is True
        detail = []
        if _num(g.get("evaluated")) is not None:
            detail.append(f"{int(g['evaluated'])} checks")
        if _num(g.get("failed")):
            detail.append(f"{int(g['failed'])} failed")
        out.append(
            {
                "suite": str(g.get("suite") or "gate"),
                "ok": ok,
                "unknown": g.get("success") is None,
                "title": " · ".join([str(g.get("summary") or ""), *detail]).strip(" ·"),
            }
        )
    return out


def _runbooks(data: dict) -> list[dict]:
    """``runbooks`` entries as links: URLs as they are, ``include/runbooks/<name>.md`` through
    the plugin (``runbooks/<name>.md``); ``exists`` says whether the file is in this checkout."""
    out = []
    try:
        rb_dir = _project_root() / "include" / "runbooks"
    except Exception:
        rb_dir = None
    for rb in _list(data.get("runbooks")):
        if not isinstance(rb, dict):
            continue
        path = str(rb.get("path") or rb.get("url") or "")
        title = str(rb.get("title") or path or "runbook")
        item = {"title": title, "path": path, "href": None, "exists": False, "external": False}
        if re.match(r"^https?://", path):
            item.update(href=path, exists=True, external=True)
        else:
            rel = path.removeprefix("./").removeprefix("include/runbooks/")
            if rel and all(_SAFE_NAME.match(p) for p in rel.split("/")) and rel.endswith(".md"):
                href = "runbooks/" + _q(*rel.split("/"))
                if _SAFE_NAME.match(str(data.get("pipeline") or "")):  # filled with this pipeline's values
                    href += "?pipeline=" + _q(str(data["pipeline"]))
                item["href"] = href
                item["exists"] = bool(rb_dir and (rb_dir / rel).is_file())
        out.append(item)
    return out


#: Days of the cut-over gate's evidence listed per pipeline.
GATE_DAYS = 7


def cutover_gate(pipeline: str) -> dict | None:
    """The cut-over gate's stage, days met / required and why not, from the pipeline's
    ``state.json`` (written by every ``joinshift gate`` command and the ``joinshift_gate`` DAG);
    None when the gate never ran; an ``error`` entry when the file cannot be read."""
    try:
        from jobs.settings import settings
        from jobs.storage import fs
        from jobs.storage.tables import gate_state_path

        # read from disk only: this page starts no JVM, so a gate state on an object store (a URI
        # storage root) is not shown here; `joinshift gate status` reads it through Spark
        path = fs.local(gate_state_path(settings(), pipeline))
        if path is None or not path.is_file():
            return None
        st = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(st, dict):
            raise ValueError("state.json is not an object")
    except Exception as e:
        return {"error": f"The cut-over gate's state could not be read ({type(e).__name__}: {e})."}
    stages = [str(x) for x in _list(st.get("stages"))]
    stage = str(st.get("stage") or "shadow")
    serving = _dict(st.get("serving"))
    days = []
    for d in _list(st.get("days"))[:GATE_DAYS]:
        if not isinstance(d, dict):
            continue
        failed = [c for c in _list(d.get("checks")) if isinstance(c, dict) and c.get("status") == "failed"]
        days.append(
            {
                "ds": str(d.get("ds")),
                "met": d.get("met") is True,
                "why_not": str(d.get("why_not") or ""),
                "failed": [str(c.get("check")) for c in failed],
            }
        )
    return {
        "error": None,
        "stage": stage,
        "stages": [
            {"name": x, "current": x == stage, "done": x in stages[: stages.index(stage)] if stage in stages else False}
            for x in stages
        ],
        "days_met": len(_list(st.get("days_met"))),
        "days_required": st.get("days_required"),
        "next": st.get("next"),
        "allowed": st.get("promotion_allowed") is True,
        "message": str(st.get("message") or ""),
        "public": str(_dict(serving.get("public")).get("variant") or "—"),
        "canary": _dict(serving.get("canary")).get("variant"),
        "batch_dag": str(st.get("batch_dag") or "joinshift_daily"),
        "batch_dag_paused": st.get("batch_dag_paused") is True,
        "days": days,
    }


def _day_rows(pdir: Path, days: list[str], report_mod: Any) -> list[dict]:
    rows = []
    for ds in days[:RECENT_REPORTS]:
        try:
            row = dict(report_mod.index_row(pdir, ds))  # the same numbers as the pipeline's index.html
        except Exception:
            row = {
                "ds": ds,
                "stream": "—",
                "base": "—",
                "diff": "—",
                "status": "unknown",
                "status_label": "no data yet",
            }
        row["href"] = "reports/" + _q(pdir.name, ds, "report.html")
        row["json"] = "reports/" + _q(pdir.name, ds, "report.json")
        rows.append(row)
    return rows


def _pipeline(pdir: Path, report_mod: Any) -> dict:
    name = pdir.name
    p: dict[str, Any] = {"name": name, "error": None, "days": [], "n_reports": 0}
    p["health"] = stream_health(name)
    days = sorted(
        (d.name for d in pdir.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / "report.json").is_file()),
        reverse=True,
    )
    p["n_reports"] = len(days)
    p["gate"] = cutover_gate(name)
    if not days:
        return p
    newest = days[0]
    try:  # latest.json wins when it names a day that has a report (a backfill never moves it back)
        latest = json.loads((pdir / "latest.json").read_text(encoding="utf-8"))
        if isinstance(latest, dict) and str(latest.get("ds")) in days:
            newest = str(latest["ds"])
    except (OSError, ValueError):
        pass
    p["ds"] = newest
    p["report_href"] = "reports/" + _q(name, newest, "report.html")
    p["index_href"] = "reports/" + _q(name, "index.html") if (pdir / "index.html").is_file() else None
    p["days"] = _day_rows(pdir, days, report_mod)
    try:
        data = json.loads((pdir / newest / "report.json").read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("report.json is not an object")
    except (OSError, ValueError) as e:
        p["error"] = f"The newest report ({newest}) could not be read: {e}"
        return p
    spec = _dict(data.get("spec"))
    head = next((r for r in p["days"] if r["ds"] == newest), None) or {}
    tol = _num(spec.get("tolerance_pp"))
    baseline = str(spec.get("baseline") or "batch_1d_windowed")
    p.update(
        generated_at=report_mod.fmt_timestamp(data.get("generated_at")) if data.get("generated_at") else None,
        status=head.get("status", "unknown"),
        status_label=head.get("status_label", "no data yet"),
        stream=head.get("stream", "—"),
        base=head.get("base", "—"),
        diff=head.get("diff", "—"),
        baseline_label=report_mod.VARIANT_LABELS.get(baseline, baseline),
        tolerance=f"{tol:.2f} pp" if tol is not None else None,
        window=spec.get("window"),
        match_rates=_match_rates(data, report_mod),
        hourly=_hourly(data, report_mod, baseline),
        recommendation=_recommendation(data, report_mod),
        gates=_gates(data),
        runbooks=_runbooks(data),
        account=account_chart(data.get("account")),
    )
    p["gates_failed"] = sum(1 for g in p["gates"] if not g["ok"] and not g["unknown"])
    p["diff_class"] = ""
    mr = p["match_rates"]
    if mr and tol is not None and mr["last"] == newest:
        latest = {r["variant"]: r["values"][-1] for r in mr["rows"]}
        s, b = latest.get("stream"), latest.get(baseline)
        if s is not None and b is not None:
            p["diff_class"] = "good" if report_mod.within_tolerance(s, b, tol) else "bad"
    return p


# --------------------------------------------------------------------------------------------
# Stream health (jobs.operate.stream_health): the live snapshot of a pipeline's stream
# --------------------------------------------------------------------------------------------

#: Kafka timeout per call of a health snapshot, and the most a page waits for one in all.
HEALTH_KAFKA_TIMEOUT_S = 3.0
HEALTH_WAIT_S = 12.0
_HEALTH_POOL = None


def project_spec(pipeline: str) -> tuple[Path, Any] | None:
    """The file and join spec of ``pipeline`` among the project's specs (``include/specs/*.yaml``), or None."""
    from jobs.spec import load_spec

    for f in sorted((_project_root() / "include" / "specs").glob("*.y*ml")):
        try:
            spec = load_spec(f)
        except Exception:  # a broken spec file is its owner's problem, not this page's
            continue
        if spec.pipeline == pipeline:
            return f, spec
    return None


def spec_for(pipeline: str) -> Any:
    """The join spec of ``pipeline`` among the project's specs, or None."""
    found = project_spec(pipeline)
    return found[1] if found else None


def runbook_text(target: Path, pipeline: str | None) -> str:
    """A runbook's markdown, filled with ``pipeline``'s values (``joinshift runbook``'s text) when
    a project spec names that pipeline; else as written, with a line saying how to fill it."""
    from jobs.operate import runbooks

    if pipeline and not _SAFE_NAME.match(pipeline):  # a name of a pipeline only, never markup
        pipeline = "(not a pipeline name)"
    found = project_spec(pipeline) if pipeline else None
    if found and target.parent == runbooks.RUNBOOKS.resolve():
        try:
            return runbooks.render(target.stem, str(found[0].relative_to(_project_root())))
        except Exception as e:  # the raw text still helps
            log.warning("joinshift UI: runbook %s for %s could not be filled", target.stem, pipeline, exc_info=True)
            why = f"could not be filled with {pipeline}'s values ({type(e).__name__}: {e})"
    else:
        why = f"no spec under include/specs/ names pipeline {pipeline!r}" if pipeline else "no pipeline was named"
    return (
        f"> Shown as written ({why}): the names in braces are a pipeline's values. "
        f"`joinshift runbook {target.stem} --spec <your spec>` prints it filled in.\n\n"
        + target.read_text(encoding="utf-8", errors="replace")
    )


def stream_health(pipeline: str) -> dict | None:
    """The "Stream health" block's values (``jobs.report.health_view``), or a dict with only
    ``error``; None when no spec of the project names this pipeline. Kafka is asked with short
    timeouts, and the page waits at most ``HEALTH_WAIT_S`` for the whole snapshot."""
    global _HEALTH_POOL
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as Timeout

    try:
        from jobs.operate.stream_health import snapshot
        from jobs.report.health_view import health_view

        spec = spec_for(pipeline)
        if spec is None:
            return None
        if _HEALTH_POOL is None:
            _HEALTH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="joinshift-health")
        future = _HEALTH_POOL.submit(snapshot, spec, kafka_timeout_s=HEALTH_KAFKA_TIMEOUT_S)
        return health_view(future.result(timeout=HEALTH_WAIT_S))
    except Timeout:
        return {"error": f"The stream health snapshot took longer than {HEALTH_WAIT_S:.0f}s (is Kafka slow?)."}
    except Exception as e:  # never break the page for the stream's health
        log.warning("joinshift UI: stream health of %s failed", pipeline, exc_info=True)
        return {"error": f"Stream health could not be read ({type(e).__name__}: {e})."}


def overview(reports_root: Path | None) -> dict:
    """Everything the page shows; never raises for missing or malformed files."""
    model: dict[str, Any] = {
        "reports_root": str(reports_root) if reports_root else None,
        "pipelines": [],
        "error": None,
        "empty_state": EMPTY_STATE,
    }
    if reports_root is None:
        model["error"] = "The storage root is not a local path, so this page cannot read its reports."
        return model
    try:
        from jobs.report import render as report_mod  # formatters, palette and index rows
    except Exception as e:  # the project is not on the api-server's PYTHONPATH
        model["error"] = f"The joinshift project could not be imported ({type(e).__name__}: {e})."
        return model
    if not reports_root.is_dir():
        return model
    try:
        dirs = sorted(d for d in reports_root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError as e:
        model["error"] = f"The reports folder could not be listed: {e}"
        return model
    for pdir in dirs:
        try:
            model["pipelines"].append(_pipeline(pdir, report_mod))
        except Exception as e:  # one broken pipeline folder must not hide the others
            log.warning("joinshift UI: pipeline %s could not be read", pdir, exc_info=True)
            model["pipelines"].append(
                {"name": pdir.name, "error": f"{type(e).__name__}: {e}", "days": [], "n_reports": 0}
            )
    return model


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

_ENV = None


def _env():
    global _ENV
    if _ENV is None:
        import jinja2

        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), autoescape=True, trim_blocks=True, lstrip_blocks=True
        )
    return _ENV


def _home(request: Request) -> str:
    """The overview's URL path (the mount point, including any ``[api] base_url`` path)."""
    return (request.scope.get("root_path") or URL_PREFIX).rstrip("/") + "/"


def _message_page(request: Request, title: str, text: str) -> str:
    return _env().get_template("page.html.j2").render(title=title, text=text, body=None, home=_home(request))


def _render_markdown(text: str) -> str:
    from markupsafe import Markup, escape

    try:
        from markdown_it import MarkdownIt

        return Markup(MarkdownIt("commonmark", {"html": False}).render(text))  # raw HTML disabled
    except Exception:
        return Markup(f"<pre>{escape(text)}</pre>")


# --------------------------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------------------------


def create_app(reports_root: Path | str | None = None) -> FastAPI:
    """The plugin's FastAPI app; ``reports_root`` overrides the settings (tests)."""
    app = FastAPI(
        title="joinshift · Join accuracy",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(require_user)],
    )
    app.state.reports_root = Path(reports_root) if reports_root is not None else None
    # Starlette's class, FastAPI's subclasses it: a path no route has (Starlette's 404) gets the page too
    app.add_exception_handler(StarletteHTTPException, _auth_error)  # type: ignore[arg-type]  # Starlette types handlers on Exception

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        err: str | None
        try:
            root = _reports_root(request)
        except Exception as e:  # settings unreadable: say so on the page
            root, err = None, f"The joinshift settings could not be read ({type(e).__name__}: {e})."
        else:
            err = None
        model = overview(root)
        if err:
            model["error"] = err
        html = _env().get_template("index.html.j2").render(**model)
        return HTMLResponse(html, headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-store"})

    @app.get("/reports/{rel:path}")
    def report_file(rel: str, request: Request) -> FileResponse:
        try:
            root = _reports_root(request)
        except Exception as e:  # settings unreadable: a 404 that says why, as the overview does
            raise HTTPException(status_code=404, detail=f"The joinshift settings could not be read ({e})") from None
        if root is None:
            raise HTTPException(status_code=404, detail="No such file")
        target = safe_file(root, rel, SERVED_TYPES)
        return FileResponse(
            target,
            media_type=SERVED_TYPES[target.suffix.lower()],
            headers={"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
        )

    @app.get("/runbooks/{rel:path}", response_class=HTMLResponse)
    def runbook(rel: str, request: Request, pipeline: str | None = None) -> HTMLResponse:
        target = safe_file(_project_root() / "include" / "runbooks", rel, {".md"})
        body = _render_markdown(runbook_text(target, pipeline))
        html = _env().get_template("page.html.j2").render(title=target.stem, text=None, body=body, home=_home(request))
        return HTMLResponse(html, headers={"Content-Security-Policy": _CSP})

    return app


app = create_app()


class JoinshiftUIPlugin(AirflowPlugin):
    name = "joinshift_ui"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "joinshift join accuracy"}]
    external_views = [
        {
            "name": "Join accuracy",
            # relative (no leading slash): resolved against the UI's base URL, so it works behind
            # a [api] base_url path too; opens inside the UI at /plugin/join-accuracy
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "url_route": "join-accuracy",
            "destination": "nav",
            "nav_top_level": True,
        }
    ]

"""The scheduled accuracy report: a pure renderer from one day's report data to files.

:func:`render_report` turns the day's numbers (a :class:`jobs.report.model.ReportData`, or its
JSON-able dict) into a self-contained ``report.html`` (plots embedded as base64 PNGs), the same
plots as PNG files next to it, and ``report.json`` (the input, so machines can read it).
:func:`write_latest_pointer` keeps ``<reports_root>/<pipeline>/latest.json`` and an
``index.html`` of every day's report; the layout is ``<reports_root>/<pipeline>/<ds>/report.html``
(:func:`publish_report` does both). The HTML comes from the Jinja templates in
``include/report_templates/`` only; the sections' values from :mod:`jobs.report.sections`, the
plots from :mod:`jobs.report.plots`, the input contract is :mod:`jobs.report.model`.

Usage::

    from jobs.report import example_data, publish_report
    files = publish_report(example_data(), Path("var/reports"))
    files.html          # var/reports/search_sessions/2026-11-20/report.html

Pure: no Spark, no network. matplotlib is used through ``Figure`` objects (Agg), so no global
backend or pyplot state is touched.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jinja2

from jobs.report import plots
from jobs.report.example import example_data
from jobs.report.format import (
    DASH,
    VARIANT_COLORS,
    VARIANT_LABELS,
    VARIANTS,
    fmt_bytes,
    fmt_duration,
    fmt_int,
    fmt_pct,
    fmt_pp,
    fmt_timestamp,
    fmt_window,
    num,
    parse_window,
    within_tolerance,
)
from jobs.report.model import ReportData
from jobs.report.plot_pareto import plot_pareto
from jobs.report.recommendation_view import recommendation_model, recommendation_sentence
from jobs.report.sections import (
    account_model,
    attribution_model,
    delta_hints,
    deltas_model,
    hourly_table,
    match_rate_table,
    pt_model,
    quarantine_model,
    rows_of,
    spec_items,
    windows_of,
)
from jobs.report.sections import headline as build_headline
from jobs.report.sections import sweep_rows as build_sweep_rows

log = logging.getLogger(__name__)

__all__ = [
    "ReportFiles",
    "render_report",
    "publish_report",
    "write_latest_pointer",
    "index_row",
    "PLOTS",
    "SECTIONS",
    "NOT_AVAILABLE",
    # re-exported for callers that import them from here
    "example_data",
    "fmt_pct",
    "fmt_pp",
    "fmt_duration",
    "fmt_bytes",
    "fmt_int",
    "fmt_window",
    "fmt_timestamp",
    "parse_window",
    "within_tolerance",
    "recommendation_sentence",
    "VARIANTS",
    "VARIANT_LABELS",
    "VARIANT_COLORS",
]

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "include" / "report_templates"
TEMPLATE_NAME = "report.html.j2"
INDEX_TEMPLATE_NAME = "index.html.j2"

#: Plot files, in report order, with the section they belong to.
PLOTS = {
    "match_rate_by_day": "match-rate",
    "match_rate_by_hour": "match-rate",
    "pareto": "recommendation",
    "match_rate_vs_window": "window-sweep",
    "memory_vs_window": "window-sweep",
    "boundary_deltas": "boundary-deltas",
    "pt_delay": "pt",
    "account": "account",
    "attribution": "attribution",
}
SECTIONS = (  # (id, title)
    ("match-rate", "Match rate per day"),
    ("recommendation", "Window recommendation"),
    ("window-sweep", "Window size: match rate, memory and recovery"),
    ("boundary-deltas", "Window boundary deltas"),
    ("pt", "Processing time (PT) and watermarks"),
    ("account", "Stream − baseline, term by term"),
    ("attribution", "Why left events went unmatched"),
    ("quality", "Data quality gates and quarantine"),
    ("runbooks", "Runbooks"),
)
NOT_AVAILABLE = "Not available yet"


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`render_report` wrote. ``images`` holds only the plots that had data."""

    out_dir: Path
    html: Path
    json: Path
    images: dict[str, Path] = field(default_factory=dict)
    #: section ids rendered as "not available" (no data, or data that could not be read)
    unavailable: tuple[str, ...] = ()
    #: "ok" | "attention" | "unknown": the headline verdict
    status: str = "unknown"

    @property
    def all(self) -> list[Path]:
        return [self.html, self.json, *self.images.values()]


def _json_safe(v: Any) -> Any:
    """Strict JSON: NaN/inf -> None, dates and other objects -> str."""
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (str, int, bool)):
        return v
    if hasattr(v, "item"):  # numpy scalars
        return _json_safe(v.item())
    return str(v)


def _write_text(path: Path, text: str) -> None:
    """Write via a temp file + rename, so a reader never sees half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pct=fmt_pct, pp=fmt_pp, duration=fmt_duration, bytes=fmt_bytes, int=fmt_int, timestamp=fmt_timestamp
    )
    return env


def _section(sections: dict, sid: str, build: Callable[[], Any]) -> Any:
    """Run one section's builder; on error, mark it unavailable with the reason (never crash)."""
    try:
        model = build()
    except Exception as e:  # a malformed section must not take the whole report down
        log.warning("report section %s could not be rendered: %s", sid, e, exc_info=True)
        sections[sid]["note"] = f"Not available: the data for this section could not be read ({type(e).__name__}: {e})."
        return None
    if model is None or model == [] or model == {}:
        return None
    sections[sid]["available"] = True
    return model


def render_report(data: ReportData | dict, out_dir: Path) -> ReportFiles:
    """Render one day's report into ``out_dir`` (created): ``report.html`` (self-contained),
    the plot PNGs that have data, and ``report.json`` (the input, strict JSON).

    Raises ``ValueError`` when ``pipeline`` or ``ds`` is missing; every other key is optional.
    PNGs left from an earlier render of the same folder whose data is now missing are removed,
    so the folder always matches its ``report.json``.
    """
    if isinstance(data, ReportData):
        data = data.to_dict()
    if not isinstance(data, dict):
        raise ValueError("report data must be a ReportData or a dict")
    missing = [k for k in ("pipeline", "ds") if not data.get(k)]
    if missing:
        raise ValueError(f"report data needs {' and '.join(missing)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = cast(dict, _json_safe(data))  # _json_safe keeps a dict a dict
    ds = str(data["ds"])

    def part(key: str) -> Any:
        v = data.get(key)
        return v if v not in (None, [], {}) else None

    spec = data["spec"] if isinstance(data.get("spec"), dict) else {}
    gates = rows_of(data.get("gates"))
    sections = {sid: {"id": sid, "title": title, "available": False, "note": None} for sid, title in SECTIONS}
    images: dict[str, Path] = {}
    embedded: dict[str, str] = {}

    import matplotlib

    def plot(name: str, build: Callable[[], Any]) -> None:
        try:
            with matplotlib.rc_context(plots.RC):  # type: ignore[arg-type]  # stubs want Literal rc keys
                fig = build()
                if fig is not None:
                    embedded[name] = plots.save_png(fig, out_dir / f"{name}.png")
                    images[name] = out_dir / f"{name}.png"
        except Exception as e:
            log.warning("report plot %s failed: %s", name, e, exc_info=True)

    # --- match rate (Fig 8)
    mr = _section(sections, "match-rate", lambda: match_rate_table(data))
    if mr:
        plot("match_rate_by_day", lambda: plots.plot_match_rate_by_day(mr, ds, spec))
    hourly = hourly_table(data)
    if hourly:
        baseline = str(spec.get("baseline") or "batch_1d_windowed")
        plot("match_rate_by_hour", lambda: plots.plot_match_rate_by_hour(hourly, ds, baseline))

    # --- recommendation
    rec = part("recommendation")
    advice = part("watermark_advice")
    rec_model = _section(
        sections,
        "recommendation",
        lambda: (
            recommendation_model(rec, spec, advice if isinstance(advice, dict) else None)
            if isinstance(rec, dict)
            else None
        ),
    )
    head = build_headline(data, mr, gates, rec_model["sentence"] if rec_model else None)
    if rec_model and rec_model["frontier"]:
        plot("pareto", lambda: plot_pareto(rec, head["base"], head["baseline_label"]))

    # --- sweep (Fig 9, 10)
    deployed, recommended = windows_of(data)
    sweep = rows_of(part("sweep"))
    sweep_rows = _section(sections, "window-sweep", lambda: build_sweep_rows(sweep, deployed, recommended))
    if sweep_rows:
        plot(
            "match_rate_vs_window",
            lambda: plots.plot_match_rate_vs_window(
                sweep,
                deployed,
                recommended,
                head["base"],
                head["tolerance_pp"],
                head["baseline_label"],
                num(rec.get("target_share")) if isinstance(rec, dict) else None,
            ),
        )
        plot("memory_vs_window", lambda: plots.plot_memory_vs_window(sweep, deployed, recommended))

    # --- boundary deltas (§6.5)
    bd = part("boundary_deltas")
    deltas = _section(
        sections,
        "boundary-deltas",
        lambda: (
            {"rows": deltas_model(bd), "hints": delta_hints(bd, spec)}
            if isinstance(bd, dict) and deltas_model(bd)
            else None
        ),
    )
    if deltas:
        plot("boundary_deltas", lambda: plots.plot_boundary_deltas(bd))

    # --- PT (Fig 12) and watermark advice
    pt = part("pt")
    pt_rows = _section(
        sections,
        "pt",
        lambda: pt_model(pt if isinstance(pt, dict) else {}, advice if isinstance(advice, dict) else {}, spec),
    )
    if pt_rows and isinstance(pt, dict):
        plot("pt_delay", lambda: plots.plot_pt(pt))

    # --- the account (waterfall)
    acc = part("account")
    acc_model = _section(sections, "account", lambda: account_model(acc) if isinstance(acc, dict) else None)
    if acc_model is not None:
        plot("account", lambda: plots.plot_account(acc))

    # --- attribution
    att = part("attribution")
    att_model = _section(
        sections,
        "attribution",
        lambda: (
            attribution_model(att)
            if isinstance(att, dict) and (attribution_model(att)["rows"] or rows_of(att.get("by_hour")))
            else None
        ),
    )
    if att_model is not None:
        plot("attribution", lambda: plots.plot_attribution(att))

    # --- quality
    quarantine = part("quarantine")
    q_model = quarantine_model(quarantine) if isinstance(quarantine, dict) else None
    if gates or q_model:
        sections["quality"]["available"] = True

    # --- runbooks
    runbooks = [r for r in rows_of(data.get("runbooks")) if r.get("title") or r.get("path")]
    if runbooks:
        sections["runbooks"]["available"] = True

    # stale PNGs from an earlier render of this folder
    for name in PLOTS:
        p = out_dir / f"{name}.png"
        if name not in images and p.exists():
            p.unlink()

    gen = data.get("generated_at")
    html = (
        _env()
        .get_template(TEMPLATE_NAME)
        .render(
            d=data,
            ds=ds,
            pipeline=str(data["pipeline"]),
            generated_at=gen,
            spec=spec,
            spec_items=spec_items(spec),
            headline=head,
            sections=sections,
            mr=mr,
            variant_labels=VARIANT_LABELS,
            variant_colors=VARIANT_COLORS,
            rec=rec_model,
            sweep_rows=sweep_rows or [],
            deltas=deltas,
            pt_rows=pt_rows or [],
            att=att_model,
            acc=acc_model,
            gates=gates,
            quarantine=q_model,
            runbooks=runbooks,
            images=embedded,
            fmt_pct=fmt_pct,
            fmt_pp=fmt_pp,
            fmt_int=fmt_int,
            not_available=NOT_AVAILABLE,
        )
    )
    html_path, json_path = out_dir / "report.html", out_dir / "report.json"
    _write_text(json_path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    _write_text(html_path, html)
    return ReportFiles(
        out_dir=out_dir,
        html=html_path,
        json=json_path,
        images=images,
        unavailable=tuple(s for s, m in sections.items() if not m["available"]),
        status=head["status"],
    )


# --------------------------------------------------------------------------------------------
# Layout: <reports_root>/<pipeline>/<ds>/report.html, latest.json, index.html
# --------------------------------------------------------------------------------------------

_STATUS_LABELS = {"ok": "ok", "attention": "needs attention", "unknown": "no data yet"}


def index_row(pipeline_dir: Path, ds: str) -> dict:
    row = {"ds": ds, "html": f"{ds}/report.html", "stream": DASH, "base": DASH, "diff": DASH, "status": "unknown"}
    try:
        data = json.loads((pipeline_dir / ds / "report.json").read_text(encoding="utf-8"))
        mr = match_rate_table(data)
        h = build_headline({**data, "ds": ds}, mr, rows_of(data.get("gates")), None)
        row.update(stream=fmt_pct(h["stream"]), base=fmt_pct(h["base"]), diff=fmt_pp(h["diff_pp"]), status=h["status"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    row["status_label"] = _STATUS_LABELS[row["status"]]
    return row


def write_latest_pointer(reports_root: Path, pipeline: str, ds: str) -> Path:
    """Update ``<reports_root>/<pipeline>/latest.json`` and ``index.html`` after ``ds`` was rendered.

    ``latest.json`` is ``{"pipeline", "ds", "html"}`` with ``html`` relative to the pipeline
    folder (``"<ds>/report.html"``); it points at the newest ds that has a report, so
    re-rendering an older day (a backfill) does not move it back. ``index.html`` lists every
    ds folder holding a ``report.html``, newest first, with its headline numbers. Returns the
    ``latest.json`` path.
    """
    pdir = Path(reports_root) / str(pipeline)
    pdir.mkdir(parents=True, exist_ok=True)
    days = {p.parent.name for p in pdir.glob("*/report.html")}
    days.add(str(ds))
    ordered = sorted(days, reverse=True)
    newest = ordered[0]
    latest = pdir / "latest.json"
    _write_text(
        latest, json.dumps({"pipeline": str(pipeline), "ds": newest, "html": f"{newest}/report.html"}, indent=2) + "\n"
    )
    rows = [index_row(pdir, d) for d in ordered]
    _write_text(pdir / "index.html", _env().get_template(INDEX_TEMPLATE_NAME).render(pipeline=str(pipeline), rows=rows))
    return latest


def publish_report(data: ReportData | dict, reports_root: Path) -> ReportFiles:
    """Render into ``<reports_root>/<pipeline>/<ds>/`` and update ``latest.json`` / ``index.html``."""
    if isinstance(data, ReportData):
        data = data.to_dict()
    if not isinstance(data, dict) or not data.get("pipeline") or not data.get("ds"):
        raise ValueError("report data needs pipeline and ds")
    files = render_report(data, Path(reports_root) / str(data["pipeline"]) / str(data["ds"]))
    write_latest_pointer(Path(reports_root), str(data["pipeline"]), str(data["ds"]))
    return files

"""The report's plots: matplotlib ``Figure`` objects (Agg), no pyplot or global backend state.

Each ``plot_*`` returns a figure, or None when its data has nothing to draw; :func:`save_png`
writes one next to the report and returns it base64-encoded for embedding.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from jobs.report.format import (
    CAUSES,
    EXTRA_COLORS,
    GAIN_CAUSES,
    SIDE_COLORS,
    UPPER_PALETTE,
    VARIANT_COLORS,
    VARIANT_LABELS,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    num,
)
from jobs.report.sections import account_steps, rows_of

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.labelcolor": "#334155",
    "axes.edgecolor": "#cbd5e1",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e2e8f0",
    "grid.linewidth": 0.8,
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "figure.dpi": 110,
    "savefig.dpi": 110,
}


def _figure(w: float, h: float, rows: int = 1, cols: int = 1, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def _pct_axis(ax, axis: str = "y", digits: int | None = None) -> None:
    """Fractions shown as percentages; ``digits=None`` picks the decimals from the view range."""
    from matplotlib.ticker import PercentFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0, decimals=digits))


_NICE_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)


def _duration_axis(ax, axis: str = "x", signed: bool = False) -> None:
    """Ticks on whole durations (15m, 1h, 6h, ...) labelled like "2h 30m"."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    a = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    span = abs(hi - lo)
    step = next((s for s in _NICE_STEPS if span / s <= 8), _NICE_STEPS[-1])
    a.set_major_locator(MultipleLocator(step))
    a.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v, signed=signed)))


def _mark_windows(ax, xy: Callable[[tuple], tuple | None], deployed, recommended) -> None:
    """Ring the deployed window, star the recommended one."""
    for w, kw in (
        (
            deployed,
            dict(
                marker="o", s=190, facecolors="none", edgecolors="#0f172a", linewidths=1.6, label="deployed", zorder=5
            ),
        ),
        (
            recommended,
            dict(marker="*", s=230, color="#16a34a", edgecolors="white", linewidths=0.8, label="recommended", zorder=6),
        ),
    ):
        p = xy(w) if w else None
        if p is not None:
            ax.scatter([p[0]], [p[1]], **kw)


def _run_note(mr: dict, variant: str) -> str:
    """The stream's provenance in the legend: a backlog run's rate is an upper bound."""
    if variant != "stream":
        return ""
    notes = sorted({str(rows[variant].get("stream_run") or "") for rows in mr["by_ds"].values() if variant in rows})
    notes = [n for n in notes if n]
    return f", {' / '.join(notes)}" if notes else ""


def plot_match_rate_by_day(mr: dict, ds: str, spec: dict):
    fig, axes = _figure(10, 3.8)
    ax = axes[0][0]
    days = list(mr["by_ds"])
    x = list(range(len(days)))
    for v in mr["variants"]:
        ys = [mr["by_ds"][d].get(v, {}).get("match_rate") for d in days]
        ys = [math.nan if y is None else y for y in ys]
        lw, ms = (2.6, 6) if v == "stream" else (1.6, 4.5)
        ax.plot(
            x,
            ys,
            marker="o",
            lw=lw,
            ms=ms,
            color=VARIANT_COLORS.get(v, "#334155"),
            label=f"{VARIANT_LABELS.get(v, v)}{_run_note(mr, v)}  (avg {fmt_pct(mr['avg'][v])})",
            zorder=4 if v == "stream" else 3,
        )
    if ds in days:
        i = days.index(ds)
        ax.axvspan(i - 0.4, i + 0.4, color="#e0e7ff", alpha=0.6, zorder=0, lw=0)
    ax.set_xticks(x, [d[5:] if len(d) == 10 else d for d in days])
    ax.set_xlim(-0.5, len(days) - 0.5)
    ax.set_xlabel("ds (left event day)")
    ax.set_ylabel("match rate")
    _pct_axis(ax)
    ax.set_title("Match rate per day: the stream against the daily batch joins and the reference")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def plot_match_rate_by_hour(hourly: dict, ds: str, baseline: str):
    """The report ds's match rate per hour of the left event time: stream, baseline, reference."""
    shown = [v for v in ("stream", baseline, "reference") if v in hourly["variants"]]
    if not shown:
        return None
    fig, axes = _figure(10, 3.4)
    ax = axes[0][0]
    hours = hourly["hours"]
    for v in dict.fromkeys(shown):
        ys = [hourly["by_hour"][h].get(v) for h in hours]
        ax.plot(
            hours,
            [math.nan if y is None else y for y in ys],
            marker="o",
            ms=3.5,
            lw=2.4 if v == "stream" else 1.5,
            color=VARIANT_COLORS.get(v, "#334155"),
            label=VARIANT_LABELS.get(v, v) + ("  (baseline)" if v == baseline and v != "reference" else ""),
            zorder=4 if v == "stream" else 3,
        )
    ax.set_xticks(range(0, 24, 2))
    ax.set_xlim(-0.5, 23.5)
    ax.set_xlabel(f"hour of the left event time ({ds})")
    ax.set_ylabel("match rate")
    _pct_axis(ax)
    ax.set_title("Match rate per hour: the stream, its baseline and the reference")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def _sweep_points(sweep: list[dict]) -> list[dict]:
    pts = []
    for r in sweep:
        lo, hi = num(r.get("lower_s")), num(r.get("upper_s"))
        if lo is None or hi is None:
            continue
        pts.append(
            {
                "lo": lo,
                "hi": hi,
                "rate": num(r.get("match_rate")),
                "mem": num(r.get("predicted_memory_bytes")),
                "rec": num(r.get("recovery_s")),
                "lat": num(r.get("output_latency_s")),
            }
        )
    return pts


def _upper_colors(pts: list[dict]) -> dict[float, str]:
    """Upper bounds are ordinal: a light-to-dark sequence, away from the variant colours."""
    from matplotlib.colors import LinearSegmentedColormap, to_hex

    uppers = sorted({p["hi"] for p in pts})
    cmap = LinearSegmentedColormap.from_list("uppers", UPPER_PALETTE)
    n = max(1, len(uppers) - 1)
    return {u: to_hex(cmap(i / n if len(uppers) > 1 else 0.6)) for i, u in enumerate(uppers)}


def plot_match_rate_vs_window(
    sweep: list[dict], deployed, recommended, baseline_rate, tol_pp, baseline_label, target_share=None
):
    pts = [p for p in _sweep_points(sweep) if p["rate"] is not None]
    if not pts:
        return None
    colors = _upper_colors(pts)
    fig, axes = _figure(10, 3.9)
    ax = axes[0][0]
    # windows far below the baseline (e.g. upper +0s) would squash the region a decision is made
    # in: the axis starts a few pp under the baseline, and those lines say where they are
    floor = baseline_rate - max(0.05, 3 * (tol_pp or 0) / 100) if baseline_rate is not None else None
    for u, c in colors.items():
        line = sorted((p for p in pts if p["hi"] == u), key=lambda p: -p["lo"])
        label = f"upper {fmt_duration(u, signed=True)}"
        if floor is not None and max(p["rate"] for p in line) < floor:
            label += f" (≤ {fmt_pct(max(p['rate'] for p in line), 1)}, below the axis)"
        ax.plot([-p["lo"] for p in line], [p["rate"] for p in line], marker="o", color=c, lw=2, ms=5, label=label)
    if baseline_rate is not None:
        ax.axhline(
            baseline_rate,
            color=VARIANT_COLORS["batch_1d_windowed"],
            lw=1.4,
            ls="--",
            label=f"{baseline_label} (baseline)",
        )
        ys = [p["rate"] for p in pts if p["rate"] >= floor] + [baseline_rate]
        if target_share:
            ax.axhline(
                baseline_rate * target_share,
                color="#16a34a",
                lw=1.3,
                ls=":",
                label=f"target: {fmt_pct(target_share, 1)} of the baseline",
            )
            ys.append(baseline_rate * target_share)
        pad = max(0.0005, 0.12 * (max(ys) - min(ys)))
        ax.set_ylim(min(ys) - pad, max(ys) + pad)  # the band below must not stretch the axis
        if tol_pp:
            ax.axhspan(
                baseline_rate - tol_pp / 100,
                baseline_rate,
                color="#fef3c7",
                alpha=0.45,
                lw=0,
                label=f"within {tol_pp:.2f} pp of the baseline",
                zorder=0,
            )
    rate_at = {(p["lo"], p["hi"]): p["rate"] for p in pts}
    _mark_windows(ax, lambda w: (-w[0], rate_at[w]) if w in rate_at else None, deployed, recommended)
    ax.set_xlabel("look-back (window lower bound)")
    ax.set_ylabel("match rate")
    _pct_axis(ax)
    xs = sorted({-p["lo"] for p in pts})
    ax.set_xticks(xs, [fmt_duration(-x, signed=True) for x in xs])
    ax.set_title("Match rate by window (one line per upper bound)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def plot_memory_vs_window(sweep: list[dict], deployed, recommended):
    """Fig 9 plus the other two costs of §6.5: memory and recovery grow with the window size,
    output latency with the upper bound."""
    from matplotlib.ticker import FuncFormatter

    pts = _sweep_points(sweep)
    panels = [
        (key, title, ylab, fmt, xkey)
        for key, title, ylab, fmt, xkey in (
            ("mem", "Memory of the right window state", "memory", fmt_bytes, "size"),
            ("rec", "Recovery after a restart", "replay time", fmt_duration, "size"),
            ("lat", "Output latency", "latency", fmt_duration, "upper"),
        )
        if any(p[key] is not None for p in pts)
    ]
    if not panels:
        return None
    fig, axes = _figure(10, 3.3, 1, len(panels))
    xof: dict[str, Callable[[tuple], float]] = {"size": lambda w: w[1] - w[0], "upper": lambda w: w[1]}
    for ax, (key, title, ylab, fmt, xkey) in zip(axes[0], panels):
        at: dict[float, float] = {}
        for p in pts:
            if p[key] is not None:
                at.setdefault(xof[xkey]((p["lo"], p["hi"])), p[key])
        xs = sorted(at)
        ax.plot(
            xs, [at[x] for x in xs], marker="o", ms=4, lw=1.8, color=VARIANT_COLORS["stream"], label="candidate windows"
        )
        vals = {(p["lo"], p["hi"]): p[key] for p in pts if p[key] is not None}

        def xy(w: tuple, x: Callable[[tuple], float] = xof[xkey], v: dict = vals) -> tuple | None:
            return (x(w), v[w]) if w in v else None

        _mark_windows(ax, xy, deployed, recommended)
        ax.set_title(title)
        ax.set_xlabel("window size (upper − lower)" if xkey == "size" else "window upper bound")
        ax.set_ylabel(ylab)
        ax.set_ylim(bottom=0, top=max(at.values()) * 1.12 if at else None)
        ax.set_xlim(left=0, right=max(xs) * 1.08 if xs else None)
        if xkey == "upper":
            ax.set_xticks(xs, [fmt_duration(x, signed=True) for x in xs])
        else:
            _duration_axis(ax, "x")
        if fmt is fmt_duration:
            _duration_axis(ax, "y")
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, f=fmt: f(v)))
    axes[0][0].legend(loc="upper left", fontsize=8)
    return fig


def plot_boundary_deltas(bd: dict):
    variants = [v for v in ("batch_1d_windowed", "stream") if isinstance(bd.get(v), dict)]
    variants += sorted(v for v in bd if v not in variants and isinstance(bd.get(v), dict))
    has_hist = any(isinstance(bd[v].get(f"hist_to_{s}"), dict) for v in variants for s in ("lower", "upper"))
    if not has_hist:
        return None
    fig, axes = _figure(10, 3.5, 1, 2)
    for ax, side in ((axes[0][0], "lower"), (axes[0][1], "upper")):
        for v in variants:
            hist = bd[v].get(f"hist_to_{side}")
            if not isinstance(hist, dict):
                continue
            edges = [num(e) for e in hist.get("edges") or []]
            counts = [num(c) or 0 for c in hist.get("counts") or []]
            if len(edges) != len(counts) + 1 or None in edges or not counts:
                continue
            total = sum(counts) or 1
            shares = [c / total for c in counts]
            color = VARIANT_COLORS.get(v, "#334155")
            if v == "stream":
                ax.stairs(shares, edges, fill=True, alpha=0.2, color=color, zorder=2)
                ax.stairs(shares, edges, lw=1.8, color=color, label=VARIANT_LABELS.get(v, v), zorder=3)
            else:
                ax.stairs(shares, edges, lw=1.5, color=color, ls=(0, (4, 2)), label=VARIANT_LABELS.get(v, v), zorder=4)
            p99 = num(bd[v].get(f"to_{side}_p99"))
            if p99 is not None:
                ax.axvline(p99, color=color, ls="--", lw=1.3, label=f"p99 {fmt_duration(p99)}")
            p1 = num(bd[v].get(f"to_{side}_p1"))
            if p1 is not None:
                ax.axvline(p1, color=color, ls=":", lw=1.3, label=f"p1 {fmt_duration(p1)}")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        _duration_axis(ax, "x")
        _pct_axis(ax, digits=0)
        ax.set_xlabel(
            f"right event time − window {side} bound" if side == "lower" else "window upper bound − right event time"
        )
        ax.set_ylabel("share of matched pairs")
        ax.set_title(f"Distance of matches to the {side} bound")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right" if side == "upper" else "upper left", fontsize=7.8)
    return fig


def plot_pt(pt: dict):
    import matplotlib.dates as mdates
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    series = {}
    for side in ("left", "right"):
        rows = rows_of(pt.get(side))
        rows = [r for r in rows if num(r.get("batch_end_ms")) is not None]
        if rows:
            rows.sort(key=lambda r: r["batch_end_ms"])
            series[side] = rows
    if not series:
        return None
    has_acc = any(num(r.get("accuracy")) is not None for rows in series.values() for r in rows)
    n = 3 if has_acc else 2
    fig, axes = _figure(10, 2.3 * n + 0.6, n, 1, sharex=True)
    ax_d, ax_w = axes[0][0], axes[1][0]
    all_delays = []
    for side, rows in series.items():
        t = [datetime.fromtimestamp(r["batch_end_ms"] / 1000, tz=UTC) for r in rows]
        d = [(num(r.get("pt_delay_ms")) or math.nan) / 1000 for r in rows]
        all_delays += [x for x in d if x == x and x > 0]
        w = [num(r.get("window_batches")) or math.nan for r in rows]
        c = SIDE_COLORS[side]
        ax_d.plot(t, d, color=c, lw=1.5, label=f"{side} stream")
        ax_w.step(t, w, where="post", color=c, lw=1.5, label=f"{side} stream")
        if has_acc:
            a = [(num(r.get("accuracy")) if num(r.get("accuracy")) is not None else math.nan) for r in rows]
            axes[2][0].plot(t, a, color=c, lw=1.2, label=f"{side} stream")
    if all_delays:
        lo, hi = min(all_delays), max(all_delays)
        if hi / max(lo, 1e-3) > 20:
            ax_d.set_yscale("log")
            nice = [0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400]
            ticks = [v for v in nice if lo / 1.5 <= v <= hi * 1.5]
            ax_d.yaxis.set_major_locator(FixedLocator(ticks))
            ax_d.yaxis.set_minor_locator(FixedLocator([]))
        else:
            ax_d.set_ylim(bottom=0)
        ax_d.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v)))
    ax_d.set_title("(a) PT delay: wall clock − estimated PT")
    ax_d.set_ylabel("PT delay")
    ax_d.legend(loc="upper right", ncols=2)
    ax_w.set_title("(b) Window of observation needed for an ascending PT sequence")
    ax_w.set_ylabel("micro-batches")
    ax_w.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
    ax_w.set_ylim(bottom=0)
    if has_acc:
        ax_a = axes[2][0]
        ax_a.set_title("(c) PT accuracy: share of the next batch's events at or after PT")
        ax_a.set_ylabel("accuracy")
        _pct_axis(ax_a)
    bottom = axes[n - 1][0]
    loc = mdates.AutoDateLocator(minticks=6, maxticks=13)
    bottom.xaxis.set_major_locator(loc)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=UTC))
    bottom.set_xlabel("batch end (UTC)")
    return fig


def plot_attribution(att: dict):
    by_hour = rows_of(att.get("by_hour"))
    by_hour = [r for r in by_hour if num(r.get("hour")) is not None]
    if not by_hour:
        return None
    causes = [c for c in CAUSES if any(c in r for r in by_hour)]
    causes += sorted({k for r in by_hour for k in r if k not in ("hour", *CAUSES, *GAIN_CAUSES)})
    hours = [int(h) for r in by_hour if (h := num(r["hour"])) is not None]  # all kept: filtered above
    fig, axes = _figure(10, 3.6)
    ax = axes[0][0]
    bottom = [0.0] * len(by_hour)
    extra = iter(EXTRA_COLORS * 4)
    for c in causes:
        label, color, _ = CAUSES.get(c, (c.replace("_", " "), next(extra), ""))
        vals = [num(r.get(c)) or 0 for r in by_hour]
        ax.bar(hours, vals, bottom=bottom, color=color, width=0.8, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(0, 24, 2))
    ax.set_xlim(-0.6, 23.6)
    ax.set_xlabel("hour of the left event (ds time zone)")
    ax.set_ylabel("left events")
    ax.set_title("Unmatched left events by cause and hour (stream vs baseline)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", visible=False)
    return fig


def plot_account(acc: dict):
    """The account as a waterfall: the baseline's rate, + cut-off gain, − left-late, − right-late,
    − other, the stream's rate (percent of the ds's left events). The y-axis is zoomed to the
    steps (totals drawn from the axis floor), since the terms are small beside the rates."""
    steps = account_steps(acc)
    if not steps:
        return None
    from matplotlib.ticker import FuncFormatter

    levels = [v for st in steps for v in ((st["end"],) if st["kind"] == "total" else (st["start"], st["end"]))]
    lo, hi = min(levels), max(levels)
    pad = max((hi - lo) * 0.3, 0.05)
    floor, top = lo - pad, hi + pad
    fig, axes = _figure(8.5, 3.8)
    ax = axes[0][0]
    for i, st in enumerate(steps):
        total = st["kind"] == "total"
        bottom = floor if total else min(st["start"], st["end"])
        height = st["end"] - floor if total else max(abs(st["end"] - st["start"]), (top - floor) * 0.003)
        ax.bar(i, height, bottom=bottom, color=st["color"], width=0.62, zorder=2)
        text = f"{st['end']:.3f}%" if total else f"{st['end'] - st['start']:+.3f} pp"
        ax.annotate(
            text,
            (i, max(st["start"], st["end"]) if not total else st["end"]),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=8.5,
            color="#0f172a",
        )
        if i + 1 < len(steps):  # connector: where the next step starts
            ax.plot([i + 0.31, i + 0.69], [st["end"]] * 2, color="#64748b", lw=0.8, ls="--", zorder=3)
    ax.set_xticks(range(len(steps)), labels=[st["label"] for st in steps])
    ax.set_ylim(floor, top + pad * 0.4)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2f}%"))
    ax.grid(axis="x", visible=False)
    diff = steps[-1]["end"] - steps[0]["end"]
    ax.set_title(f"Stream − {steps[0]['label']} = {diff:+.3f} pp, the sum of the terms (share of left events)")
    return fig


def save_png(fig, path: Path) -> str:
    """Write the PNG; return it base64-encoded for embedding."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    png = buf.getvalue()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(png)
    tmp.replace(path)
    return base64.b64encode(png).decode("ascii")

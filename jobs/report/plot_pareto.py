"""The recommendation's plot: match rate vs p99 output latency along the Pareto frontier."""

from __future__ import annotations

from jobs.report.format import VARIANT_COLORS, fmt_bytes, fmt_duration, num
from jobs.report.plots import _duration_axis, _figure, _pct_axis
from jobs.report.sections import rows_of


def plot_pareto(rec: dict, baseline_rate: float | None, baseline_label: str):
    """The recommendation's trade-off: match rate vs p99 output latency along the Pareto frontier,
    memory as the marker size; the deployed and the chosen settings marked, the budget and the
    tolerance drawn."""
    from matplotlib.ticker import FuncFormatter

    front: list[tuple[float, float, float]] = []
    for p in rows_of(rec.get("frontier")):
        x, y = num(p.get("p99_latency_s")), num(p.get("match_rate"))
        if x is not None and y is not None:
            front.append((x, y, num(p.get("memory_bytes")) or 0.0))
    if not front:
        return None
    fig, axes = _figure(10, 4.0)
    ax = axes[0][0]
    biggest = max(m for _, _, m in front) or 1.0
    xs, ys = [x for x, _, _ in front], [y for _, y, _ in front]
    ax.plot(xs, ys, color="#94a3b8", lw=1.2, zorder=1)
    sc = ax.scatter(
        xs,
        ys,
        s=[30 + 300 * m / biggest for _, _, m in front],
        c=[m for _, _, m in front],
        cmap="viridis",
        alpha=0.85,
        edgecolors="white",
        linewidths=0.6,
        label="Pareto frontier (size, colour: state memory)",
        zorder=3,
    )
    cb = fig.colorbar(sc, ax=ax, pad=0.01)
    cb.set_label("state memory")
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v)))
    dep: dict = rec["deployed"] if isinstance(rec.get("deployed"), dict) else {}
    for (x, y), kw in (
        (
            (num(dep.get("output_latency_s")), num(dep.get("match_rate"))),
            dict(marker="o", s=190, facecolors="none", edgecolors="#0f172a", linewidths=1.6, label="deployed"),
        ),
        (
            (num(rec.get("output_latency_s")), num(rec.get("predicted_match_rate"))),
            dict(marker="*", s=260, color="#16a34a", edgecolors="white", linewidths=0.8, label="chosen"),
        ),
    ):
        if x is not None and y is not None:
            ax.scatter([x], [y], zorder=6, **kw)
    budget = num(rec.get("output_latency_budget_s"))
    if budget is not None:
        ax.axvline(budget, color="#dc2626", ls="--", lw=1.2, label=f"latency budget {fmt_duration(budget)}")
    tol = num(rec.get("tolerance_pp"))
    if baseline_rate is not None:
        ax.axhline(baseline_rate, color=VARIANT_COLORS["batch_1d_windowed"], ls="--", lw=1.2, label=baseline_label)
        if tol is not None:
            ax.axhspan(baseline_rate - tol / 100, baseline_rate, color="#fef3c7", alpha=0.45, lw=0, zorder=0)
    ref = num(rec.get("reference_match_rate"))
    if ref is not None:
        ax.axhline(ref, color="#7c3aed", ls=":", lw=1.2, label="reference (no daily cut-off)")
    ax.set_xlabel("p99 event → output latency")
    ax.set_ylabel("predicted match rate")
    _duration_axis(ax, "x")
    _pct_axis(ax)
    ys_all: list[float] = [*ys, *(v for v in (baseline_rate, ref) if v is not None)]
    lo, hi = min(ys_all), max(ys_all)
    pad = max(0.001, 0.08 * (hi - lo))
    ax.set_ylim(max(lo - pad, min(ys) - pad), hi + pad)
    ax.set_title(f"Match rate vs latency ({rec.get('cadence') or 'cadence unknown'})")
    ax.legend(loc="lower right", fontsize=8)
    return fig

"""The accuracy report: assembly from the tables, plots, and rendering from templates.

Modules: :mod:`~jobs.report.model` (the typed, versioned report data), :mod:`~jobs.report.format`
(formatters and palette), :mod:`~jobs.report.sections` (per-section values),
:mod:`~jobs.report.plots`, :mod:`~jobs.report.render` (HTML from ``include/report_templates/``),
:mod:`~jobs.report.example` and :mod:`~jobs.report.assemble` (Spark: the tables -> the model).
The names other wings and tests use are importable from here.
"""

from jobs.report.example import example_data
from jobs.report.format import fmt_pct
from jobs.report.model import ReportData
from jobs.report.render import publish_report

__all__ = ["ReportData", "example_data", "fmt_pct", "publish_report"]

"""The accuracy report: assembly from the tables, plots, and rendering from templates.

The names other wings and tests use are importable from here.
"""

from jobs.report.render import example_data, fmt_pct, publish_report

__all__ = ["example_data", "fmt_pct", "publish_report"]

"""The HTML report, as before its move to :mod:`fastuq.evaluation` (this module only
re-exports :mod:`fastuq.evaluation.report` and :mod:`fastuq.evaluation.report_html`)."""

from fastuq.evaluation.report import (
    Figure,
    Report,
    SweepSection,
    build_report,
    write_report,
)
from fastuq.evaluation.report_html import LOWER_IS_BETTER, render_html

__all__ = ["LOWER_IS_BETTER", "Figure", "Report", "SweepSection", "build_report",
           "render_html", "write_report"]

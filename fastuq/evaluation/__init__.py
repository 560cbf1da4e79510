"""Evaluation of uncertainty scores against correctness labels, and what is built on it:
what ``fastuq eval``, ``sweep``, ``fit`` and ``report`` compute.

* :mod:`~fastuq.evaluation.tables` -- the evaluation table (AUROC, AUARC, PRR, Brier-Platt,
  ECE, accuracy, N per estimator) and its renderings;
* :mod:`~fastuq.evaluation.labels` -- labels and scores files, joined by ``trajectory_id``;
* :mod:`~fastuq.evaluation.expectations` -- expected metrics checked at their written
  precision;
* :mod:`~fastuq.evaluation.plots` -- reliability diagrams and risk-coverage plots;
* :mod:`~fastuq.evaluation.sauce_data`, :mod:`~fastuq.evaluation.sweeps`,
  :mod:`~fastuq.evaluation.fit` -- SAUCE's inputs packed once, exact hyperparameter sweeps
  and gradient fitting;
* :mod:`~fastuq.evaluation.stack` -- the cross-fitted estimator stack (``fastuq fit
  --stack``, ``fastuq score --method stack``);
* :mod:`~fastuq.evaluation.report` (:mod:`~fastuq.evaluation.report_html`) -- the
  self-contained HTML report.

This module only re-exports (the names ``fastuq.evaluation`` had before it became a
package, and the sweep, fit and report entry points); ``fastuq.sweeps``, ``fastuq.fit`` and
``fastuq.report`` re-export their modules' names as before. Importing it does not import
JAX.
"""

from fastuq.evaluation.expectations import (
    EXPECTABLE,
    Comparison,
    ExpectationCheck,
    check_expectations,
    expected_metrics,
    load_expectations,
    parse_expectations,
    round_like,
)
from fastuq.evaluation.fit import FitResult, fit_sauce
from fastuq.evaluation.labels import (
    drop_skipped,
    join_labels,
    read_labels,
    read_scores,
    read_skipped,
)
from fastuq.evaluation.plots import (
    accuracy_coverage,
    agg_figure,
    plot_reliability,
    plot_risk_coverage,
    reliability_bins,
    write_plots,
)
from fastuq.evaluation.report import Report, build_report, write_report
from fastuq.evaluation.sauce_data import SauceData, load_sauce_data
from fastuq.evaluation.stack import Stack, fit_stack
from fastuq.evaluation.sweeps import sweep
from fastuq.evaluation.tables import (
    METRIC_HEADERS,
    evaluation_table,
    evaluation_tables,
    format_cell,
    format_table,
    table_records,
)

__all__ = [
    "EXPECTABLE", "METRIC_HEADERS", "Comparison", "ExpectationCheck", "FitResult", "Report",
    "SauceData", "Stack", "accuracy_coverage", "agg_figure", "build_report",
    "check_expectations", "drop_skipped", "evaluation_table", "evaluation_tables",
    "expected_metrics", "fit_sauce", "fit_stack",
    "format_cell", "format_table", "join_labels", "load_expectations", "load_sauce_data",
    "parse_expectations", "plot_reliability", "plot_risk_coverage", "read_labels",
    "read_scores", "read_skipped", "reliability_bins", "round_like", "sweep", "table_records",
    "write_plots", "write_report",
]

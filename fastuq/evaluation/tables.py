"""The evaluation table: one row per estimator with AUROC, AUARC, PRR, Brier-Platt, ECE,
accuracy and N from :func:`fastuq.metrics.evaluate` (fractions, full precision), pooled or
per group (:func:`evaluation_table`, :func:`evaluation_tables`), and its text, markdown and
JSON renderings (:func:`format_table`, :func:`format_cell`, :func:`table_records`): what
``fastuq eval`` prints. Scores are uncertainties (higher = less likely correct); labels are
``correct`` (True = 1). Nothing here imports JAX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fastuq.metrics import METRICS, evaluate

__all__ = ["METRIC_HEADERS", "NOT_SCORES", "evaluation_table", "evaluation_tables", "format_cell",
           "format_table", "labels_array", "score_columns", "table_records"]


#: Columns of a scores table that are not scores (:func:`fastuq.score` adds some of them).
NOT_SCORES = ("trajectory_id", "question_id", "protocol", "correct")

#: The column titles of an evaluation table (:func:`format_table`, the HTML report).
METRIC_HEADERS = {
    "estimator": "estimator",
    "auroc": "AUROC",
    "auarc": "AUARC",
    "prr": "PRR",
    "brier_platt": "Brier-Platt",
    "ece": "ECE",
    "accuracy": "accuracy",
    "n": "n",
}
def score_columns(scores: Any) -> Any:
    """Drop the :data:`NOT_SCORES` columns from a table or mapping of scores."""
    from fastuq.metrics.inputs import ScoreColumns

    if isinstance(scores, ScoreColumns):
        keep = [j for j, name in enumerate(scores.names) if name not in NOT_SCORES]
        if len(keep) == len(scores.names):
            return scores
        return ScoreColumns(scores.x[:, keep], [scores.names[j] for j in keep])
    if isinstance(scores, pl.DataFrame):
        return scores.drop([c for c in NOT_SCORES if c in scores.columns])
    if isinstance(scores, pa.Table):
        return scores.drop_columns([c for c in NOT_SCORES if c in scores.column_names])
    if isinstance(scores, Mapping):
        return {k: v for k, v in scores.items() if k not in NOT_SCORES}
    return scores


def labels_array(labels: Any) -> np.ndarray:
    """``labels`` as a NumPy array, with a clear error for null labels in Arrow / Polars."""
    if isinstance(labels, pa.ChunkedArray | pa.Array | pl.Series):
        nulls = labels.null_count() if isinstance(labels, pl.Series) else labels.null_count
        if nulls:
            raise ValueError(f"labels hold {nulls} null value(s); every row needs a label")
        return labels.to_numpy()
    return np.asarray(labels)


def evaluation_table(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    *,
    metrics: Sequence[str] = METRICS,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> pl.DataFrame:
    """One row per estimator: ``estimator``, the ``metrics`` (fractions), ``accuracy``, ``n``.

    Args:
      labels: ``[N]`` bool or 0/1 (``True`` = correct); NumPy, pyarrow or Polars.
      scores: name -> ``[N]`` uncertainty array, or a pyarrow Table / Polars DataFrame of
        score columns (columns named ``trajectory_id``, ``question_id``, ``protocol`` or
        ``correct`` are not scores and are dropped, so the table :func:`fastuq.score`
        returns can be passed as it is).
      metrics: subset of :data:`fastuq.metrics.METRICS`, in the order wanted.
      n_folds, seed, C, n_bins: Platt-scaling folds, fold seed, regularisation (Brier-Platt
        and ECE) and ECE bins; see :func:`fastuq.metrics.evaluate`.

    Returns:
      a Polars DataFrame with columns ``estimator`` (str), one float64 per metric,
      ``accuracy`` (float64, the mean label) and ``n`` (int64), values as fractions in full
      precision (NaN where a metric is undefined, e.g. single-class labels).
    """
    out = evaluate(
        labels_array(labels), score_columns(scores), metrics=metrics, n_folds=n_folds,
        seed=seed, C=C, n_bins=n_bins,
    )
    return _frame(out, metrics)


def _frame(out: Mapping[str, np.ndarray], metrics: Sequence[str]) -> pl.DataFrame:
    """An :func:`fastuq.metrics.evaluate` dict as :func:`evaluation_table`'s DataFrame."""
    return pl.DataFrame(
        {
            "estimator": pl.Series(out["name"].tolist(), dtype=pl.String),
            **{m: pl.Series(out[m], dtype=pl.Float64) for m in metrics},
            "accuracy": pl.Series(out["accuracy"], dtype=pl.Float64),
            "n": pl.Series(out["n"], dtype=pl.Int64),
        }
    )


def evaluation_tables(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    groups: Any,
    *,
    metrics: Sequence[str] = METRICS,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """:func:`evaluation_table` of all rows and of each group's rows: ``(pooled, {group:
    table})``, groups sorted (``fastuq eval --by protocol``).

    ``groups [N]``: a group label per row (NumPy, pyarrow or Polars, e.g. the corpus's
    ``protocol`` column). Each group's table equals :func:`evaluation_table` of that group's
    rows; the rank metrics of all of them come from one sort per score column
    (:func:`fastuq.metrics.evaluate_groups`).
    """
    from fastuq.metrics import evaluate_groups

    pooled, per_group = evaluate_groups(
        labels_array(labels), score_columns(scores), groups, metrics=metrics,
        n_folds=n_folds, seed=seed, C=C, n_bins=n_bins,
    )
    return _frame(pooled, metrics), {k: _frame(v, metrics) for k, v in per_group.items()}


def format_cell(value: Any, column: str, percent: bool, thousands: bool) -> str:
    """One cell of an evaluation table as ``fastuq eval`` prints it: a metric in percent
    with 2 decimals (or 4 decimals), ``n`` with thousands separators when asked, ``nan``."""
    if column == "estimator":
        return str(value)
    if column == "n":
        return f"{int(value):,}" if thousands else str(int(value))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    return f"{value * 100:.2f}" if percent else f"{value:.4f}"


def format_table(df: pl.DataFrame, *, markdown: bool = False, percent: bool = True) -> str:
    """Render an :func:`evaluation_table` for people.

    ``percent=True`` (the paper's units): metrics and accuracy times 100 with 2 decimals;
    ``percent=False``: fractions with 4 decimals. ``n`` is an integer. ``markdown=False``:
    aligned text (estimator left-aligned, numbers right-aligned, a rule under the header);
    ``markdown=True``: a GitHub markdown table (numbers right-aligned). No trailing newline.
    """
    cols = list(df.columns)
    header = [METRIC_HEADERS.get(c, c) for c in cols]
    rows = [
        [format_cell(v, c, percent, thousands=not markdown) for c, v in zip(cols, row, strict=True)]
        for row in df.iter_rows()
    ]
    if markdown:
        def esc(s: str) -> str:
            return s.replace("|", "\\|")

        lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
        lines.append("|" + "|".join("---" if c == "estimator" else "---:" for c in cols) + "|")
        lines += ["| " + " | ".join(esc(s) for s in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            s.ljust(w) if c == "estimator" else s.rjust(w)
            for s, w, c in zip(cells, widths, cols, strict=True)
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def table_records(df: pl.DataFrame) -> dict[str, dict[str, float | int | None]]:
    """``{estimator: {metric: value}}`` of an :func:`evaluation_table`, NaN as ``None``
    (JSON has no NaN), floats in full precision."""
    out: dict[str, dict[str, float | int | None]] = {}
    for row in df.iter_rows(named=True):
        name = row.pop("estimator")
        out[name] = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()
        }
    return out

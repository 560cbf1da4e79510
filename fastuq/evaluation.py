"""Evaluation of uncertainty scores against correctness labels: tables, expectation checks
and plots (what ``fastuq eval`` prints, checks and draws).

* :func:`evaluation_table` -- one row per estimator: AUROC, AUARC, PRR, Brier-Platt, ECE,
  accuracy and N, from :func:`fastuq.metrics.evaluate` (fractions, full precision);
  :func:`format_table` renders it as aligned text or markdown, in percent or fractions.
* :func:`read_labels`, :func:`read_scores`, :func:`join_labels` -- the labels of a corpus and
  a scores file (``trajectory_id`` + score columns), joined by ``trajectory_id`` in corpus
  order, with an error naming the first id that is scored but unlabelled, labelled but
  unscored, or duplicated.
* :func:`load_expectations` / :func:`check_expectations` -- compare computed metrics with
  expected values at the precision each expected number is written with (see
  :func:`check_expectations` for the rounding rule).
* :func:`write_plots`, :func:`plot_reliability`, :func:`plot_risk_coverage` -- PNG reliability
  diagrams (out-of-fold Platt probabilities, 15 equal-width bins, with counts) and a
  risk-coverage plot; they need matplotlib (``pip install "fastuq[plot]"``) and draw with
  the Agg canvas directly, so they neither need a display nor change pyplot's backend.

Scores are uncertainties (higher = less likely correct); labels are ``correct`` (True = 1).
Nothing here imports JAX.
"""

from __future__ import annotations

import decimal
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fastuq.metrics import METRICS, evaluate, platt_oof_probabilities
from fastuq.metrics.ece import bin_edges, bin_index, ece_matrix

__all__ = [
    "EXPECTABLE",
    "METRIC_HEADERS",
    "agg_figure",
    "format_cell",
    "Comparison",
    "ExpectationCheck",
    "accuracy_coverage",
    "check_expectations",
    "drop_skipped",
    "evaluation_table",
    "evaluation_tables",
    "expected_metrics",
    "format_table",
    "join_labels",
    "load_expectations",
    "parse_expectations",
    "plot_reliability",
    "plot_risk_coverage",
    "read_labels",
    "read_scores",
    "read_skipped",
    "reliability_bins",
    "round_like",
    "table_records",
    "write_plots",
]

#: Metrics an expectations file may list per estimator.
EXPECTABLE = (*METRICS, "accuracy")

#: Columns of a scores table that are not scores (:func:`fastuq.score` adds some of them).
_NOT_SCORES = ("trajectory_id", "question_id", "protocol", "correct")

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

# ---------------------------------------------------------------------------- the table


def _score_columns(scores: Any) -> Any:
    """Drop the :data:`_NOT_SCORES` columns from a table or mapping of scores."""
    from fastuq.metrics.inputs import ScoreColumns

    if isinstance(scores, ScoreColumns):
        keep = [j for j, name in enumerate(scores.names) if name not in _NOT_SCORES]
        if len(keep) == len(scores.names):
            return scores
        return ScoreColumns(scores.x[:, keep], [scores.names[j] for j in keep])
    if isinstance(scores, pl.DataFrame):
        return scores.drop([c for c in _NOT_SCORES if c in scores.columns])
    if isinstance(scores, pa.Table):
        return scores.drop_columns([c for c in _NOT_SCORES if c in scores.column_names])
    if isinstance(scores, Mapping):
        return {k: v for k, v in scores.items() if k not in _NOT_SCORES}
    return scores


def _labels_array(labels: Any) -> np.ndarray:
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
        _labels_array(labels), _score_columns(scores), metrics=metrics, n_folds=n_folds,
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
        _labels_array(labels), _score_columns(scores), groups, metrics=metrics,
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


# ------------------------------------------------------------------ labels and joining


def read_labels(corpus: str | os.PathLike, *, chunk_rows: int = 1 << 18) -> pl.DataFrame:
    """``trajectory_id`` (str), ``correct`` (bool) and, when the corpus has it, ``protocol``
    (str) of every record of a corpus, in input order, read by
    :func:`fastuq.io.readers.iter_chunks` as :func:`fastuq.score` reads it (the SAUCE release's
    ``record_uid`` is its ``trajectory_id``).

    Raises ValueError when the corpus has no ``correct`` labels at all (no such field, or
    every value null); rows with a null label are kept as null (see :func:`join_labels`).
    """
    from fastuq.io.readers import iter_chunks

    ids: list[pa.Array] = []
    correct: list[pa.Array] = []
    protocol: list[pa.Array] = []
    for chunk in iter_chunks(corpus, columns=[], optional_columns=["correct", "protocol"],
                             chunk_rows=chunk_rows, validate=False):
        table = chunk.table
        ids.append(table.column("trajectory_id").combine_chunks())
        if "correct" in table.column_names:
            correct.append(table.column("correct").combine_chunks().cast(pa.bool_()))
        else:
            correct.append(pa.nulls(table.num_rows, pa.bool_()))
        if "protocol" in table.column_names:
            protocol.append(table.column("protocol").combine_chunks().cast(pa.string()))
        else:
            protocol.append(pa.nulls(table.num_rows, pa.string()))
    columns = {
        "trajectory_id": pl.Series(pa.chunked_array(ids, pa.string())),
        "correct": pl.Series(pa.chunked_array(correct, pa.bool_())),
    }
    protocol_col = pa.chunked_array(protocol, pa.string())
    if protocol_col.null_count < len(protocol_col):
        columns["protocol"] = pl.Series(protocol_col)
    df = pl.DataFrame(columns)
    _require_labels(df, str(corpus))
    return df


def _require_labels(df: pl.DataFrame, source: str) -> None:
    if df.height and df["correct"].null_count() == df.height:
        raise ValueError(
            f"{source}: no labels: the corpus has no 'correct' values (field correct, bool, "
            f"True = correct); evaluation needs them"
        )
    if df.height == 0:
        raise ValueError(f"{source}: the corpus is empty; nothing to evaluate")


def read_scores(
    path: str | os.PathLike, methods: Sequence[str] | None = None
) -> pl.DataFrame:
    """A scores file (Parquet, CSV or Arrow IPC) as ``trajectory_id`` (str) + score columns.

    ``methods``: the score columns to keep, in that order (ValueError naming a missing one);
    ``None`` or ``["all"]``: every numeric column other than ``trajectory_id``,
    ``question_id``, ``protocol`` and ``correct``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson")):
        raise ValueError(f"{path}: a scores file is Parquet, CSV or Arrow IPC, not JSON lines "
                         "(fastuq score -o writes Parquet)")
    try:
        if name.endswith(".csv"):
            df = pl.read_csv(path, schema_overrides={"trajectory_id": pl.String})
        elif name.endswith((".arrow", ".feather", ".ipc")):
            df = pl.read_ipc(path, memory_map=False)
        else:
            df = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        kind = ("CSV" if name.endswith(".csv") else "Arrow IPC"
                if name.endswith((".arrow", ".feather", ".ipc")) else "Parquet")
        raise ValueError(f"{path}: cannot read it as a {kind} scores file (a scores file is "
                         f"Parquet, CSV or Arrow IPC): {str(exc).splitlines()[0]}") from None
    if "trajectory_id" not in df.columns:
        raise ValueError(f"{path}: no trajectory_id column (columns: {', '.join(df.columns)})")
    numeric = [c for c in df.columns if c not in _NOT_SCORES and df.schema[c].is_numeric()]
    if methods is None or list(methods) == ["all"]:
        if not numeric:
            raise ValueError(f"{path}: no numeric score column besides trajectory_id")
        keep = numeric
    else:
        keep = list(methods)
        for m in keep:
            if m not in df.columns:
                raise ValueError(
                    f"{path}: no score column {m!r} (score columns: {', '.join(numeric)})"
                )
            if m not in numeric:
                raise ValueError(f"{path}: column {m!r} is {df.schema[m]}, not a number")
    return df.select(pl.col("trajectory_id").cast(pl.String), *keep)


def _first_duplicate(ids: pl.Series, what: str) -> None:
    dup = ids.is_duplicated()
    if dup.any():
        first = ids.filter(dup)[0]
        rows = (ids == first).arg_true().to_list()
        raise ValueError(
            f"duplicate trajectory_id {first!r} in the {what} (rows {rows[0]} and {rows[1]}); "
            f"ids must be unique to join scores to labels"
        )


def read_skipped(path: str | os.PathLike) -> list[str | None]:
    """Trajectory ids of a skipped-records list (``fastuq score --on-error skip`` writes one
    JSON object per line with ``source``, ``row``, ``trajectory_id``, ``reason``), in file
    order; ``None`` for a record that had no id. Raises ValueError naming the line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (the skipped list of a skip run)")
    ids: list[str | None] = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {k}: not valid JSON: {exc}") from None
        if not isinstance(rec, dict) or "trajectory_id" not in rec:
            raise ValueError(f"{path}: line {k}: expected an object with a trajectory_id "
                             "(a skipped list from --on-error skip)")
        tid = rec["trajectory_id"]
        ids.append(None if tid is None else str(tid))
    return ids


def drop_skipped(
    labels: pl.DataFrame, scores: pl.DataFrame, skipped_ids: Sequence[str | None]
) -> pl.DataFrame:
    """``labels`` without the records a skip run left out: rows whose id is in
    ``skipped_ids`` and not scored, repeats (after the first) of an id in ``skipped_ids``
    (a skipped duplicate), and null ids when the list holds a record without an id. Every
    other row stays, so a corpus id missing from ``scores`` and not in the list is still an
    error in :func:`join_labels`."""
    named = [s for s in skipped_ids if s is not None]
    ids = labels["trajectory_id"]
    in_list = ids.is_in(pl.Series(named, dtype=pl.String).implode()).fill_null(False)
    scored = ids.is_in(scores["trajectory_id"].implode()).fill_null(False)
    drop = in_list & (~scored | ~ids.is_first_distinct())
    if len(named) < len(skipped_ids):
        drop = drop | ids.is_null()
    return labels.filter(~drop)


def join_labels(labels: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """Join ``scores`` (``trajectory_id`` + score columns) to ``labels`` (``trajectory_id``,
    ``correct``, optionally ``protocol``) by id: those columns and the score columns, one row per
    trajectory in the labels' (corpus) order, whatever the order of the scores -- so AUARC's
    stable tie order is the corpus file order, as when scoring the corpus directly. (For a
    skip run's scores, pass ``labels`` through :func:`drop_skipped` first.)

    Raises ValueError naming the first offending id when an id is null or duplicated (in
    either table), scored but absent from the labels, labelled but unscored, or scored with
    a null label.
    """
    for df, what in ((labels, "corpus"), (scores, "scores")):
        ids = df["trajectory_id"]
        if ids.null_count():
            row = int(ids.is_null().arg_true()[0])
            raise ValueError(f"row {row} of the {what} has no trajectory_id")
        _first_duplicate(ids, what)
    keep = [c for c in ("trajectory_id", "correct", "protocol") if c in labels.columns]
    lab = labels.select(keep).with_row_index("_row")
    extra = scores.join(lab, on="trajectory_id", how="anti")
    if extra.height:
        raise ValueError(
            f"trajectory {extra['trajectory_id'][0]!r} is scored but not in the corpus "
            f"({extra.height} scored id(s) without a label)"
        )
    unscored = lab.join(scores, on="trajectory_id", how="anti")
    if unscored.height:
        raise ValueError(
            f"trajectory {unscored['trajectory_id'][0]!r} of the corpus has no score "
            f"({unscored.height} of {lab.height} trajectories unscored)"
        )
    joined = lab.join(scores, on="trajectory_id", how="inner").sort("_row").drop("_row")
    nulls = joined["correct"].is_null()
    if nulls.any():
        raise ValueError(
            f"trajectory {joined.filter(nulls)['trajectory_id'][0]!r} has no label "
            f"(field correct is null; {int(nulls.sum())} unlabelled)"
        )
    return joined


# ------------------------------------------------------------------------- expectations


def parse_expectations(text: str) -> dict[str, Any]:
    """Parse and validate an expectations JSON text, keeping every number as written.

    Format::

        {"units": "percent",            # or "fraction"; required
         "n": 2000,                     # optional: the number of trajectories
         "estimators": {"sauce": {"auroc": 63.25, "auarc": 80.1}}}

    Metric keys are those of :data:`EXPECTABLE`. Floats are parsed as :class:`Decimal`
    (``json.loads(text, parse_float=Decimal)``), so ``80.10`` keeps its two decimals. Other
    top-level keys (``"description"``, ``"source"``, ...) are ignored. Raises ValueError.
    """
    try:
        spec = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expectations are not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise ValueError("expectations must be a JSON object")
    units = spec.get("units")
    if units not in ("percent", "fraction"):
        raise ValueError(f'expectations need "units": "percent" or "fraction", got {units!r}')
    n = spec.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f'expected "n" must be a non-negative integer, got {n!r}')
    est = spec.get("estimators")
    if not isinstance(est, dict) or not est:
        raise ValueError('expectations need "estimators": {name: {metric: value, ...}, ...}')
    for name, metrics in est.items():
        if not isinstance(metrics, dict) or not metrics:
            raise ValueError(f"expected metrics of {name!r} must be a non-empty object")
        for metric, value in metrics.items():
            if metric not in EXPECTABLE:
                raise ValueError(
                    f"unknown metric {metric!r} for {name!r}; known: {', '.join(EXPECTABLE)}"
                )
            if isinstance(value, bool) or not isinstance(value, Decimal | int):
                raise ValueError(f"expected {name} {metric} must be a number, got {value!r}")
            if not Decimal(value).is_finite():
                raise ValueError(f"expected {name} {metric} must be finite, got {value}")
    return {"units": units, "n": n, "estimators": est}


def load_expectations(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate an expectations file; see :func:`parse_expectations`."""
    path = Path(path)
    try:
        return parse_expectations(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Comparison:
    """One expected number against the computed one.

    ``estimator`` is ``""`` for the sample count ``n``. ``value`` is the computed value in
    the file's units (``None`` when the estimator was not evaluated, NaN when the metric is
    undefined); ``got`` is it rounded to the expected number's decimals (``None`` if
    ``value`` is missing or NaN).
    """

    estimator: str
    metric: str
    expected: Decimal
    value: float | None
    got: Decimal | None

    @property
    def ok(self) -> bool:
        """Whether the rounded computed value equals the expected one."""
        return self.got is not None and self.got == self.expected

    def describe(self) -> str:
        """``"sauce auroc: expected 63.25, got 63.31"``."""
        what = f"{self.estimator} {self.metric}" if self.estimator else self.metric
        if self.value is None:
            return f"{what}: expected {self.expected}, got nothing ({self.estimator!r} was " \
                   f"not evaluated)"
        got = "nan" if self.got is None else str(self.got)
        return f"{what}: expected {self.expected}, got {got}"


@dataclass(frozen=True)
class ExpectationCheck:
    """The result of :func:`check_expectations`."""

    units: str
    comparisons: tuple[Comparison, ...]

    @property
    def passed(self) -> bool:
        """True when every comparison matches."""
        return all(c.ok for c in self.comparisons)

    @property
    def mismatches(self) -> tuple[Comparison, ...]:
        """The comparisons that do not match, in file order."""
        return tuple(c for c in self.comparisons if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: units, passed, and every comparison (expected and rounded values as
        strings, to keep their decimals; the unrounded value as a float)."""
        return {
            "units": self.units,
            "passed": self.passed,
            "comparisons": [
                {
                    "estimator": c.estimator or None,
                    "metric": c.metric,
                    "expected": str(c.expected),
                    "got": None if c.got is None else str(c.got),
                    "value": None if c.value is None or math.isnan(c.value) else c.value,
                    "ok": c.ok,
                }
                for c in self.comparisons
            ],
        }


def round_like(value: float, expected: Decimal | int, *, scale: int = 0) -> Decimal | None:
    """``value * 10**scale`` rounded, half to even, to the decimals ``expected`` is written
    with; ``None`` for NaN. Exact: the float's own binary value, scaled in decimal (no
    float multiplication), is what is rounded."""
    if not math.isfinite(value):
        return None
    exponent = Decimal(expected).as_tuple().exponent
    assert isinstance(exponent, int)
    with decimal.localcontext() as ctx:
        ctx.prec = 1200  # a float64's exact decimal expansion has at most ~770 digits
        exact = Decimal(value).scaleb(scale)
        return exact.quantize(Decimal(1).scaleb(exponent), rounding=decimal.ROUND_HALF_EVEN)


def check_expectations(
    table: pl.DataFrame, expected: Mapping[str, Any] | str | os.PathLike
) -> ExpectationCheck:
    """Compare an :func:`evaluation_table` with expected values at their displayed precision.

    ``expected``: a parsed expectations mapping (:func:`parse_expectations`) or the path of
    an expectations file.

    Rounding rule: each computed value (a float64 fraction) is taken at its exact binary
    value, multiplied by 100 in exact decimal arithmetic when the file's units are
    ``"percent"``, and rounded half to even to as many decimals as the expected number is
    written with (``63.25``: 2; ``80.1``: 1; ``80.10``: 2; ``77``: 0). It matches when the
    rounded value equals the expected number; ``n`` (when given) must equal N exactly. The
    original SAUCE script compares ``round(value * 100, 2)`` with the paper's number; the two
    rules differ only when ``value * 100`` lies within about 1e-14 of a rounding boundary,
    where the float product's own rounding error decides the original's outcome.

    A NaN metric, or an estimator absent from ``table``, is a mismatch.
    """
    if not isinstance(expected, Mapping):
        expected = load_expectations(expected)
    units = expected["units"]
    scale = 2 if units == "percent" else 0
    rows = {r["estimator"]: r for r in table.iter_rows(named=True)}
    comparisons: list[Comparison] = []
    if expected.get("n") is not None:
        n = int(table["n"][0]) if table.height else 0
        comparisons.append(
            Comparison("", "n", Decimal(expected["n"]), float(n), Decimal(n))
        )
    for name, metrics in expected["estimators"].items():
        row = rows.get(name)
        for metric, want in metrics.items():
            want = Decimal(want)
            if row is None or metric not in row:
                comparisons.append(Comparison(name, metric, want, None, None))
                continue
            value = float(row[metric])
            shown = value * 10**scale if math.isfinite(value) else value
            comparisons.append(
                Comparison(name, metric, want, shown, round_like(value, want, scale=scale))
            )
    return ExpectationCheck(units, tuple(comparisons))


def expected_metrics(expected: Mapping[str, Any]) -> tuple[str, ...]:
    """Metrics (of :data:`fastuq.metrics.METRICS`) an expectations mapping lists."""
    wanted = {m for ms in expected["estimators"].values() for m in ms}
    return tuple(m for m in METRICS if m in wanted)


# --------------------------------------------------------------------------------- plots

_PLOT_HINT = 'plots need matplotlib; install it with: pip install "fastuq[plot]"'


def agg_figure(width: float, height: float):
    """A matplotlib Figure on an Agg canvas (no pyplot, no global backend change)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_PLOT_HINT) from exc
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def reliability_bins(
    labels: Any, probabilities: Any, *, n_bins: int = 15
) -> dict[str, np.ndarray]:
    """Per-bin statistics of probabilities of being correct, in ``n_bins`` equal-width bins.

    Bins as :func:`fastuq.metrics.ece`: ``[i/n_bins, (i+1)/n_bins)``, the last closed.
    Returns ``edges [n_bins + 1]``, ``count [n_bins]`` (int64), ``mean_probability`` and
    ``accuracy`` (float64 ``[n_bins]``, NaN in empty bins);
    ``sum(count * |accuracy - mean_probability|) / N`` over non-empty bins is the ECE.
    """
    y = np.asarray(_labels_array(labels), dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"labels {y.shape} and probabilities {p.shape} must be [N] alike")
    idx = bin_index(p, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=p, minlength=n_bins) / count
        acc = np.bincount(idx, weights=y, minlength=n_bins) / count
    return {"edges": bin_edges(n_bins), "count": count, "mean_probability": mean_p,
            "accuracy": acc}


def accuracy_coverage(labels: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    """The risk-coverage curve as accuracy: ``(coverage [N], accuracy [N])`` where
    ``accuracy[k-1]`` is the accuracy of the ``k`` most certain rows (uncertainty ascending,
    stable sort, so ties keep file order) and ``coverage[k-1] = k / N``. Its mean is AUARC.
    """
    y = np.asarray(_labels_array(labels), dtype=np.float64)
    u = np.asarray(scores, dtype=np.float64)
    if u.shape != y.shape or u.ndim != 1:
        raise ValueError(f"labels {y.shape} and scores {u.shape} must be [N] alike")
    k = np.arange(1, y.shape[0] + 1, dtype=np.float64)
    acc = np.cumsum(y[np.argsort(u, kind="stable")]) / k
    return k / y.shape[0], acc


def _thin(n: int, max_points: int = 2000) -> np.ndarray:
    """Indices of at most ``max_points`` points of a curve of ``n``, first and last kept."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


def _compact(count: int) -> str:
    """``987``, ``12.3k``, ``4.56M``: a count short enough to sit above a narrow bar."""
    if count < 10_000:
        return str(count)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= div:
            v = count / div
            return f"{v:.3g}{unit}" if v < 1000 else f"{v:.0f}{unit}"
    return str(count)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "score"


def plot_reliability(
    labels: Any,
    probabilities: Any,
    path: str | os.PathLike,
    *,
    name: str = "score",
    n_bins: int = 15,
    title: str | None = None,
) -> Path:
    """Write a reliability diagram PNG (500 x 600 pixels) of probabilities of being correct.
    ``title``: what the plot shows (e.g. the corpus), put before N and the ECE.

    Top: observed accuracy per bin (bars) against the bin's mean predicted probability
    (points), the diagonal of perfect calibration, and the ECE in the title. Bottom: the
    number of rows in each bin, written above its bar. Returns ``path``.
    """
    b = reliability_bins(labels, probabilities, n_bins=n_bins)
    n = int(b["count"].sum())
    filled = b["count"] > 0
    p = np.asarray(probabilities, dtype=np.float64)
    ece_value = float(ece_matrix(np.asarray(_labels_array(labels)), p[:, None], n_bins)[0])
    width = 1.0 / n_bins
    centers = b["edges"][:-1] + width / 2
    fig = agg_figure(5.0, 6.0)
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.08)
    ax = fig.add_subplot(grid[0])
    hist = fig.add_subplot(grid[1], sharex=ax)
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfect calibration")
    ax.bar(centers[filled], b["accuracy"][filled], width=width * 0.9, color="C0", alpha=0.75,
           edgecolor="C0", label="observed accuracy")
    ax.plot(b["mean_probability"][filled], b["accuracy"][filled], "o", color="C3", ms=4,
            label="mean predicted probability")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("accuracy (fraction correct)")
    ax.set_title(f"{title or name + ': reliability'}, N = {n:,}, ECE = {ece_value * 100:.2f}%",
                 fontsize=10)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.tick_params(labelbottom=False)
    hist.bar(centers, b["count"], width=width * 0.9, color="0.45")
    for x, c in zip(centers[filled], b["count"][filled], strict=True):
        hist.annotate(_compact(int(c)), (x, c), xytext=(0, 2), textcoords="offset points",
                      ha="center", va="bottom", fontsize=6.5)
    hist.set_ylim(0, b["count"].max() * 1.3)
    hist.set_xlabel(f"out-of-fold Platt probability of being correct ({n_bins} bins)")
    hist.set_ylabel("count")
    fig.subplots_adjust(left=0.14, right=0.96, top=0.94, bottom=0.09)
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def plot_risk_coverage(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """Write one risk-coverage PNG (600 x 450 pixels): for each estimator, the accuracy of
    the retained most-certain fraction against coverage (:func:`accuracy_coverage`, AUARC in
    the legend), with the oracle and random (overall accuracy) references. ``title``: what the
    plot shows (e.g. the corpus), put before N. Returns ``path``.
    """
    y = np.asarray(_labels_array(labels)).astype(bool)
    cols = _score_columns(scores)
    if isinstance(cols, pl.DataFrame):
        cols = {c: cols[c].to_numpy() for c in cols.columns}
    elif isinstance(cols, pa.Table):
        cols = {c: cols.column(c).to_numpy() for c in cols.column_names}
    n = y.shape[0]
    if n == 0:
        raise ValueError("no rows to plot")
    fig = agg_figure(6.0, 4.5)
    ax = fig.add_subplot()
    keep = _thin(n)
    k = np.arange(1, n + 1)
    oracle = np.minimum(k, int(y.sum())) / k
    ax.plot(k[keep] / n, oracle[keep], ls="--", color="0.3", lw=1,
            label=f"oracle (AUARC {oracle.mean() * 100:.2f})")
    ax.axhline(y.mean(), ls=":", color="0.5", lw=1,
               label=f"random (accuracy {y.mean() * 100:.2f})")
    for j, (name, u) in enumerate(cols.items()):
        cov, acc = accuracy_coverage(y, np.asarray(u))
        ax.plot(cov[keep], acc[keep], color=f"C{j % 10}", lw=1.5,
                label=f"{name} (AUARC {acc.mean() * 100:.2f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(max(0.0, min(y.mean(), 1.0) - 0.1), 1.02)
    ax.set_xlabel("coverage (fraction kept, most certain first)")
    ax.set_ylabel("accuracy of the kept trajectories")
    ax.set_title(f"{title or 'risk-coverage'}, N = {n:,}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=7)
    fig.subplots_adjust(left=0.12, right=0.97, top=0.92, bottom=0.12)
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def write_plots(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    out_dir: str | os.PathLike,
    *,
    n_bins: int = 15,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
) -> list[Path]:
    """Write ``reliability_<estimator>.png`` per estimator (out-of-fold Platt probabilities
    from :func:`fastuq.metrics.platt_oof_probabilities` with ``n_folds``, ``seed``, ``C``)
    and ``risk_coverage.png`` into ``out_dir`` (created if needed), as a set: they are drawn
    into a temporary folder beside it and moved in together
    (:func:`fastuq.io.writers.atomic_write_files`), so a failure (OSError on a full disk) or
    SIGTERM leaves none of them. Returns the paths written. Reliability diagrams are skipped
    when the probabilities are undefined (single-class labels). Raises ImportError
    suggesting ``pip install "fastuq[plot]"`` when matplotlib is missing (before anything is
    written).
    """
    from fastuq.io.writers import atomic_write_files

    agg_figure(1, 1)  # fail early, before computing anything, when matplotlib is missing
    y = _labels_array(labels)
    cols = _score_columns(scores)
    if isinstance(cols, pl.DataFrame | pa.Table):
        names = list(cols.columns if isinstance(cols, pl.DataFrame) else cols.column_names)
    else:
        cols = dict(cols)
        names = list(cols)
    prob = np.asarray(platt_oof_probabilities(y, cols, n_folds=n_folds, seed=seed, C=C))

    def draw(out: Path) -> list[Path]:
        paths: list[Path] = []
        used: set[str] = set()
        for j, name in enumerate(names):
            if np.isnan(prob[:, j]).any():
                continue
            stem = _safe_name(name)
            while stem in used:
                stem += "_"
            used.add(stem)
            paths.append(plot_reliability(y, prob[:, j], out / f"reliability_{stem}.png",
                                          name=name, n_bins=n_bins))
        paths.append(plot_risk_coverage(y, cols, out / "risk_coverage.png"))
        return paths

    return atomic_write_files(out_dir, draw)

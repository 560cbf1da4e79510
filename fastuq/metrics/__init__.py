"""Evaluation metrics of uncertainty scores against correctness labels, many columns at once.

Conventions shared by every function here:

* ``labels [N]``: bool, or numbers all 0 or 1; correct = 1 (``True``).
* ``scores``: uncertainties (higher = less likely correct), either ``[N]`` (the metric
  returns a Python ``float``) or ``[N, C]`` (it returns a float64 array ``[C]``, one value
  per column, computed for all columns together, without a Python loop over columns). A
  mapping name -> ``[N]`` array, a Polars DataFrame or a pyarrow Table of score columns count
  as ``[N, C]`` in column order.
* NaN or infinite scores raise ValueError naming the column; so do a length mismatch between
  labels and scores, labels other than 0/1, and ``N = 0``.
* Single-class labels (all correct or all wrong) make :func:`auroc`, :func:`prr` and
  :func:`brier_platt` NaN, with an :class:`UndefinedMetricWarning` (Brier-Platt, which fits
  on 4/5 of the rows, needs at least 2 rows of each class). :func:`auarc` and :func:`ece`
  remain defined.

All metrics are unitless: AUROC, AUARC, Brier and ECE lie in [0, 1]; PRR is at most 1
(oracle), 0 for a random ranking, negative when worse than random.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastuq.metrics.ece import ece_matrix
from fastuq.metrics.inputs import (
    LazyColumns,
    UndefinedMetricWarning,
    as_labels,
    as_score_matrix,
    check_finite,
    warn_single_class,
)
from fastuq.metrics.platt import PlattConvergenceWarning, oof_briers_columns, oof_platt
from fastuq.metrics.rank import RANK_METRICS, harmonic_numbers, rank_metrics, rank_metrics_rows

__all__ = [
    "METRICS",
    "PlattConvergenceWarning",
    "UndefinedMetricWarning",
    "auarc",
    "auroc",
    "brier_platt",
    "ece",
    "evaluate",
    "evaluate_groups",
    "platt_oof_probabilities",
    "prr",
]

#: Metric names :func:`evaluate` knows, in its default order.
METRICS = ("auroc", "auarc", "prr", "brier_platt", "ece")

ArrayLike = Any


def _prepare(labels: ArrayLike, scores: ArrayLike, what: str = "scores"):
    y = as_labels(labels)
    x, was_1d, names = as_score_matrix(scores, y.shape[0], what=what)
    check_finite(x, names, what=what)
    return y, x, was_1d


def _shape_out(values: np.ndarray, was_1d: bool) -> float | np.ndarray:
    return float(values[0]) if was_1d else values


def _rank(metric: str, labels: ArrayLike, scores: ArrayLike) -> float | np.ndarray:
    y, x, was_1d = _prepare(labels, scores)
    if metric != "auarc":
        warn_single_class(metric.upper(), int(np.count_nonzero(y)), y.shape[0])
    return _shape_out(rank_metrics(y, x, (metric,))[metric], was_1d)


def auroc(labels: ArrayLike, scores: ArrayLike) -> float | np.ndarray:
    """Area under the ROC curve of ``-scores`` for detecting correct answers.

    Exact, no binning: the Mann-Whitney statistic ``P(u_correct < u_wrong)`` with tied pairs
    counting one half, equal to ``sklearn.metrics.roc_auc_score(labels, -scores)``. Computed
    from one sort per column (average ranks over tie groups). ``labels [N]``, ``scores [N]``
    or ``[N, C]``; returns a float or float64 ``[C]`` in [0, 1]; NaN (with a warning) when
    the labels hold a single class.
    """
    return _rank("auroc", labels, scores)


def auarc(labels: ArrayLike, scores: ArrayLike) -> float | np.ndarray:
    """Area under the accuracy-rejection (accuracy-coverage) curve.

    Rows are sorted by uncertainty ascending with a stable sort, so equal scores keep file
    order; with ``ys`` the labels in that order::

        AUARC = (1/N) sum_{k=1}^{N} (ys[0] + ... + ys[k-1]) / k

    the mean over coverage levels ``k/N`` of the accuracy of the ``k`` most certain rows.
    ``labels [N]``, ``scores [N]`` or ``[N, C]``; returns a float or float64 ``[C]`` in
    [0, 1]. Defined for single-class labels (0 or 1).
    """
    return _rank("auarc", labels, scores)


def prr(labels: ArrayLike, scores: ArrayLike) -> float | np.ndarray:
    """Prediction-rejection ratio: rejection-curve area between random (0) and oracle (1).

    Discretisation: at rejection level ``k/N``, ``k = 0..N-1``, the ``k`` most uncertain rows
    are rejected and ``A_k`` is the accuracy (mean label) of the ``N - k`` retained rows. A
    curve's area is the mean of its ``N`` values ``A_0..A_{N-1}``. Then::

        PRR = (AUC_unc - AUC_rnd) / (AUC_oracle - AUC_rnd)

    where ``AUC_unc`` rejects by the scores, ``AUC_rnd = mean label`` (the expected accuracy
    of a random rejection at every level, analytic), and ``AUC_oracle`` rejects every wrong
    row before any correct one (``= (P/N) (1 + sum_{k=P+1}^{N} 1/k)`` with ``P`` correct).
    Ties are averaged: rows with equal scores are taken in every order with equal weight,
    i.e. ``AUC_unc`` is the expected area, obtained by giving each row the mean label of its
    tie group (so a constant score gives PRR = 0).

    ``labels [N]``, ``scores [N]`` or ``[N, C]``; returns a float or float64 ``[C]``, at most
    1; NaN (with a warning) when the labels hold a single class.
    """
    return _rank("prr", labels, scores)


def _check_platt_args(n_folds: int, C: float | None) -> None:
    if int(n_folds) != n_folds or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    if C is not None and not C > 0:
        raise ValueError(f"C must be positive, or None / inf for no penalty; got {C!r}")


def _platt_defined(metric: str, y: np.ndarray, n_folds: int, C: float | None) -> bool:
    """Whether out-of-fold fits are defined (both classes, at least 2 rows each, and one
    class with at least ``n_folds`` rows); warns when not."""
    _check_platt_args(n_folds, C)
    p = int(np.count_nonzero(y))
    n = y.shape[0]
    if warn_single_class(metric, p, n):
        return False
    if min(p, n - p) < 2:
        warnings.warn(
            f"{metric} needs at least 2 rows of each class for out-of-fold fits (got {p} "
            f"correct of {n}); returning NaN",
            UndefinedMetricWarning,
            stacklevel=4,
        )
        return False
    if max(p, n - p) < n_folds:  # scikit-learn's StratifiedKFold refuses it too
        warnings.warn(
            f"{metric} needs a class with at least {n_folds} rows for {n_folds}-fold "
            f"out-of-fold fits (got {p} correct of {n}); returning NaN",
            UndefinedMetricWarning,
            stacklevel=4,
        )
        return False
    return True


def _platt_or_nan(
    metric: str, y: np.ndarray, x: np.ndarray, n_folds: int, seed: int, C: float | None
) -> np.ndarray | None:
    """Out-of-fold probabilities ``[N, C]``, or None (after a warning) when undefined."""
    if not _platt_defined(metric, y, n_folds, C):
        return None
    if x.shape[1] == 0:
        return np.empty((y.shape[0], 0))
    return oof_platt(y, x, n_folds=n_folds, seed=seed, C=C)


def platt_oof_probabilities(
    labels: ArrayLike,
    scores: ArrayLike,
    *,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
) -> np.ndarray:
    """Out-of-fold Platt-scaled probabilities of being correct, ``[N]`` or ``[N, C]`` float64.

    Folds: ``sklearn.model_selection.StratifiedKFold(n_splits=n_folds, shuffle=True,
    random_state=seed)`` on the labels (one split for every column). For each fold and
    column, the score is standardised with the training folds' mean and (population)
    standard deviation, and a one-feature logistic regression of ``correct`` on it is fitted
    on those folds with scikit-learn's ``LogisticRegression(C=C)`` objective
    ``0.5 w**2 + C sum_i logloss_i`` (L2 on the coefficient only, not the intercept;
    ``C=None`` or ``inf``: unpenalized) -- what ``make_pipeline(StandardScaler(),
    LogisticRegression(C=C))`` fits -- and gives the held-out rows' probabilities. So the
    result does not depend on the scale or offset of a score (``c x + b``, ``c > 0``). The fits
    of all folds and columns run together (Newton's method on the 2 parameters). All NaN,
    with an :class:`UndefinedMetricWarning`, when a class has fewer than 2 rows or neither
    class has ``n_folds``.
    """
    y, x, was_1d = _prepare(labels, scores)
    prob = _platt_or_nan("Platt scaling", y, x, n_folds, seed, C)
    if prob is None:
        prob = np.full(x.shape, np.nan)
    return prob[:, 0] if was_1d else prob


def brier_platt(
    labels: ArrayLike,
    scores: ArrayLike,
    *,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
) -> float | np.ndarray:
    """Brier score ``mean_i (p_i - y_i)**2`` of the out-of-fold Platt probabilities.

    ``p`` comes from :func:`platt_oof_probabilities` (same arguments). ``labels [N]``,
    ``scores [N]`` or ``[N, C]``; returns a float or float64 ``[C]`` in [0, 1] (lower is
    better); NaN (with a warning) for single-class labels or a class with fewer
    than 2 rows or neither with ``n_folds``.
    """
    y, x, was_1d = _prepare(labels, scores)
    prob = _platt_or_nan("Brier-Platt", y, x, n_folds, seed, C)
    if prob is None:
        return _shape_out(np.full(x.shape[1], np.nan), was_1d)
    return _shape_out(_brier(y, prob), was_1d)


def _brier(y: np.ndarray, prob: np.ndarray) -> np.ndarray:
    d = prob - y[:, None]
    return np.einsum("nc,nc->c", d, d) / y.shape[0]


def _check_n_bins(n_bins: int) -> None:
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")


def ece(labels: ArrayLike, probabilities: ArrayLike, *, n_bins: int = 15) -> float | np.ndarray:
    """Expected calibration error with ``n_bins`` equal-width bins on [0, 1].

    ECE needs probabilities of being correct, not uncertainty scores: pass calibrated
    probabilities (for example :func:`platt_oof_probabilities`); :func:`evaluate` computes it
    on the out-of-fold Platt probabilities of each score column. Bin ``i`` is
    ``[i/n_bins, (i+1)/n_bins)``, the last bin closed; with ``n_i`` rows in bin ``i``::

        ECE = sum_i (n_i / N) |mean label_i - mean probability_i|

    (empty bins add nothing). ``labels [N]``, ``probabilities [N]`` or ``[N, C]`` in [0, 1]
    (ValueError otherwise); returns a float or float64 ``[C]`` in [0, 1]. Defined for
    single-class labels.
    """
    _check_n_bins(n_bins)
    y, p, was_1d = _prepare(labels, probabilities, what="probabilities")
    bad = (p < 0) | (p > 1)
    if bad.any():
        j = int(np.flatnonzero(bad.any(axis=0))[0])
        i = int(np.flatnonzero(bad[:, j])[0])
        raise ValueError(
            f"probabilities column {j} is outside [0, 1] (row {i}: {p[i, j]}); ECE needs "
            f"probabilities, not uncertainty scores"
        )
    return _shape_out(ece_matrix(y, p, int(n_bins)), was_1d)


def evaluate(
    labels: ArrayLike,
    scores: ArrayLike,
    *,
    metrics: Sequence[str] = METRICS,
    names: Sequence[str] | None = None,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> dict[str, np.ndarray]:
    """Every requested metric of every score column, as a column table.

    ``scores``: ``[N]``, ``[N, C]``, a mapping name -> ``[N]`` array, a Polars DataFrame or
    a pyarrow Table. Returns a dict of equal-length ``[C]`` arrays (``polars.DataFrame(...)``
    of it is a table with one row per score column):

    * ``"name"``: str, the column names (mapping keys / table columns, else ``names``, else
      ``"score"`` for 1-D scores and ``"score_0"``, ``"score_1"``, ... for a matrix);
    * ``"n"``: int64, N; ``"accuracy"``: float64, the mean label (the same in every row);
    * one float64 ``[C]`` per metric in ``metrics``, in that order: ``"auroc"``, ``"auarc"``,
      ``"prr"`` (computed from one shared sort), ``"brier_platt"`` and ``"ece"`` (ECE of the
      out-of-fold Platt probabilities, which both share; NaN where those are undefined).

    Keyword arguments are those of :func:`brier_platt` and :func:`ece`. Single-class labels
    warn once per undefined metric.
    """
    y, x, col_names = _prepared(labels, scores, metrics, names, n_folds, C, n_bins)
    rank_wanted = tuple(m for m in metrics if m in RANK_METRICS)
    rank = rank_metrics(y, x, rank_wanted) if rank_wanted else {}
    return _table(y, [x[:, j] for j in range(x.shape[1])], col_names, rank, metrics, n_folds,
                  seed, C, n_bins)


def _prepared(labels, scores, metrics, names, n_folds, C, n_bins):
    """The checked arguments of :func:`evaluate` / :func:`evaluate_groups`: ``(labels [N]
    bool, scores x [N, C], column names)``."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {list(METRICS)}")
    _check_n_bins(n_bins)
    _check_platt_args(n_folds, C)
    y = as_labels(labels)
    x, was_1d, col_names = as_score_matrix(scores, y.shape[0])
    c = x.shape[1]
    if names is not None:
        col_names = [str(s) for s in names]
        if len(col_names) != c:
            raise ValueError(f"names has {len(col_names)} entries for {c} score columns")
    elif col_names is None:
        col_names = ["score"] if was_1d else [f"score_{j}" for j in range(c)]
    check_finite(x, col_names)
    return y, x, col_names


def _table(y, columns, col_names, rank, metrics, n_folds, seed, C, n_bins):
    """:func:`evaluate`'s table of the rows with labels ``y [N]`` and score ``columns`` (a
    sequence of ``[N]``, read by index), given their rank metrics ``rank`` (name -> ``[C]``):
    single-class warnings and NaNs, then Brier-Platt and ECE."""
    n, c = y.shape[0], len(col_names)
    n_pos = int(np.count_nonzero(y))
    out: dict[str, np.ndarray] = {
        "name": np.array(col_names, dtype=str),
        "n": np.full(c, n, np.int64),
        "accuracy": np.full(c, n_pos / n),
    }
    for m, values in rank.items():
        if m != "auarc":
            warn_single_class(m.upper(), n_pos, n)
        single = m != "auarc" and (n_pos == 0 or n_pos == n)
        out[m] = np.full(c, np.nan) if single else values
    if "brier_platt" in metrics or "ece" in metrics:
        if _platt_defined("Platt scaling (Brier-Platt, ECE)", y, n_folds, C):
            brier, ece_values = oof_briers_columns(y, columns, n_folds=n_folds, seed=seed, C=C,
                                                   n_bins=int(n_bins))
            out.update({"brier_platt": brier, "ece": ece_values})
        else:
            out.update({m: np.full(c, np.nan) for m in ("brier_platt", "ece")})
    return {k: out[k] for k in ("name", "n", "accuracy", *metrics)}


def group_codes(groups: ArrayLike, n: int) -> tuple[np.ndarray, list[str]]:
    """``(codes [N] int32, names)`` of a group label per row (NumPy, pyarrow or Polars;
    strings or numbers), names sorted; one hash pass for Arrow and Polars columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    module = type(groups).__module__ or ""
    if module.startswith("polars"):
        groups = groups.to_arrow()
    if not isinstance(groups, pa.Array | pa.ChunkedArray):
        groups = pa.array(np.asarray(groups).astype(str))
    if len(groups) != n:
        raise ValueError(f"length mismatch: groups have {len(groups)} rows but labels have {n}")
    if groups.null_count:
        raise ValueError(f"groups hold {groups.null_count} null value(s); every row needs one")
    enc = pc.dictionary_encode(groups.cast(pa.string()))
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.unify_dictionaries().combine_chunks() if enc.num_chunks else pa.array(
            [], pa.dictionary(pa.int32(), pa.string()))
    names = enc.dictionary.to_pylist()
    order = np.argsort(np.array(names, dtype=object), kind="stable") if names else \
        np.empty(0, np.int64)
    rank = np.empty(len(names), np.int32)
    rank[order] = np.arange(len(names), dtype=np.int32)
    codes = rank[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)] if n else \
        np.empty(0, np.int32)
    return codes, [names[i] for i in order]


def evaluate_groups(
    labels: ArrayLike,
    scores: ArrayLike,
    groups: ArrayLike,
    *,
    metrics: Sequence[str] = METRICS,
    names: Sequence[str] | None = None,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """:func:`evaluate` of all rows and of each group's rows (e.g. each protocol): ``(pooled,
    {group: table})``, groups in sorted order, each table what :func:`evaluate` gives for
    that group's rows alone (its own folds for Brier-Platt and ECE).

    ``groups [N]``: a group label per row (NumPy, pyarrow or Polars; no nulls). The rank
    metrics of every group come from the pooled sort of each column (a stable order
    restricted to a subset is the subset's stable order), so grouping adds no sort.
    """
    y, x, col_names = _prepared(labels, scores, metrics, names, n_folds, C, n_bins)
    n, c = x.shape
    codes, group_names = group_codes(groups, n)
    members = [codes == g for g in range(len(group_names))]

    rank_wanted = tuple(m for m in metrics if m in RANK_METRICS)
    pooled_rank = {m: np.full(c, np.nan) for m in rank_wanted}
    group_rank = {m: np.full((c, len(group_names)), np.nan) for m in rank_wanted}
    if rank_wanted and c:
        # float64 columns: one at a time (Polars' arg_sort of each uses every core; two
        # columns at once would double the sort temporaries, about 0.5 GB per 1e7 rows)
        threads = 1 if x.dtype == np.float64 and n >= 1 << 20 else None
        pooled_rank, group_rank = rank_metrics_rows(y, x.T, rank_wanted, subsets=members,
                                                    threads=threads)

    # the harmonic numbers of each length ranked (2 float64 arrays per length) are not
    # needed by the Platt fits: hand their memory back before those run
    harmonic_numbers.cache_clear()

    def table(keep, columns, rank):
        return _table(y if keep is None else y[keep], columns, col_names, rank, metrics,
                      n_folds, seed, C, n_bins)

    pooled = table(None, [x[:, j] for j in range(c)], pooled_rank)
    per_group = {}
    for g, name in enumerate(group_names):
        keep = members[g]
        # each group's column is gathered when a Platt worker takes it
        columns = LazyColumns(c, lambda j, keep=keep: x[keep, j])
        per_group[name] = table(keep, columns, {m: group_rank[m][:, g] for m in rank_wanted})
    return pooled, per_group

from fastuq._lazy import submodule_getattr  # noqa: E402

__getattr__ = submodule_getattr(__name__)  # its other modules load on first access

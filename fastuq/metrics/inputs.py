"""Validation and coercion of the inputs shared by every metric in :mod:`fastuq.metrics`.

Labels become a boolean ``[N]`` array (``True`` = correct). Scores become a 2-D array
``[N, C]`` of float32 or float64 (float32 and float64 are kept as they are, so that no copy
of a large float32 matrix is made; every other dtype becomes float64), plus whether the
input was 1-D and the column names, if any were given.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "UndefinedMetricWarning",
    "as_labels",
    "as_score_matrix",
    "check_finite",
    "warn_single_class",
]


class UndefinedMetricWarning(UserWarning):
    """A metric is undefined for the given labels (for example, only one class) and is NaN."""


def as_labels(labels: Any) -> np.ndarray:
    """Return ``labels`` as a boolean ``[N]`` array; ``True`` means correct.

    Accepts booleans or numbers that are all 0 or 1. Raises ValueError otherwise, for a
    label array that is not 1-D, and for an empty one.
    """
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D [N], got shape {y.shape}")
    if y.shape[0] == 0:
        raise ValueError("labels are empty (N = 0): no metric is defined")
    if y.dtype == np.bool_:
        return y
    if y.dtype.kind not in "iuf":
        raise ValueError(f"labels must be bool or 0/1 numbers, got dtype {y.dtype}")
    bad = (y != 0) & (y != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"labels must be 0 or 1 (correct = 1); row {i} holds {y[i]!r}")
    return y == 1


def _table_columns(scores: Any) -> tuple[list[str], list[np.ndarray]] | None:
    """Columns of a Polars DataFrame or pyarrow Table, or None for anything else."""
    module = type(scores).__module__ or ""
    if module.startswith("polars") and hasattr(scores, "get_columns"):
        names = list(scores.columns)
        cols = [s.to_numpy() for s in scores.get_columns()]
        return names, cols
    if module.startswith("pyarrow") and hasattr(scores, "column_names"):
        names = list(scores.column_names)
        cols = [scores.column(i).to_numpy(zero_copy_only=False) for i in range(len(names))]
        return names, cols
    return None


def _as_float(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float32 or x.dtype == np.float64:
        return x
    if x.dtype == np.float16:
        return x.astype(np.float32)
    try:
        return x.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"scores must be numeric, got dtype {x.dtype}") from err


def as_score_matrix(
    scores: Any, n: int, *, what: str = "scores"
) -> tuple[np.ndarray, bool, list[str] | None]:
    """Return ``(x [N, C], was_1d, names)`` for ``scores``.

    ``scores`` is an array ``[N]`` or ``[N, C]``, a mapping name -> ``[N]`` array (columns in
    the mapping's order), or a Polars DataFrame / pyarrow Table of score columns. Raises
    ValueError when the number of rows is not ``n`` or the shape is not 1-D or 2-D.
    Finiteness is checked separately by :func:`check_finite`.
    """
    names: list[str] | None = None
    table = _table_columns(scores)
    if table is not None or isinstance(scores, Mapping):
        if table is not None:
            names, cols = table
        else:
            names = [str(k) for k in scores]
            cols = [np.asarray(v) for v in scores.values()]
        for name, col in zip(names, cols, strict=True):
            if col.ndim != 1 or col.shape[0] != n:
                raise ValueError(
                    f"{what} column {name!r} has shape {col.shape}; expected [{n}] to match "
                    f"the labels"
                )
        if not cols:
            return np.empty((n, 0), np.float64), False, names
        dtype = np.result_type(*[_as_float(c[:0]) for c in cols])
        x = np.empty((n, len(cols)), dtype)
        for j, col in enumerate(cols):
            x[:, j] = _as_float(col)
        return x, False, names

    x = _as_float(np.asarray(scores))
    if x.ndim not in (1, 2):
        raise ValueError(f"{what} must be [N] or [N, C], got shape {x.shape}")
    if x.shape[0] != n:
        raise ValueError(f"length mismatch: {what} have {x.shape[0]} rows but labels have {n}")
    if x.ndim == 1:
        return x[:, None], True, None
    return x, False, None


def check_finite(x: np.ndarray, names: Sequence[str] | None = None, *, what: str = "scores"):
    """Raise ValueError naming the first column (and row) of ``x [N, C]`` that is not finite."""
    finite = np.isfinite(x)
    ok = finite.all(axis=0)
    if ok.all():
        return
    j = int(np.flatnonzero(~ok)[0])
    i = int(np.flatnonzero(~finite[:, j])[0])
    label = f" ({names[j]!r})" if names is not None else ""
    raise ValueError(
        f"{what} column {j}{label} holds a NaN or infinite value (first at row {i}: {x[i, j]})"
    )


def warn_single_class(metric: str, n_pos: int, n: int) -> bool:
    """Warn and return True when the labels hold a single class (``n_pos`` in {0, n})."""
    if 0 < n_pos < n:
        return False
    which = "correct" if n_pos == n else "incorrect"
    warnings.warn(
        f"{metric} is undefined when every label is {which} (N = {n}); returning NaN",
        UndefinedMetricWarning,
        stacklevel=3,
    )
    return True

"""Validation and coercion of the inputs shared by every metric in :mod:`fastuq.metrics`.

Labels become a boolean ``[N]`` array (``True`` = correct). Scores become a 2-D array
``[N, C]`` of float32 or float64 (float32 and float64 are kept as they are, so that no copy
of a large float32 matrix is made; every other dtype becomes float64), plus whether the
input was 1-D and the column names, if any were given.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
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


def _table_columns(scores: Any) -> tuple[list[str], Any] | None:
    """Names and a lazy sequence of the columns (NumPy ``[N]``, converted when read) of a
    Polars DataFrame or pyarrow Table, or None for anything else."""
    module = type(scores).__module__ or ""
    if module.startswith("polars") and hasattr(scores, "get_columns"):
        series = scores.get_columns()
        return list(scores.columns), LazyColumns(len(series), lambda j: series[j].to_numpy())
    if module.startswith("pyarrow") and hasattr(scores, "column_names"):
        return list(scores.column_names), LazyColumns(
            scores.num_columns,
            lambda j: scores.column(j).to_numpy(zero_copy_only=False))
    return None


class LazyColumns:
    """A sequence of ``n`` columns made by ``get(j)`` when read (one column in memory at a
    time)."""

    def __init__(self, n: int, get) -> None:
        self._n, self._get = n, get

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, j: int) -> np.ndarray:
        if not 0 <= j < self._n:
            raise IndexError(j)
        return self._get(j)

    def __iter__(self):
        return (self._get(j) for j in range(self._n))


def _chunks(column: Any) -> list:
    """The chunks of a pyarrow ChunkedArray, or ``[column]`` for an Array or NumPy array."""
    chunks = getattr(column, "chunks", None)
    return list(chunks) if chunks is not None else [np.asarray(column) if not hasattr(
        column, "to_numpy") else column]


def _numpy_dtype(chunks: list) -> np.dtype:
    """The NumPy dtype a column of ``chunks`` converts to (an Arrow type's own)."""
    first = chunks[0] if chunks else None
    if isinstance(first, np.ndarray):
        return first.dtype
    if first is None:
        return np.dtype(np.float64)
    try:
        return np.dtype(first.type.to_pandas_dtype())
    except (NotImplementedError, TypeError):
        return np.dtype(object)


def _as_float(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float32 or x.dtype == np.float64:
        return x
    if x.dtype == np.float16:
        return x.astype(np.float32)
    try:
        return x.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"scores must be numeric, got dtype {x.dtype}") from err


class ScoreColumns(Mapping):
    """Score columns kept as one column-major matrix: a read-only mapping name -> ``[N]``
    column view of ``x [N, C]`` that :func:`as_score_matrix` takes as it is (no copy), so a
    caller can drop the table the scores came from before the metrics run."""

    def __init__(self, x: np.ndarray, names: Sequence[str]) -> None:
        if x.ndim != 2 or x.shape[1] != len(names):
            raise ValueError(f"{len(names)} names for a score matrix of shape {x.shape}")
        self.x = x
        self.names = [str(n) for n in names]

    @classmethod
    def from_table(cls, table: Any) -> ScoreColumns:
        """The columns of a pyarrow Table or Polars DataFrame, converted one at a time."""
        x, _, names = as_score_matrix(table, len(table))
        return cls(x, names or [])

    @classmethod
    def consume(cls, columns: list, names: Sequence[str], n: int, *,
                after_each: Callable[[], None] | None = None) -> ScoreColumns:
        """The ``n``-row score columns in the list ``columns`` (pyarrow ChunkedArrays or
        Arrays, or NumPy ``[N]``), copied chunk by chunk into one column-major matrix of
        their common float dtype (as :func:`as_score_matrix`: float32 stays float32, other
        numbers become float64). Each list entry is set to ``None`` once copied, so that a
        column whose only reference was the list is freed before the next one is copied
        (the peak holds the matrix and the columns not yet copied, not two copies of every
        score); ``after_each()`` is called after each column (e.g. to hand the freed memory
        back to the system). ValueError when the names and columns differ in number or a
        column does not hold ``n`` rows."""
        names = [str(name) for name in names]
        if len(names) != len(columns):
            raise ValueError(f"{len(names)} names for {len(columns)} score columns")
        dtypes = []
        for name, col in zip(names, columns, strict=True):
            chunks = _chunks(col)
            rows = sum(len(c) for c in chunks)
            if rows != n:
                raise ValueError(f"length mismatch: score column {name!r} has {rows} rows, "
                                 f"expected {n}")
            dtypes.append(_as_float(np.empty(0, _numpy_dtype(chunks))).dtype)
        x = np.empty((len(names), n), np.result_type(*dtypes) if dtypes else np.float64).T
        for j in range(len(names)):
            r0 = 0
            for chunk in _chunks(columns[j]):
                part = chunk if isinstance(chunk, np.ndarray) else \
                    chunk.to_numpy(zero_copy_only=False)
                x[r0 : r0 + part.shape[0], j] = part
                r0 += part.shape[0]
            part = None  # noqa: F841 (the last chunk's view goes with its column)
            columns[j] = None
            if after_each is not None:
                after_each()
        return cls(x, names)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.x[:, self.names.index(name)]

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


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
    if isinstance(scores, ScoreColumns):
        if scores.x.shape[0] != n:
            raise ValueError(f"length mismatch: {what} have {scores.x.shape[0]} rows but "
                             f"labels have {n}")
        return _as_float(scores.x), False, list(scores.names)
    table = _table_columns(scores)
    if table is not None or isinstance(scores, Mapping):
        if table is not None:
            names, cols = table
        else:
            names = [str(k) for k in scores]
            cols = [np.asarray(v) for v in scores.values()]
        if not len(cols):
            return np.empty((n, 0), np.float64), False, names
        if len(names) != len(cols):
            raise ValueError(f"{len(names)} names for {len(cols)} {what} columns")
        x = None
        for j, (name, col) in enumerate(zip(names, cols, strict=False)):
            col = np.asarray(col)
            if col.ndim != 1 or col.shape[0] != n:
                raise ValueError(
                    f"{what} column {name!r} has shape {col.shape}; expected [{n}] to match "
                    f"the labels"
                )
            col = _as_float(col)
            if x is None:
                dtypes = [col.dtype] if isinstance(cols, LazyColumns) else [
                    _as_float(np.asarray(c)[:0]).dtype for c in cols]
                # column-major: each column contiguous (the metrics read column by column)
                x = np.empty((len(names), n), np.result_type(*dtypes, col.dtype)).T
            elif col.dtype != x.dtype and np.result_type(col.dtype, x.dtype) != x.dtype:
                x = x.astype(np.result_type(col.dtype, x.dtype), order="F")
            x[:, j] = col
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
    """Raise ValueError naming the first column (and row) of ``x [N, C]`` that is not finite
    (a column-major ``x`` is checked a column at a time: no ``[N, C]`` temporary)."""
    if x.flags.f_contiguous:
        ok = np.array([np.isfinite(x[:, j]).all() for j in range(x.shape[1])], bool)
    else:
        ok = np.isfinite(x).all(axis=0)
    if ok.all():
        return
    j = int(np.flatnonzero(~ok)[0])
    i = int(np.flatnonzero(~np.isfinite(x[:, j]))[0])
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

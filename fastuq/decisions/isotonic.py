"""Isotonic calibration maps with NumPy: :func:`isotonic_fit` (pool adjacent violators, the
non-increasing least-squares fit of labels on uncertainty scores, kept as the points where it
changes) and :func:`isotonic_predict` (linear interpolation between them, the end values
outside, clipped to [0, 1], NaN for NaN). The maps of
:class:`fastuq.decisions.calibration.Calibrator` with ``method="isotonic"``; scikit-learn's
``IsotonicRegression(increasing=False, out_of_bounds="clip")`` gives the same thresholds and
values (tested).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["isotonic_fit", "isotonic_predict"]

#: Below this many blocks the PAV finishes with the stack algorithm.
_STACK_BLOCKS = 64


def _pav_increasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The non-decreasing fit ``[n]`` of values ``y [n]`` with weights ``w [n] > 0`` (least
    squares): pool adjacent violators. Every run of blocks whose means do not increase is
    pooled in one vectorised pass (a valid PAV merge: the pooled means keep violating down
    the run, and neighbours with equal means are equal in the solution); when a pass pools
    less than an eighth of the blocks, the rest runs the stack algorithm over blocks."""
    s = y * w
    wt = w.astype(np.float64, copy=True)
    start = np.arange(y.shape[0])
    while s.shape[0] > 1:
        mean = s / wt
        merge = mean[:-1] >= mean[1:]
        if not merge.any():
            break
        keep = np.ones(s.shape[0], bool)
        keep[1:] = ~merge
        first = np.flatnonzero(keep)
        before = s.shape[0]
        s, wt, start = np.add.reduceat(s, first), np.add.reduceat(wt, first), start[first]
        if s.shape[0] > before - before // 8 and s.shape[0] > _STACK_BLOCKS:
            s, wt, start = _pav_stack(s, wt, start)
            break
    lengths = np.diff(np.append(start, y.shape[0]))
    return np.repeat(s / wt, lengths)


def _pav_stack(s: np.ndarray, wt: np.ndarray, start: np.ndarray):
    """The stack PAV over blocks (sums ``s``, weights ``wt``, first indices ``start``)."""
    bs: list[float] = []
    bw: list[float] = []
    b0: list[int] = []
    for si, wi, i0 in zip(s.tolist(), wt.tolist(), start.tolist(), strict=True):
        bs.append(si)
        bw.append(wi)
        b0.append(i0)
        while len(bs) > 1 and bs[-2] / bw[-2] >= bs[-1] / bw[-1]:
            si, wi = bs.pop(), bw.pop()
            b0.pop()
            bs[-1] += si
            bw[-1] += wi
    return np.asarray(bs), np.asarray(bw), np.asarray(b0, np.int64)


def isotonic_fit(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """The isotonic map of uncertainty ``scores [N]`` to the probability of ``labels [N]``
    (bool, correct = True): ``(thresholds, values)`` float64, thresholds ascending and values
    non-increasing, the points where the fitted step function changes (module doc). Tied
    scores are pooled first (their mean label); the fit is the non-increasing function
    closest to the labels in squared error. ValueError on NaN or infinite scores or no rows.
    """
    x = np.asarray(scores, np.float64)
    y = np.asarray(labels, np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"scores {x.shape} and labels {y.shape} must be [N] alike")
    if not x.shape[0]:
        raise ValueError("isotonic calibration needs at least one row")
    if not np.isfinite(x).all():
        raise ValueError("isotonic calibration: scores must be finite")
    ux, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=y, minlength=ux.shape[0]) / counts
    # non-increasing in x: the non-decreasing fit of the reversed sequence, reversed back
    fitted = _pav_increasing(means[::-1], counts[::-1].astype(np.float64))[::-1]
    keep = np.ones(fitted.shape[0], bool)
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return ux[keep], np.clip(fitted[keep], 0.0, 1.0)


def isotonic_predict(scores: Any, thresholds: Any, values: Any) -> np.ndarray:
    """The isotonic map ``(thresholds, values)`` applied to ``scores`` (any shape): linear
    interpolation, the end values outside the thresholds, clipped to [0, 1], NaN for NaN."""
    x = np.asarray(scores, np.float64)
    p = np.interp(x, np.asarray(thresholds, np.float64), np.asarray(values, np.float64))
    return np.clip(p, 0.0, 1.0)
